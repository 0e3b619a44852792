"""Raw MCAP recording (no ROS imports): rosbag2-compatible bags, one per episode.

- `bag_writer.BagWriter`: the writer (stable API; see docs/recording.md)
- `msgdefs`: `.msg` definitions with dependencies and RIHS01 hashes from installed packages
- `metadata`: rosbag2 `metadata.yaml` v9 and QoS-profile YAML
- `streams`: header stamps / strings from CDR bytes, sequence-gap drop counting, PTP offset
- `recover`: `teleop-flywheel recover`; `info`: `teleop-flywheel info`
"""
