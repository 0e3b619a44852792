"""recording.episode_recorder.EpisodeRecorder without ROS: real BagWriter, real files, read back
with independent readers (mcap + mcap_ros2, rosbags). CDR bytes come from the project's codec, as
DDS would hand them over; `info` is what rclpy's take gives beside them."""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from mcap.reader import make_reader
from mcap_ros2.decoder import DecoderFactory
from rosbags.highlevel import AnyReader

from teleop_flywheel.core.calibration import sim_calibration_file
from teleop_flywheel.core.clock import now_ns
from teleop_flywheel.core.episode import METADATA_RECORD, EpisodeMeta
from teleop_flywheel.core.so101 import JOINT_NAMES
from teleop_flywheel.core.topics import FOLLOWER_STATE, INTERVENTION, POLICY_COMMAND
from teleop_flywheel.recording.cdr import joint_state_cdr, string_cdr
from teleop_flywheel.recording.episode_recorder import (
    EpisodeFields,
    EpisodeRecorder,
    RecorderConfig,
    RecordingError,
    TopicEntry,
)
from teleop_flywheel.recording.metadata import Qos

JS, STRING = "sensor_msgs/msg/JointState", "std_msgs/msg/String"
LATCHED = Qos(durability="transient_local", depth=20)


class Publisher:
    """Stands for one DDS publisher: its gid and publication sequence numbers."""

    def __init__(self, gid: int) -> None:
        self.gid = bytes([gid]) * 16
        self.seq = 0

    def info(self, skip: int = 0) -> dict[str, Any]:
        self.seq += 1 + skip
        wall = time.time_ns()
        return {"publisher_gid": {"data": self.gid}, "publication_sequence_number": self.seq,
                "source_timestamp": wall - 1000, "received_timestamp": wall}


def recorder(tmp_path: Path, **kw: Any) -> EpisodeRecorder:
    config = RecorderConfig(tmp_path / "bags", topics=(FOLLOWER_STATE, POLICY_COMMAND, INTERVENTION), **kw)
    return EpisodeRecorder(config)


def add_streams(rec: EpisodeRecorder) -> tuple[TopicEntry, TopicEntry, TopicEntry]:
    return (rec.add_topic(FOLLOWER_STATE, JS, [Qos()]), rec.add_topic(POLICY_COMMAND, JS, [Qos()]),
            rec.add_topic(INTERVENTION, STRING, [LATCHED]))


def read_back(bag: Path) -> tuple[dict[str, list[tuple[Any, Any]]], dict[str, dict[str, str]]]:
    out: dict[str, list[tuple[Any, Any]]] = {}
    with open(bag / f"{bag.name}_0.mcap", "rb") as f:
        reader = make_reader(f, decoder_factories=[DecoderFactory()])
        for _s, ch, m, decoded in reader.iter_decoded_messages():
            out.setdefault(ch.topic, []).append((m, decoded))
        records = {r.name: dict(r.metadata) for r in reader.iter_metadata()}
    return out, records


