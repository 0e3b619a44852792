"""Foxglove's own parsers decode every topic type the recorder writes.

Our reader agreeing with our writer proves nothing about the format: this test installs
Foxglove's npm packages (`@mcap/core`, `@foxglove/rosmsg`, `@foxglove/rosmsg2-serialization`,
pinned in `test/support/foxglove/package.json`) and decodes a bag written by `BagWriter` with the schema
text in it, as Foxglove Studio does when a user opens the `.mcap`. Payloads are serialized by
`rosbags`, an implementation independent of ours.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
from rosbags.typesys import Stores, get_typestore
from support.foxglove_npm import decode_bag

from teleop_flywheel.recording.mcap import msgdefs
from teleop_flywheel.recording.mcap.writer import BagWriter, mcap_file_name

TS = get_typestore(Stores.LATEST)
T = TS.types
STAMP_NS = 1_764_000_000_123_456_789


def _header(frame: str) -> object:
    return T["std_msgs/msg/Header"](
        stamp=T["builtin_interfaces/msg/Time"](sec=STAMP_NS // 10**9, nanosec=STAMP_NS % 10**9), frame_id=frame)


def _messages() -> dict[str, tuple[str, object]]:
    """One message of every type the recorder records, keyed by topic."""
    status = T["diagnostic_msgs/msg/DiagnosticStatus"](
        level=1, name="arm_driver: follower", message="bus at 200.0 Hz", hardware_id="/dev/ttyACM0",
        values=[T["diagnostic_msgs/msg/KeyValue"](key="rate_hz", value="200.0")])
    return {
        "/follower/joint_states": ("sensor_msgs/msg/JointState", T["sensor_msgs/msg/JointState"](
            header=_header("follower"), name=["shoulder_pan", "gripper"], position=np.array([0.25, -1.5]),
            velocity=np.array([0.5, 0.0]), effort=np.array([], dtype=np.float64))),
        "/pedal/joy": ("sensor_msgs/msg/Joy", T["sensor_msgs/msg/Joy"](
            header=_header("pedal"), axes=np.array([], dtype=np.float32), buttons=np.array([1, 0, 0], dtype=np.int32))),
        "/cameras/front/image/compressed": ("sensor_msgs/msg/CompressedImage", T["sensor_msgs/msg/CompressedImage"](
            header=_header("front"), format="jpeg", data=np.frombuffer(b"\xff\xd8\xff" + bytes(97), dtype=np.uint8))),
        "/diagnostics": ("diagnostic_msgs/msg/DiagnosticArray", T["diagnostic_msgs/msg/DiagnosticArray"](
            header=_header(""), status=[status])),
        "/teleop/intervention": ("std_msgs/msg/String", T["std_msgs/msg/String"](data='{"event": "start"}')),
    }


def test_schema_dependencies_named_as_written() -> None:
    """rosbag2's form: `MSG:` + the type as the referring .msg writes it (Foxglove resolves by that name)."""
    heads = [line for line in msgdefs.full_text("sensor_msgs/msg/JointState").splitlines() if line.startswith("MSG: ")]
    assert heads == ["MSG: std_msgs/Header", "MSG: builtin_interfaces/Time"]
    diag = [line for line in msgdefs.full_text("diagnostic_msgs/msg/DiagnosticArray").splitlines()
            if line.startswith("MSG: ")]
    assert diag == ["MSG: diagnostic_msgs/DiagnosticStatus", "MSG: diagnostic_msgs/KeyValue",
                    "MSG: std_msgs/Header", "MSG: builtin_interfaces/Time"]


def test_foxglove_decodes_every_recorded_type(tmp_path: Path) -> None:
    messages = _messages()
    bag = tmp_path / "episode"
    with BagWriter(bag) as writer:
        for topic, (type_name, _msg) in messages.items():
            writer.add_topic(topic, type_name)
        for i in range(3):
            for topic, (type_name, msg) in messages.items():
                data = TS.serialize_cdr(msg, type_name)
                writer.write(topic, data, log_time_ns=STAMP_NS + i, publish_time_ns=STAMP_NS + i, sequence=i + 1)
    topics = decode_bag(bag / mcap_file_name(bag.name))
    assert set(topics) == set(messages)
    for topic, entry in topics.items():
        assert entry["errors"] == [], f"{topic}: {entry['errors'][:1]}"
        assert entry["schema"] == messages[topic][0] and entry["encoding"] == "ros2msg"
        assert entry["count"] == 3
    joint = topics["/follower/joint_states"]["messages"][0]
    assert joint["name"] == ["shoulder_pan", "gripper"] and joint["position"] == [0.25, -1.5]
    assert joint["header"]["stamp"] == {"sec": STAMP_NS // 10**9, "nanosec": STAMP_NS % 10**9}
    assert topics["/pedal/joy"]["messages"][0]["buttons"] == [1, 0, 0]
    image = topics["/cameras/front/image/compressed"]["messages"][0]
    assert image["format"] == "jpeg" and image["data"]["bytes"] == 100
    diag = topics["/diagnostics"]["messages"][0]["status"][0]
    assert diag["hardware_id"] == "/dev/ttyACM0" and diag["values"][0] == {"key": "rate_hz", "value": "200.0"}
    assert topics["/teleop/intervention"]["messages"][0]["data"] == '{"event": "start"}'
