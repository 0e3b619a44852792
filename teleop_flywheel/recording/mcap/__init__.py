"""The bag format (no ROS imports): a rosbag2-compatible MCAP file plus `metadata.yaml`.

- `writer.BagWriter`: the one writer (docs/recording.md);
- `reader`: the one reader — `open_bag` (metadata, damage, numpy streams), `open_indexed`
  (seekable raw messages in log-time order, for replay and `info`) and, for a bag still growing,
  `FollowMcap`; `exceptions`: every error the format raises;
- `scan`: the crash-tolerant record-by-record scan under `open_bag`, `recover` and
  bags still growing; `integrity`: what a bag's parts say about each other;
- `cdr`: the one CDR codec; `msgdefs`: `.msg` definitions with RIHS01 hashes;
- `metadata`: rosbag2 `metadata.yaml` v9, QoS-profile YAML and `find_mcap`;
- `recover` (`teleop-flywheel recover`'s library), `copy` and `upgrade` (what `migrate` does to
  an older bag): new bags from what survives of an old one;
- `player`: a bag paced in real time with play, pause and seek (`replay` serves it).
"""