def test_an_episode_end_to_end(tmp_path: Path) -> None:
    leader_cal, follower_cal = sim_calibration_file("leader"), sim_calibration_file("follower")
    rec = recorder(tmp_path, calibration_files=(f"leader={leader_cal}", f"follower={follower_cal}"))
    js, pol, iv = add_streams(rec)
    arm, policy, teleop = Publisher(1), Publisher(2), Publisher(3)
    rec.write(js, joint_state_cdr(now_ns(), list(JOINT_NAMES), [0.0] * 6), arm.info())  # before: not recorded
    path = Path(rec.start(EpisodeFields(task="pick mug", operator="ana", ptp_offset_ns=-27)))
    assert path.parent == tmp_path / "bags" and path.name.startswith("episode_") and rec.recording
    stamps = []
    t0 = now_ns()
    rec.write(iv, string_cdr(json.dumps({"id": 1, "start_ns": t0, "end_ns": None, "trigger": None})), teleop.info())
    for i in range(50):
        stamps.append(now_ns())
        rec.write(js, joint_state_cdr(stamps[-1], list(JOINT_NAMES), [0.01 * i] * 6), arm.info(skip=1 if i == 30 else 0))
        if i % 5 == 0:
            rec.write(pol, joint_state_cdr(now_ns(), list(JOINT_NAMES), [0.0] * 6, frame_id="ckpt-7"), policy.info())
    end_event = {"id": 1, "start_ns": t0, "end_ns": now_ns(), "trigger": "wrong_grasp"}
    rec.write(iv, string_cdr(json.dumps(end_event)), teleop.info())
    topic = rec.status()["topics"][FOLLOWER_STATE]
    assert (topic["type"], topic["count"], topic["drops"]) == (JS, 50, 1)  # one sequence number skipped
    summary = rec.stop(EpisodeFields(task="pick mug", operator="ana", outcome="success", attempts=2))
    assert summary == f"saved {path}: {50 + 10 + 2} messages, outcome success"
    assert rec.last_saved == str(path) and rec.status()["last_saved"] == str(path) and not rec.recording

    got, records = read_back(path)
    assert [msg.publish_time for msg, _d in got[FOLLOWER_STATE]] == stamps  # header stamps, untouched
    assert [list(d.position) for _m, d in got[FOLLOWER_STATE]][10] == pytest.approx([0.1] * 6)
    assert json.loads(got[INTERVENTION][-1][1].data) == end_event
    with AnyReader([path]) as reader:
        assert reader.message_count == 62
        assert {c.topic: c.msgtype for c in reader.connections} == {FOLLOWER_STATE: JS, POLICY_COMMAND: JS,
                                                                    INTERVENTION: STRING}
    meta = EpisodeMeta.from_strings(records[METADATA_RECORD])
    assert yaml.safe_load((path / "metadata.yaml").read_text())["rosbag2_bagfile_information"]["custom_data"] == \
        records[METADATA_RECORD]
    assert (meta.task, meta.operator, meta.outcome, meta.attempts, meta.ptp_offset_ns) == ("pick mug", "ana",
                                                                                          "success", 2, -27)
    assert meta.policy_checkpoint == "ckpt-7"  # from the commands' frame_id
    assert [(i.id, i.trigger) for i in meta.interventions] == [(1, "wrong_grasp")]
    assert meta.drops == {FOLLOWER_STATE: 1, POLICY_COMMAND: 0, INTERVENTION: 0}
    assert set(meta.calibration) == {"leader", "follower"}
    assert meta.calibration["follower"] == yaml.safe_load(follower_cal.read_text())
    assert meta.clock_start and meta.clock_end and meta.stopped_mono_ns > meta.started_mono_ns


def test_outcome_is_never_defaulted_names_never_reused_and_discard_leaves_nothing(tmp_path: Path) -> None:
    rec = recorder(tmp_path, episode_prefix="trial", calibration_files=(str(sim_calibration_file("leader")),))
    js, _pol, _iv = add_streams(rec)
    arm = Publisher(1)
    first = Path(rec.start(EpisodeFields()))
    rec.write(js, joint_state_cdr(now_ns(), list(JOINT_NAMES), [0.0] * 6), arm.info())
    rec.stop(EpisodeFields())
    _got, records = read_back(first)
    meta = EpisodeMeta.from_strings(records[METADATA_RECORD])
    assert meta.outcome == "unset" and meta.attempts is None
    assert set(meta.calibration) == {"leader_sim"}  # a plain path: stored under its stem, as before roles
    second = Path(rec.start(EpisodeFields()))
    assert second != first and second.name.startswith("trial_")  # same second: a suffix, never the same dir
    assert rec.status()["state"] == "recording" and rec.status()["bag"] == str(second)
    with pytest.raises(RecordingError, match="already recording"):
        rec.start(EpisodeFields())
    assert rec.discard() == f"discarded {second}"
    assert sorted(p.name for p in (tmp_path / "bags").iterdir()) == [first.name]
    for action in (lambda: rec.stop(EpisodeFields()), rec.discard):
        with pytest.raises(RecordingError, match="not recording"):
            action()
    assert rec.last_saved == str(first)


def test_a_stream_without_a_header_is_stamped_from_dds_on_the_monotonic_clock(tmp_path: Path) -> None:
    rec = recorder(tmp_path)
    _js, _pol, iv = add_streams(rec)
    teleop = Publisher(3)
    path = Path(rec.start(EpisodeFields()))
    info = teleop.info()
    before = now_ns()
    rec.write(iv, string_cdr("{not json"), info)  # a bad event is recorded anyway, and ignored as an event
    rec.stop(EpisodeFields())
    got, records = read_back(path)
    (msg, _decoded), = got[INTERVENTION]
    assert msg.log_time == info["received_timestamp"]
    assert abs(msg.publish_time - before) < 50_000_000  # source stamp mapped to CLOCK_MONOTONIC
    assert EpisodeMeta.from_strings(records[METADATA_RECORD]).interventions == []


def test_config_refuses_what_must_not_reach_the_file_system(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="episode_prefix"):
        RecorderConfig(tmp_path, episode_prefix="../escape")
    with pytest.raises(ValueError, match="unknown clock probe"):
        RecorderConfig(tmp_path, ptp_probe="sh -c id")
    rec = recorder(tmp_path, calibration_files=(f"follower={tmp_path / 'missing.yaml'}",))
    with pytest.raises(RecordingError, match="missing.yaml"):
        rec.start(EpisodeFields())
    assert not (tmp_path / "bags").exists() or not any((tmp_path / "bags").iterdir())
