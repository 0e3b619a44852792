"""Raw MCAP recording (no ROS imports): rosbag2-compatible bags, one per episode.

- `mcap/`: the bag format itself — the one writer, the reader, the crash-tolerant record scan,
  the CDR codec, message definitions, `metadata.yaml`, and `recover` of a crashed bag;
- `recorder/`: the ROS-free episode recorder the recorder node drives — start/stop/discard, the
  verdict at stop, the rig's clock probe and the session's output folder.
"""
