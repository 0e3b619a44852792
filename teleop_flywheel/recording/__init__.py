"""Raw MCAP recording (no ROS imports): rosbag2-compatible bags, one per episode.

- `writer.BagWriter`: the one writer (see docs/recording.md)
- `episode_recorder.EpisodeRecorder`: an episode's start/stop/discard/write over the writer
- `reader`: the one reader — `open_bag` (metadata, damage, numpy streams) and `IndexedBag`
  (seekable raw messages in log-time order, for replay and `info`)
- `scan`: the crash-tolerant record-by-record scan under `open_bag` and `recover`
- `cdr`: the one CDR codec (decoders, encoders, the recorder's fixed-offset reads, drop counting)
- `msgdefs`: `.msg` definitions with dependencies and RIHS01 hashes from installed packages
- `metadata`: rosbag2 `metadata.yaml` v9, QoS-profile YAML, and `find_mcap` (a bag's file)
- `clock_probe`: the rig's PTP/chrony offset through a fixed mechanism
- `recover`: `teleop-flywheel recover`; `info`: `teleop-flywheel info`
"""
