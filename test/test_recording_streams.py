"""The recorder's byte-level helpers, checked against CDR made by an independent library."""
from __future__ import annotations

import numpy as np
import pytest
from rosbags.typesys import Stores, get_typestore

from teleop_flywheel.recording.cdr import (
    CdrError,
    SequenceTracker,
    cdr_string,
    header_frame_id,
    header_stamp_ns,
    starts_with_header,
)

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
