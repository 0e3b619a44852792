"""Bags written the way other tools write them, from the messages of one of ours (no ROS import).

A rig that records with `ros2 bag record -s mcap` produces a rosbag2 bag with none of our episode
metadata: header stamps from the drivers (ROS time), `log_time` the receive time, `publish_time` the
DDS send time, channel metadata with the offered QoS and type hash, a `rosbag2` metadata record,
chunk CRCs but no data CRC, and a metadata.yaml without `custom_data`. The data engine must
validate and convert such a bag to the same frames as our recorder's bag of the same session, so
the fixtures are written by writers that are not ours:

- `write_with_rosbags`: rosbags' rosbag2 `Writer` with its MCAP storage plugin (definitions from
  rosbags' own type store, its own chunking, its own metadata.yaml). rosbags stores one timestamp,
  so its `publish_time` equals `log_time`;
- `write_with_mcap`: the `mcap` library laid out as rosbag2's MCAP storage lays it out (profile
  `ros2`, `<name>_0.mcap`, zstd chunks with CRCs, no data CRC, `publish_time` = the send time kept
  from the source bag), with the message definitions from rosbags' type store and metadata.yaml
  dumped by PyYAML in rosbag2's v9 shape.

Both copy every message's CDR bytes, receive time and (mcap) publish time unchanged, in receive
order.
"""
from __future__ import annotations

from pathlib import Path

import yaml
from mcap.writer import CompressionType, Writer
from rosbags.rosbag2 import StoragePlugin
from rosbags.rosbag2 import Writer as RosbagsWriter
from rosbags.typesys import Stores, get_typestore
from rosbags.typesys.store import Typestore

from teleop_flywheel.recording.mcap.reader import RawMessage, open_indexed

QOS_RELIABLE = ("- history: keep_last\n  depth: 10\n  reliability: reliable\n  durability: volatile\n"
                "  deadline:\n    sec: 9223372036\n    nsec: 854775807\n  lifespan:\n    sec: 9223372036\n"
                "    nsec: 854775807\n  liveliness: automatic\n  liveliness_lease_duration:\n    sec: 9223372036\n"
                "    nsec: 854775807\n  avoid_ros_namespace_conventions: false")


def _messages(src: Path) -> tuple[dict[int, tuple[str, str]], list[RawMessage]]:
    """({channel id: (topic, type)}, messages in receive order) of one of our bags."""
    bag = open_indexed(src)
    channels = {cid: (ch.topic, ch.schema_name) for cid, ch in bag.channels.items()}
    return channels, list(bag.messages())


def write_with_rosbags(src: Path, dest: Path) -> Path:
    """The messages of bag `src` as a rosbag2 MCAP bag written by rosbags (no episode metadata)."""
    store = get_typestore(Stores.LATEST)
    channels, messages = _messages(src)
    with RosbagsWriter(dest, version=9, storage_plugin=StoragePlugin.MCAP) as writer:
        conns = {cid: writer.add_connection(topic, type_name, typestore=store)
                 for cid, (topic, type_name) in sorted(channels.items())}
        for m in messages:
            writer.write(conns[m.channel_id], m.log_time, m.data)
    return dest


def write_with_mcap(src: Path, dest: Path) -> Path:
    """The messages of bag `src` laid out as `ros2 bag record -s mcap` writes them (no episode metadata)."""
    store = get_typestore(Stores.LATEST)
    channels, messages = _messages(src)
    dest.mkdir(parents=True)
    name = f"{dest.name}_0.mcap"
    counts = {cid: 0 for cid in channels}
    with open(dest / name, "xb") as f:
        w = Writer(f, chunk_size=768 * 1024, compression=CompressionType.ZSTD, enable_crcs=True,
                   enable_data_crcs=False)
        w.start(profile="ros2", library="libmcap 1.4.0")
        schema_ids: dict[str, int] = {}
        ids: dict[int, int] = {}
        for cid, (topic, type_name) in sorted(channels.items()):
            if type_name not in schema_ids:
                text, _ = store.generate_msgdef(type_name, ros_version=2)
                schema_ids[type_name] = w.register_schema(type_name, "ros2msg", text.encode())
            ids[cid] = w.register_channel(topic, "cdr", schema_ids[type_name], {
                "offered_qos_profiles": QOS_RELIABLE, "topic_type_hash": store.hash_rihs01(type_name)})
        for m in messages:
            w.add_message(ids[m.channel_id], log_time=m.log_time, publish_time=m.publish_time, data=m.data,
                          sequence=0)
            counts[m.channel_id] += 1
        start = min(m.log_time for m in messages)
        info = _metadata_yaml(name, channels, counts, start, max(m.log_time for m in messages) - start, store)
        w.add_metadata("rosbag2", {"serialized_metadata": yaml.safe_dump(info, sort_keys=False)})
        w.finish()
    (dest / "metadata.yaml").write_text(yaml.safe_dump({"rosbag2_bagfile_information": info}, sort_keys=False))
    return dest


def _metadata_yaml(name: str, channels: dict[int, tuple[str, str]], counts: dict[int, int], start: int,
                   duration: int, store: Typestore) -> dict[str, object]:
    topics = [{"topic_metadata": {"name": topic, "type": type_name, "serialization_format": "cdr",
                                  "offered_qos_profiles": yaml.safe_load(QOS_RELIABLE),
                                  "type_description_hash": store.hash_rihs01(type_name)},
               "message_count": counts[cid]} for cid, (topic, type_name) in sorted(channels.items())]
    total = sum(counts.values())
    return {"version": 9, "storage_identifier": "mcap", "duration": {"nanoseconds": duration},
            "starting_time": {"nanoseconds_since_epoch": start}, "message_count": total,
            "topics_with_message_count": topics, "compression_format": "", "compression_mode": "",
            "relative_file_paths": [name],
            "files": [{"path": name, "starting_time": {"nanoseconds_since_epoch": start},
                       "duration": {"nanoseconds": duration}, "message_count": total}],
            "custom_data": None, "ros_distro": "jazzy"}
