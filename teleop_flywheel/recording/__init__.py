"""Raw MCAP recording (no ROS imports): rosbag2-compatible bags, one per episode.

- `writer.BagWriter`: the one writer (see docs/recording.md)
- `reader.open_bag`: the one reader (metadata, damage, numpy streams)
- `cdr`: the one CDR codec (header stamps and strings from raw bytes, sequence-gap drop counting)
- `msgdefs`: `.msg` definitions with dependencies and RIHS01 hashes from installed packages
- `metadata`: rosbag2 `metadata.yaml` v9 and QoS-profile YAML
- `clock_probe`: the rig's PTP/chrony offset through a fixed mechanism
- `recover`: `teleop-flywheel recover`; `info`: `teleop-flywheel info`
"""
