"""recording.episode_recorder.EpisodeRecorder without ROS: real BagWriter, real files, read back
with independent readers (mcap + mcap_ros2, rosbags). CDR bytes come from the project's codec, as
DDS would hand them over; `info` is what rclpy's take gives beside them."""
from __future__ import annotations

import json
import time
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
import yaml
from mcap.reader import make_reader
from mcap_ros2.decoder import DecoderFactory
from rosbags.highlevel import AnyReader

from teleop_flywheel.core import bag_topics, topics
from teleop_flywheel.core.calibration import sim_calibration_file
from teleop_flywheel.core.clock import ClockMapping, clock_steps, now_ns, to_ros_ns
from teleop_flywheel.core.episode import METADATA_RECORD, EpisodeMeta
from teleop_flywheel.core.so101 import JOINT_NAMES
from teleop_flywheel.recording.errors import RecordingError
from teleop_flywheel.recording.mcap.cdr import header_stamp_ns, joint_state_cdr, string_cdr
from teleop_flywheel.recording.mcap.metadata import Qos
from teleop_flywheel.recording.mcap.reader import open_bag
from teleop_flywheel.recording.recorder import episode_recorder
from teleop_flywheel.recording.recorder.episode_recorder import (
    EpisodeFields,
    EpisodeRecorder,
    RecorderConfig,
    TopicEntry,
)

# Given to the recorder as ROS names (relative); a bag records them fully qualified.
FOLLOWER_STATE, POLICY_COMMAND, INTERVENTION = topics.FOLLOWER_STATE, topics.POLICY_COMMAND, topics.INTERVENTION
IN_BAG = {FOLLOWER_STATE: bag_topics.FOLLOWER_STATE, POLICY_COMMAND: bag_topics.POLICY_COMMAND,
          INTERVENTION: bag_topics.INTERVENTION}
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
                "source_timestamp": wall - 300_000, "received_timestamp": wall}


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
    stamps, sent = [], []  # header stamps (ROS time, as nodes stamp) and DDS source timestamps
    t0 = to_ros_ns(now_ns())  # intervention times are ROS time, like header stamps
    rec.write(iv, string_cdr(json.dumps({"id": 1, "start_ns": t0, "end_ns": None, "trigger": None})), teleop.info())
    for i in range(50):
        stamps.append(to_ros_ns(now_ns()))
        info = arm.info(skip=1 if i == 30 else 0)
        sent.append(info["source_timestamp"])
        rec.write(js, joint_state_cdr(stamps[-1], list(JOINT_NAMES), [0.01 * i] * 6), info)
        if i % 5 == 0:
            rec.write(pol, joint_state_cdr(to_ros_ns(now_ns()), list(JOINT_NAMES), [0.0] * 6, frame_id="ckpt-7"),
                      policy.info())
    end_event = {"id": 1, "start_ns": t0, "end_ns": to_ros_ns(now_ns()), "trigger": "wrong_grasp"}
    rec.write(iv, string_cdr(json.dumps(end_event)), teleop.info())
    topic = rec.status()["topics"][IN_BAG[FOLLOWER_STATE]]
    assert (topic["type"], topic["count"], topic["drops"]) == (JS, 50, 1)  # one sequence number skipped
    summary = rec.stop(EpisodeFields(task="pick mug", operator="ana", outcome="success", attempts=2))
    assert summary == f"saved {path}: {50 + 10 + 2} messages, outcome success"
    assert rec.last_saved == str(path) and rec.status()["last_saved"] == str(path) and not rec.recording

    got, records = read_back(path)
    follower = got[IN_BAG[FOLLOWER_STATE]]
    assert [msg.publish_time for msg, _d in follower] == sent  # the DDS source timestamp, as rosbag2 records
    assert [header_stamp_ns(msg.data) for msg, _d in follower] == stamps  # header stamps untouched in the bytes
    assert [list(d.position) for _m, d in follower][10] == pytest.approx([0.1] * 6)
    assert json.loads(got[IN_BAG[INTERVENTION]][-1][1].data) == end_event
    with AnyReader([path]) as reader:
        assert reader.message_count == 62
        assert {c.topic: c.msgtype for c in reader.connections} == {
            IN_BAG[FOLLOWER_STATE]: JS,
            IN_BAG[POLICY_COMMAND]: JS,
            IN_BAG[INTERVENTION]: STRING,
        }
    meta = EpisodeMeta.from_strings(records[METADATA_RECORD])
    assert yaml.safe_load((path / "metadata.yaml").read_text())["rosbag2_bagfile_information"]["custom_data"] == \
        records[METADATA_RECORD]
    assert (meta.task, meta.operator, meta.outcome, meta.attempts, meta.ptp_offset_ns) == ("pick mug", "ana",
                                                                                          "success", 2, -27)
    assert meta.policy_checkpoint == "ckpt-7"  # from the commands' frame_id
    assert [(i.id, i.trigger) for i in meta.interventions] == [(1, "wrong_grasp")]
    assert meta.drops == {IN_BAG[FOLLOWER_STATE]: 1, IN_BAG[POLICY_COMMAND]: 0, IN_BAG[INTERVENTION]: 0}
    assert set(meta.calibration) == {"leader", "follower"}
    assert meta.calibration["follower"] == yaml.safe_load(follower_cal.read_text())
    assert meta.clock_start and meta.clock_end and meta.stopped_mono_ns > meta.started_mono_ns
    # Times the data engine compares with header stamps are ROS time; the monotonic ones stay for durations.
    assert meta.stamp_clock == "ros" and meta.namespace == ""
    assert meta.started_ros_ns <= stamps[0] and stamps[-1] <= meta.stopped_ros_ns
    assert meta.started_ros_ns <= meta.interventions[0].start_ns <= meta.interventions[0].end_ns <= meta.stopped_ros_ns
    assert meta.clock_samples[0] == meta.clock_start and meta.clock_samples[-1] == meta.clock_end


