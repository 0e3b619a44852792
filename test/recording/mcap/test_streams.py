"""The one CDR codec (`recording.cdr`), both directions, checked against an independent library (rosbags)."""
from __future__ import annotations

import numpy as np
import pytest
from rosbags.typesys import Stores, get_typestore

from teleop_flywheel.recording.mcap.cdr import (
    JointStateReader,
    SequenceTracker,
    cdr_string,
    compressed_image_cdr,
    decode_compressed_images,
    decode_joint_states,
    decode_joy_buttons,
    decode_string,
    header_frame_id,
    header_stamp_ns,
    joint_state_cdr,
    starts_with_header,
    string_cdr,
)
from teleop_flywheel.recording.mcap.exceptions import CdrError

TS = get_typestore(Stores.LATEST)
T = TS.types


def _joint(sec: int, nsec: int, frame: str) -> object:
    return T["sensor_msgs/msg/JointState"](
        header=T["std_msgs/msg/Header"](stamp=T["builtin_interfaces/msg/Time"](sec=sec, nanosec=nsec), frame_id=frame),
        name=["a"], position=np.array([1.0]), velocity=np.array([], dtype=np.float64),
        effort=np.array([], dtype=np.float64))


@pytest.mark.parametrize("little", [True, False])
def test_header_stamp_and_frame_id_from_bytes(little: bool) -> None:
    msg = _joint(1234, 567_890_123, "ckpt-7")
    data = bytes(TS.serialize_cdr(msg, "sensor_msgs/msg/JointState", little_endian=little))
    assert header_stamp_ns(data) == 1234 * 10**9 + 567_890_123
    assert header_frame_id(data) == "ckpt-7"
    with pytest.raises(CdrError):
        header_stamp_ns(data[:8])


def test_string_payload() -> None:
    data = bytes(TS.serialize_cdr(T["std_msgs/msg/String"](data='{"id": 1}'), "std_msgs/msg/String"))
    assert cdr_string(data, 4) == '{"id": 1}'
    with pytest.raises(CdrError):
        cdr_string(data[:9], 4)


def test_which_types_start_with_a_header() -> None:
    for t in ("sensor_msgs/msg/JointState", "sensor_msgs/msg/CompressedImage", "sensor_msgs/msg/Joy",
              "diagnostic_msgs/msg/DiagnosticArray"):
        assert starts_with_header(t), t
    for t in ("std_msgs/msg/String", "diagnostic_msgs/msg/KeyValue", "builtin_interfaces/msg/Time"):
        assert not starts_with_header(t), t


def test_sequence_tracker_per_publisher() -> None:
    tr = SequenceTracker()
    a, b = b"pub-a", b"pub-b"
    assert [tr.add(a, s) for s in (1, 2, 5)] == [0, 0, 2]
    assert [tr.add(b, s) for s in (1, 2, 3)] == [0, 0, 0]  # interleaved publishers do not look like gaps
    assert tr.add(a, 1) == 0  # restarted publisher: new baseline
    assert tr.add(a, 3) == 1
    assert tr.add(a, None) == 0


