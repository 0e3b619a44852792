"""The bag format (no ROS imports): a rosbag2-compatible MCAP file plus `metadata.yaml`.

- `writer.BagWriter`: the one writer (docs/recording.md);
- `reader`: the one reader — `open_bag` (metadata, damage, numpy streams) and `IndexedBag`
  (seekable raw messages in log-time order, for replay and `info`), over `indexed`;
- `scan` over `records`: the crash-tolerant record-by-record scan under `open_bag`, `recover` and
  bags still growing; `integrity`: what a bag's parts say about each other;
- `cdr`: the one CDR codec; `msgdefs`: `.msg` definitions with RIHS01 hashes;
- `metadata`: rosbag2 `metadata.yaml` v9, QoS-profile YAML and `find_mcap`;
- `recover` (the verb), `copy` and `fix_schemas`: new bags from what survives of an old one.
"""