def test_outcome_is_never_defaulted_names_never_reused_and_discard_moves_the_bag_aside(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(episode_recorder.time, "strftime", lambda _format: "20260101_000000")  # all in one second
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
    rec.write(js, joint_state_cdr(now_ns(), list(JOINT_NAMES), [0.1] * 6), arm.info())
    # A discard while recording closes the bag and moves it aside, never deletes it.
    moved = tmp_path / "bags" / "discarded" / second.name
    assert rec.discard(EpisodeFields(outcome="failure")) == f"discarded {second.name}: moved to {moved}"
    assert sorted(p.name for p in (tmp_path / "bags").iterdir()) == ["discarded", first.name]
    assert rec.last_discarded == moved and open_bag(moved).damage == []  # a whole bag, closed with its metadata
    doc = json.loads((moved / "verdict.json").read_text())
    assert doc["verdict"] is None and doc["error"] == "discarded while recording: not validated"
    assert doc["decision"]["action"] == "discard" and doc["discarded_to"] == str(moved)
    for action in (lambda: rec.stop(EpisodeFields()), rec.discard):
        with pytest.raises(RecordingError, match="not recording"):
            action()
    assert rec.last_saved == str(first)
    # Nor the name of the episode just discarded: the status's verdicts know an episode by its name.
    third = Path(rec.start(EpisodeFields()))
    assert third.name not in (first.name, second.name), third
    rec.stop(EpisodeFields())


def test_a_stream_without_a_header_keeps_the_dds_times(tmp_path: Path) -> None:
    rec = recorder(tmp_path)
    _js, _pol, iv = add_streams(rec)
    teleop = Publisher(3)
    path = Path(rec.start(EpisodeFields()))
    info = teleop.info()
    rec.write(iv, string_cdr("{not json"), info)  # a bad event is recorded anyway, and ignored as an event
    rec.stop(EpisodeFields())
    got, records = read_back(path)
    (msg, _decoded), = got[IN_BAG[INTERVENTION]]
    assert (msg.log_time, msg.publish_time) == (info["received_timestamp"], info["source_timestamp"])
    assert EpisodeMeta.from_strings(records[METADATA_RECORD]).interventions == []


class SteppedClock:
    """The recorder's clock, advanced only by the test: whether a sample is due depends on the time the
    test says has passed, not on how long a loaded machine took between two calls."""

    def __init__(self) -> None:
        self.mono_ns, self.wall_offset_ns = now_ns(), time.time_ns() - now_ns()

    def advance(self, ns: int) -> None:
        self.mono_ns += ns

    def now(self) -> int:
        return self.mono_ns

    def sample(self, samples: int = 16) -> ClockMapping:
        return ClockMapping(self.mono_ns, self.mono_ns + self.wall_offset_ns, 100)


def test_clock_samples_through_the_episode_and_a_step_is_said_at_once(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """(monotonic, wall) pairs at start, about once a second (the node's timer calls `sample_clock`
    more often; it samples when the last is a period old) and at stop. A system-clock step between
    two samples is logged the moment it is seen (the host clock is never stepped here: the sample
    after it is made up)."""
    clock = SteppedClock()
    monkeypatch.setattr(episode_recorder, "now_ns", clock.now)
    monkeypatch.setattr(episode_recorder, "sample_mapping", clock.sample)
    monkeypatch.setattr(episode_recorder, "CLOCK_SAMPLE_PERIOD_NS", 50_000_000)
    logged: list[tuple[str, str]] = []
    rec = EpisodeRecorder(RecorderConfig(tmp_path / "bags", topics=(FOLLOWER_STATE,)),
                          log=lambda level, text: logged.append((level, text)))
    js = rec.add_topic(FOLLOWER_STATE, JS, [Qos()])
    path = Path(rec.start(EpisodeFields()))
    clock.advance(49_000_000)
    rec.sample_clock()  # too soon after the start sample: nothing
    for _ in range(3):
        clock.advance(11_000_000)
        rec.write(js, joint_state_cdr(time.time_ns(), list(JOINT_NAMES), [0.0] * 6), Publisher(1).info())
        rec.sample_clock()
        clock.advance(49_000_000)
        rec.sample_clock()  # a period since the start or the last sample: one more each time

    def stepped(samples: int = 16) -> ClockMapping:
        m = clock.sample(samples)
        return ClockMapping(m.mono_ns, m.wall_ns + 2_000_000_000, m.uncertainty_ns)  # the wall clock jumped 2 s

    clock.advance(60_000_000)
    monkeypatch.setattr(episode_recorder, "sample_mapping", stepped)
    rec.sample_clock()
    monkeypatch.setattr(episode_recorder, "sample_mapping", clock.sample)
    assert [lvl for lvl, text in logged if "stepped +2000.0 ms" in text] == ["warning"]
    clock.advance(10_000_000)
    rec.stop(EpisodeFields())
    meta = EpisodeMeta.from_strings(read_back(path)[1][METADATA_RECORD])
    samples = [ClockMapping.from_dict(d) for d in meta.clock_samples]
    assert len(samples) == 1 + 3 + 1 + 1  # start, three periods, the stepped one, stop
    assert meta.clock_samples[0] == meta.clock_start and meta.clock_samples[-1] == meta.clock_end
    assert all(b.mono_ns - a.mono_ns >= 50_000_000 for a, b in pairwise(samples[:-1]))
    assert len(clock_steps(samples)) == 2  # the jump, and the jump back at stop: the validator rejects it


def test_a_namespaced_rig_records_its_names_and_the_reader_strips_them(tmp_path: Path) -> None:
    """`namespace:=rig_a`: relative names resolve under /rig_a (as rclpy resolves them in the
    node), the namespace goes into the metadata, and the reader presents the streams by the names
    config/validate.yaml uses."""
    rec = EpisodeRecorder(RecorderConfig(tmp_path / "bags", topics=(FOLLOWER_STATE, INTERVENTION, "/diagnostics"),
                                         namespace="rig_a"))
    assert rec.config.topics == ("/rig_a/follower/joint_states", "/rig_a/teleop/intervention", "/diagnostics")
    js, iv = rec.add_topic(FOLLOWER_STATE, JS, [Qos()]), rec.add_topic(INTERVENTION, STRING, [LATCHED])
    assert (js.name, iv.name) == ("/rig_a/follower/joint_states", "/rig_a/teleop/intervention")
    path = Path(rec.start(EpisodeFields()))
    t0 = to_ros_ns(now_ns())
    rec.write(iv, string_cdr(json.dumps({"id": 1, "start_ns": t0, "end_ns": t0 + 1000, "trigger": "other"})),
              Publisher(3).info())
    for _ in range(3):
        rec.write(js, joint_state_cdr(to_ros_ns(now_ns()), list(JOINT_NAMES), [0.0] * 6), Publisher(1).info())
    rec.stop(EpisodeFields())
    got, records = read_back(path)
    assert set(got) == {"/rig_a/follower/joint_states", "/rig_a/teleop/intervention"}  # as ROS named them
    meta = EpisodeMeta.from_strings(records[METADATA_RECORD])
    assert meta.namespace == "/rig_a" and [(i.id, i.trigger) for i in meta.interventions] == [(1, "other")]
    bag = open_bag(path)
    assert set(bag.topics) == {bag_topics.FOLLOWER_STATE, bag_topics.INTERVENTION}
    assert bag.has(bag_topics.FOLLOWER_STATE) and bag.episode is not None
    assert set(bag.episode.topics) == {bag_topics.FOLLOWER_STATE, bag_topics.INTERVENTION, "/diagnostics"}
    assert not bag.damage


def test_config_refuses_what_must_not_reach_the_file_system(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="episode_prefix"):
        RecorderConfig(tmp_path, episode_prefix="../escape")
    with pytest.raises(ValueError, match="unknown clock probe"):
        RecorderConfig(tmp_path, ptp_probe="sh -c id")
    rec = recorder(tmp_path, calibration_files=(f"follower={tmp_path / 'missing.yaml'}",))
    with pytest.raises(RecordingError, match="missing.yaml"):
        rec.start(EpisodeFields())
    assert not (tmp_path / "bags").exists() or not any((tmp_path / "bags").iterdir())


def test_corrections_are_recorded_beside_interventions(tmp_path: Path) -> None:
    """`kind: correction` events (the pedal in teleop mode) go to EpisodeMeta.corrections with their own
    ids; events without `kind` (recorded before corrections existed) are interventions."""
    rec = recorder(tmp_path)
    js, _pol, iv = add_streams(rec)
    arm, teleop = Publisher(1), Publisher(3)
    path = Path(rec.start(EpisodeFields(outcome="success")))
    t = to_ros_ns(now_ns())
    events = [{"id": 1, "start_ns": t, "end_ns": None, "trigger": None, "kind": "correction"},
              {"id": 1, "start_ns": t + 1, "end_ns": t + 2, "trigger": "too_slow"},  # an old-style intervention
              {"id": 1, "start_ns": t, "end_ns": t + 5, "trigger": "other", "kind": "correction"},
              {"id": 2, "start_ns": t + 6, "end_ns": t + 7, "trigger": None, "kind": "correction"},
              {"id": 9, "start_ns": t, "end_ns": None, "trigger": None, "kind": "nap"}]  # refused, said
    for e in events:
        rec.write(iv, string_cdr(json.dumps(e)), teleop.info())
    rec.write(js, joint_state_cdr(now_ns(), list(JOINT_NAMES), [0.0] * 6), arm.info())
    rec.stop(EpisodeFields(outcome="success"))
    meta = EpisodeMeta.from_strings(read_back(path)[1][METADATA_RECORD])
    assert [(i.id, i.trigger) for i in meta.interventions] == [(1, "too_slow")]
    assert [(c.id, c.start_ns, c.end_ns, c.trigger) for c in meta.corrections] == [(1, t, t + 5, "other"),
                                                                                 (2, t + 6, t + 7, None)]
    assert [c.id for c in meta.unlabelled_corrections] == [2]
    # without corrections the metadata has no `corrections` key: older bags read back unchanged
    assert "corrections" not in EpisodeMeta("x").to_strings()
    assert EpisodeMeta.from_strings(EpisodeMeta("x").to_strings()).corrections == []


def test_status_carries_each_cameras_receive_latency_and_the_ptp_offset(tmp_path: Path) -> None:
    config = RecorderConfig(tmp_path / "bags", topics=("cameras/front/image/compressed",), cameras=("front",),
                            namespace="rig_a")
    rec = EpisodeRecorder(config)
    cam = rec.add_topic("cameras/front/image/compressed", "sensor_msgs/msg/CompressedImage", [Qos()])
    assert cam.camera == "front"
    pub = Publisher(4)
    from teleop_flywheel.recording.mcap.cdr import compressed_image_cdr

    for latency_ms in (8, 12, 10):
        info = pub.info()
        rec.write(cam, compressed_image_cdr(info["received_timestamp"] - latency_ms * 1_000_000, b"\xff\xd8"), info)
    rec.start(EpisodeFields(ptp_offset_ns=1234))
    status = rec.status()
    assert status["clock"] == {"cameras": {"front": {"latency_ms": 10.0}}, "ptp_offset_ns": 1234}


def test_each_episode_records_its_cameras_publisher_gids(tmp_path: Path) -> None:
    """A camera driver that is not ours says no instance in its frames: the publishers' GIDs (a new one
    when its process restarts) go into the episode's metadata, in the order first seen, per episode."""
    from teleop_flywheel.core.episode import CAMERA_PUBLISHERS
    from teleop_flywheel.recording.mcap.cdr import compressed_image_cdr

    rec = EpisodeRecorder(RecorderConfig(tmp_path / "bags", topics=("cameras/front/image/compressed",),
                                         cameras=("front",)))
    cam = rec.add_topic("cameras/front/image/compressed", "sensor_msgs/msg/CompressedImage", [Qos()])
    first, restarted = Publisher(7), Publisher(9)
    paths = []
    for publishers in ((first, restarted, first), (restarted,)):
        rec.start(EpisodeFields())
        for pub in publishers:
            info = pub.info()
            rec.write(cam, compressed_image_cdr(info["received_timestamp"], b"\xff\xd8"), info)
        paths.append(Path(rec.stop(EpisodeFields(outcome="success")).split()[1].rstrip(":")))
    metas = [open_bag(p).episode for p in paths]
    assert metas[0] is not None and metas[1] is not None
    assert metas[0].extra[CAMERA_PUBLISHERS] == {"front": ["07" * 16, "09" * 16]}
    assert metas[1].extra[CAMERA_PUBLISHERS] == {"front": ["09" * 16]}


def test_a_message_stamped_before_the_start_belongs_to_no_episode(tmp_path: Path) -> None:
    """A starved camera delivers frames captured seconds before the start after it: they are not written
    (nor is a state stream's late sample), only counted in the metadata. A stamp older than any late
    delivery (another clock's) or none at all (0) is recorded, for the validator to judge."""
    from teleop_flywheel.core.episode import BEFORE_START
    from teleop_flywheel.recording.mcap.cdr import compressed_image_cdr

    camera_topic = "/cameras/front/image/compressed"
    rec = EpisodeRecorder(RecorderConfig(tmp_path / "bags", cameras=("front",),
                                         topics=(camera_topic, FOLLOWER_STATE, INTERVENTION)))
    cam = rec.add_topic(camera_topic, "sensor_msgs/msg/CompressedImage", [Qos()])
    js, iv = rec.add_topic(FOLLOWER_STATE, JS, [Qos()]), rec.add_topic(INTERVENTION, STRING, [LATCHED])
    camera, arm, teleop = Publisher(1), Publisher(2), Publisher(3)
    before = time.time_ns()
    path = Path(rec.start(EpisodeFields()))
    for early_ns in (2_400_000_000, 2_367_000_000, 1):  # captured before the start, delivered after it
        rec.write(cam, compressed_image_cdr(before - early_ns, b"\xff\xd8"), camera.info())
    rec.write(js, joint_state_cdr(before - 3_000_000_000, list(JOINT_NAMES), [0.0] * 6), arm.info())
    stamps = [0, before - 60_000_000_000]
    for stamp in stamps:
        rec.write(cam, compressed_image_cdr(stamp, b"\xff\xd8"), camera.info())
        rec.write(js, joint_state_cdr(stamp, list(JOINT_NAMES), [0.0] * 6), arm.info())
    for _ in range(3):
        stamps.append(time.time_ns())
        rec.write(cam, compressed_image_cdr(stamps[-1], b"\xff\xd8"), camera.info())
        rec.write(js, joint_state_cdr(stamps[-1], list(JOINT_NAMES), [0.0] * 6), arm.info())
    rec.write(iv, string_cdr("{}"), teleop.info())
    assert rec.status()["topics"][camera_topic]["count"] == 5
    rec.stop(EpisodeFields())
    got, records = read_back(path)
    meta = EpisodeMeta.from_strings(records[METADATA_RECORD])
    assert [header_stamp_ns(m.data) for m, _d in got[camera_topic]] == stamps
    assert [header_stamp_ns(m.data) for m, _d in got[IN_BAG[FOLLOWER_STATE]]] == stamps
    assert min(stamps[2:]) >= meta.started_ros_ns
    assert len(got[IN_BAG[INTERVENTION]]) == 1
    assert meta.extra[BEFORE_START] == {camera_topic: 3, IN_BAG[FOLLOWER_STATE]: 1}


def test_a_stop_awaits_only_the_live_streams_until_they_reach_it(tmp_path: Path) -> None:
    """`settle(stop)`: a stream at ≥ 10 Hz heard from within 250 ms is awaited until it delivers a
    message stamped at or after the stop; a slow stream (2.5 Hz), one silent for a second and one
    without a header are not (waiting for them would only delay every stop by the bound)."""
    rec = recorder(tmp_path)
    js, pol, iv = add_streams(rec)
    stalled = rec.add_topic("leader/joint_states", JS, [Qos()])
    before = time.time_ns()
    rec.start(EpisodeFields())
    stop = before + 2_000_000_000  # 2 s into the episode at most: 40 messages are ≥ 20 Hz

    def info(received: int) -> dict[str, Any]:
        return {"received_timestamp": received, "source_timestamp": received}

    for i in range(40):
        rec.write(js, joint_state_cdr(stop - 500_000_000 + i, list(JOINT_NAMES), [0.0] * 6), info(stop - 100_000_000))
        rec.write(stalled, joint_state_cdr(stop - 1_500_000_000, list(JOINT_NAMES), [0.0] * 6),
                  info(stop - 1_000_000_000))
    for _ in range(5):
        rec.write(pol, joint_state_cdr(stop - 20_000_000, list(JOINT_NAMES), [0.0] * 6), info(stop - 10_000_000))
    rec.write(iv, string_cdr("{}"), info(stop - 10_000_000))
    assert rec.settle(stop) == [IN_BAG[FOLLOWER_STATE]]
    rec.write(js, joint_state_cdr(stop - 1, list(JOINT_NAMES), [0.0] * 6), info(stop))
    assert rec.settled() == [IN_BAG[FOLLOWER_STATE]]  # captured before the stop: still in flight
    rec.write(js, joint_state_cdr(stop, list(JOINT_NAMES), [0.0] * 6), info(stop + 30_000_000))
    assert rec.settled() == []
    rec.write(js, joint_state_cdr(stop + 10_000_000, list(JOINT_NAMES), [0.0] * 6), info(stop + 40_000_000))
    rec.write(pol, joint_state_cdr(stop + 10_000_000, list(JOINT_NAMES), [0.0] * 6), info(stop + 40_000_000))
    path = Path(rec.stop(EpisodeFields()).split()[1].rstrip(":"))
    got, _records = read_back(path)
    # the follower ends at its first message stamped at the stop; the unawaited policy stream runs on
    assert max(d.header.stamp.sec * 10**9 + d.header.stamp.nanosec for _m, d in got[IN_BAG[FOLLOWER_STATE]]) == stop
    assert len(got[IN_BAG[FOLLOWER_STATE]]) == 42 and len(got[IN_BAG[POLICY_COMMAND]]) == 6
    with pytest.raises(RecordingError):
        rec.settle(stop)


def test_episodes_carry_the_task_spec_and_its_success_predicate_on_the_last_recorded_state(tmp_path: Path) -> None:
    from teleop_flywheel.core.task_spec import parse_task_spec

    spec = parse_task_spec({"name": "place", "instruction": "Put the brick on the square.",
                            "start_region": {"joints": {"shoulder_pan": [-0.1, 0.1]}},
                            "success": {"joints": {"shoulder_pan": [0.4, 0.6]}}}, "task.yaml")
    rec = recorder(tmp_path, task_spec=spec)
    js, _pol, _iv = add_streams(rec)
    arm = Publisher(1)

    def pose(pan: float) -> None:
        rec.write(js, joint_state_cdr(to_ros_ns(now_ns()), list(JOINT_NAMES), [pan, 0, 0, 0, 0, 0.3]), arm.info())

    # Before recording: the follower's pose against the start region, live (the console shows it).
    live = rec.status()["task_spec"]
    assert (live["id"], live["instruction"], live["start"], live["success"]) == (spec.id, spec.instruction, None,
                                                                                None)
    pose(0.3)
    start = rec.status()["task_spec"]["start"]
    assert start["inside"] is False and "shoulder_pan +0.300 outside [-0.100, +0.100]" in start["detail"]
    pose(0.0)
    assert rec.status()["task_spec"]["start"]["inside"] is True

    # A success the predicate confirms: the spec's content, id and instruction (the task text) recorded.
    first = Path(rec.start(EpisodeFields(operator="ana")))
    for pan in (0.1, 0.3, 0.5):
        pose(pan)
    # A driver whose servos do not all answer publishes the joints that did: each joint's newest position counts.
    rec.write(js, joint_state_cdr(to_ros_ns(now_ns()), ["gripper"], [0.2]), arm.info())
    assert rec.status()["task_spec"]["success"]["passed"] is True
    text = rec.stop(EpisodeFields(operator="ana", outcome="success"))
    assert text.endswith("the spec's success check: met (joints in region)")
    pose(0.0)  # after the stop: not this episode's final state
    meta = EpisodeMeta.from_strings(read_back(first)[1][METADATA_RECORD])
    assert meta.task == spec.instruction and meta.task_spec == spec.content and meta.task_spec_id == spec.id
    assert parse_task_spec(meta.task_spec).id == spec.id
    assert meta.outcome_check == {"passed": True, "detail": "joints in region"}
    assert rec.last_outcome_check["disagrees"] is False

    # Marked success, final state off the square: judged from the last state recorded, the
    # operator's answer to the rig's question kept; an operator's own task text wins.
    second = Path(rec.start(EpisodeFields(task="my own words")))
    for pan in (0.5, 0.3, 0.1):
        pose(pan)
    assert rec.status()["task_spec"]["success"]["passed"] is False
    text = rec.stop(EpisodeFields(task="my own words", outcome="success", outcome_answer="kept"))
    assert "NOT met (shoulder_pan +0.100 outside [+0.400, +0.600]) — DISAGREES with the flag success" in text
    meta = EpisodeMeta.from_strings(read_back(second)[1][METADATA_RECORD])
    assert meta.task == "my own words" and meta.task_spec_id == spec.id
    assert meta.outcome_check == {"passed": False, "detail": "shoulder_pan +0.100 outside [+0.400, +0.600]",
                                  "operator_answer": "kept"}
    last = rec.status()["task_spec"]["last"]
    assert (last["episode"], last["outcome"], last["disagrees"]) == (second.name, "success", True)

    # No follower state in the episode, or none with every joint: the predicate cannot hold.
    third = Path(rec.start(EpisodeFields()))
    rec.stop(EpisodeFields(outcome="failure"))
    meta = EpisodeMeta.from_strings(read_back(third)[1][METADATA_RECORD])
    assert meta.outcome_check == {"passed": False, "detail": "no follower state recorded"}
    fourth = Path(rec.start(EpisodeFields()))
    rec.write(js, joint_state_cdr(to_ros_ns(now_ns()), list(JOINT_NAMES[1:]), [0.5] * 5), arm.info())
    rec.stop(EpisodeFields(outcome="failure"))
    meta = EpisodeMeta.from_strings(read_back(fourth)[1][METADATA_RECORD])
    assert meta.outcome_check == {"passed": False, "detail": "no position of shoulder_pan in the follower's last 1 "
                                                             "states"}


def test_without_a_task_spec_the_metadata_has_none_of_its_fields(tmp_path: Path) -> None:
    rec = recorder(tmp_path)
    js, _pol, _iv = add_streams(rec)
    path = Path(rec.start(EpisodeFields(task="pick mug")))
    rec.write(js, joint_state_cdr(now_ns(), list(JOINT_NAMES), [0.0] * 6), Publisher(1).info())
    rec.stop(EpisodeFields(outcome="success"))
    strings = read_back(path)[1][METADATA_RECORD]
    assert not {"task_spec", "task_spec_id", "outcome_check"} & set(strings)
    assert rec.status()["task_spec"] == {}