def _stamp(ns: int) -> object:
    return T["builtin_interfaces/msg/Time"](sec=ns // 10**9, nanosec=ns % 10**9)


def test_encoders_decode_with_rosbags() -> None:
    stamp = 1_767_225_600_123_456_789
    data = joint_state_cdr(stamp, ["a", "bb", "ccc"], [0.5, -1.25, 3.0], "arm", velocity=[1.0, 2.0, 3.0])
    msg = TS.deserialize_cdr(data, "sensor_msgs/msg/JointState")
    assert (msg.header.stamp.sec, msg.header.stamp.nanosec, msg.header.frame_id) == (1_767_225_600, 123_456_789, "arm")
    assert list(msg.name) == ["a", "bb", "ccc"] and len(msg.effort) == 0
    np.testing.assert_array_equal(msg.position, [0.5, -1.25, 3.0])
    np.testing.assert_array_equal(msg.velocity, [1.0, 2.0, 3.0])
    image = TS.deserialize_cdr(compressed_image_cdr(stamp, b"\xff\xd8jpeg", "wrist"), "sensor_msgs/msg/CompressedImage")
    assert (image.header.frame_id, image.format, bytes(image.data)) == ("wrist", "jpeg", b"\xff\xd8jpeg")
    assert TS.deserialize_cdr(string_cdr("héllo"), "std_msgs/msg/String").data == "héllo"


@pytest.mark.parametrize("little", [True, False])
def test_decoders_read_rosbags_bytes(little: bool) -> None:
    """Both byte orders; one message with another frame_id takes the per-message path."""
    msgs = [_joint(10 + i, 1000 * i, "x" if i == 2 else "ckpt") for i in range(5)]
    for i, m in enumerate(msgs):
        m.position = np.array([0.25 * i])  # type: ignore[attr-defined]
    data = [bytes(TS.serialize_cdr(m, "sensor_msgs/msg/JointState", little_endian=little)) for m in msgs]
    js = decode_joint_states(data)
    assert js.names == ["a"] and js.frame_ids == ["ckpt", "ckpt", "x", "ckpt", "ckpt"]
    np.testing.assert_array_equal(js.stamps_ns, [(10 + i) * 10**9 + 1000 * i for i in range(5)])
    np.testing.assert_array_equal(js.position[:, 0], [0.25 * i for i in range(5)])
    assert js.velocity.shape == (5, 0)
    image = T["sensor_msgs/msg/CompressedImage"](header=T["std_msgs/msg/Header"](stamp=_stamp(7), frame_id="w"),
                                                 format="jpeg", data=np.frombuffer(b"abcde", np.uint8))
    stamps, formats, blobs = decode_compressed_images(
        [bytes(TS.serialize_cdr(image, "sensor_msgs/msg/CompressedImage", little_endian=little))])
    assert (stamps.tolist(), formats, blobs) == ([7], ["jpeg"], [b"abcde"])
    joy = T["sensor_msgs/msg/Joy"](header=T["std_msgs/msg/Header"](stamp=_stamp(9), frame_id=""),
                                   axes=np.array([0.5], np.float32), buttons=np.array([1, 0, 1], np.int32))
    stamps, buttons = decode_joy_buttons([bytes(TS.serialize_cdr(joy, "sensor_msgs/msg/Joy", little_endian=little))])
    assert stamps.tolist() == [9] and buttons.tolist() == [[1, 0, 1]]
    text = T["std_msgs/msg/String"](data="ok")
    assert decode_string(bytes(TS.serialize_cdr(text, "std_msgs/msg/String", little_endian=little))) == "ok"


def test_decoders_refuse_bad_bytes() -> None:
    good = joint_state_cdr(5, ["a"], [1.0])
    with pytest.raises(CdrError, match="CDR buffer of 48 bytes"):
        decode_joint_states([good[:-4]])
    other = joint_state_cdr(6, ["b"], [1.0])
    with pytest.raises(CdrError, match="joint names"):
        decode_joint_states([good, other])


def _arm(names: list[str], position: list[float], velocity: list[float], effort: list[float],
         frame: str = "") -> object:
    return T["sensor_msgs/msg/JointState"](
        header=T["std_msgs/msg/Header"](stamp=_stamp(len(position) * 10**9 + 17), frame_id=frame), name=names,
        position=np.array(position), velocity=np.array(velocity), effort=np.array(effort))


@pytest.mark.parametrize("little", [True, False])
def test_a_joint_state_read_one_at_a_time_is_what_rosbags_wrote(little: bool) -> None:
    """A stream of one layout, then each thing that changes a layout without changing the length
    (names reordered, a frame_id of as many bytes, the values moved from velocity to effort), and
    a shorter one: each read as written, never through the layout before it."""
    six = [f"j{i}" for i in range(6)]
    stream = [_arm(six, [0.1 * i + k for i in range(6)], [-0.2 * i for i in range(6)], [0.03 * k] * 6)
              for k in range(3)]
    stream += [_arm(six[::-1], [1.0] * 6, [2.0] * 6, [3.0] * 6),
               _arm(six[::-1], [1.0] * 6, [2.0] * 6, [3.0] * 6, frame="ab"),
               _arm(six[::-1], [1.0] * 6, [2.0] * 6, [3.0] * 6, frame="cd"),
               _arm(["a", "b"], [1.0, 2.0], [3.0, 4.0], []),
               _arm(["a", "b"], [1.0, 2.0], [], [3.0, 4.0]),
               _arm(["a"], [5.0], [], [])]
    reader = JointStateReader()
    for msg in stream:
        data = bytes(TS.serialize_cdr(msg, "sensor_msgs/msg/JointState", little_endian=little))
        names, position, velocity, effort = reader.read(data)
        assert list(names) == list(msg.name)  # type: ignore[attr-defined]
        for got, sent in ((position, msg.position), (velocity, msg.velocity), (effort, msg.effort)):  # type: ignore[attr-defined]
            assert list(got) == sent.tolist()


def test_a_joint_state_read_one_at_a_time_refuses_bad_bytes() -> None:
    reader = JointStateReader()
    good = joint_state_cdr(5, ["a", "b"], [1.0, 2.0], velocity=[3.0, 4.0], effort=[5.0, 6.0])
    assert reader.read(good)[3] == (5.0, 6.0)
    with pytest.raises(CdrError):
        reader.read(good[:-8])  # the same layout cut short: parsed in full, and refused
    with pytest.raises(CdrError, match="2 values for 3 names"):
        reader.read(joint_state_cdr(5, ["a", "b", "c"], [1.0, 2.0]))
