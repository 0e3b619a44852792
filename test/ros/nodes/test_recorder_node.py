"""Real rclpy publishers → real RecorderNode (and CameraNode) → bags read by independent readers."""
from __future__ import annotations

import itertools
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest
import rclpy
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from mcap.reader import make_reader
from mcap_ros2.decoder import DecoderFactory
from rcl_interfaces.srv import SetParameters
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.parameter_client import AsyncParameterClient
from rclpy.qos import QoSProfile
from rosbags.highlevel import AnyReader
from sensor_msgs.msg import CompressedImage, JointState, Joy
from std_msgs.msg import String
from std_srvs.srv import Trigger
from support.procs import wait_for
from support.tmpfs import mount_tmpfs, unmount

from teleop_flywheel.core.clock import ClockMapping, now_ns, to_ros_ns
from teleop_flywheel.core.episode import METADATA_RECORD, EpisodeMeta
from teleop_flywheel.hw.camera import timecode
from teleop_flywheel.recording.mcap.cdr import header_stamp_ns
from teleop_flywheel.recording.mcap.metadata import read_metadata_yaml
from teleop_flywheel.recording.mcap.recover import recover
from teleop_flywheel.ros.nodes.camera import CameraNode
from teleop_flywheel.ros.nodes.common import LATCHED_QOS, STREAM_QOS, NodeSpinner, joint_state, stamp
from teleop_flywheel.ros.nodes.recorder import RecorderNode
from teleop_flywheel.ros.nodes.recorder_client import named_values, refusals

JOINTS = ["shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper"]



class Graph:
    """Nodes spun as the runner spins them (one executor thread each) plus a client node for services."""

    def __init__(self) -> None:
        self.context = rclpy.Context()
        rclpy.init(context=self.context)
        self.spinner = NodeSpinner(self.context)
        self.nodes: list[Node] = []
        self.client = self.add(Node("test_client", context=self.context))

    def add(self, node: Node) -> Any:
        self.nodes.append(node)
        self.spinner.add(node)
        return node

    def call(self, service: str, timeout: float = 20.0) -> Trigger.Response:
        cli = self.client.create_client(Trigger, service)
        assert cli.wait_for_service(timeout_sec=timeout), f"{service} not available"
        future = cli.call_async(Trigger.Request())
        wait_for(future.done, timeout, f"{service} response")
        self.client.destroy_client(cli)
        return future.result()

    def label(self, **labels: Any) -> list[str]:
        """Label the episode through /recorder/label_episode; the reasons of what was refused."""
        cli = self.client.create_client(SetParameters, "/recorder/label_episode")
        assert cli.wait_for_service(timeout_sec=20), "/recorder/label_episode not available"
        future = cli.call_async(named_values(**labels))
        wait_for(future.done, 20, "label_episode")
        self.client.destroy_client(cli)
        return refusals(future.result())

    def close(self) -> None:
        for node in reversed(self.nodes):
            close = getattr(node, "close", None)
            if callable(close):
                close()
        self.spinner.shutdown()
        for node in self.nodes:
            node.destroy_node()
        rclpy.shutdown(context=self.context)


@pytest.fixture
def graph() -> Iterator[Graph]:
    g = Graph()
    try:
        yield g
    finally:
        g.close()


# What these tests check is the recording; the verdict at stop is test_recorder_verdict.py's. With it
# on, every recorder here started a validator worker (imports, at nice 10) and its close waited up to
# 5 s for the verdict of the episode just stopped, then for the worker: 3-8 s of teardown per test.
NO_VERDICT = Parameter("verdict", value=False)


def recorder(graph: Graph, out: Path, topics: list[str], **params: Any) -> RecorderNode:
    overrides = [Parameter("output_dir", value=str(out)), Parameter("topics", value=topics),
                 Parameter("discovery_period_s", value=0.1), Parameter("status_period_s", value=0.2), NO_VERDICT]
    assert topics, "name the topics: the default set includes /diagnostics, which every node publishes"
    overrides += [Parameter(k, value=v) for k, v in params.items()]
    return graph.add(RecorderNode(context=graph.context, parameter_overrides=overrides))


def subscribed(rec: RecorderNode, *topics: str) -> Callable[[], bool]:
    return lambda: all(t in rec.status()["topics"] for t in topics)


def only_bag(out: Path) -> Path:
    bags = [p for p in out.iterdir() if p.is_dir()]
    assert len(bags) == 1, bags
    return bags[0]


def read_mcap(bag: Path) -> tuple[dict[str, list[tuple[Any, Any]]], dict[str, dict[str, str]], dict[str, Any]]:
    """topic → [(mcap Message, decoded)], metadata records, channels by topic (mcap_ros2)."""
    out: dict[str, list[tuple[Any, Any]]] = {}
    with open(bag / f"{bag.name}_0.mcap", "rb") as f:
        reader = make_reader(f, decoder_factories=[DecoderFactory()])
        for _s, ch, m, decoded in reader.iter_decoded_messages():
            out.setdefault(ch.topic, []).append((m, decoded))
        records = {r.name: dict(r.metadata) for r in reader.iter_metadata()}
        channels = {c.topic: c for c in reader.get_summary().channels.values()}  # type: ignore[union-attr]
    return out, records, channels


def same_fields(ros_msg: Any, other: Any) -> bool:
    """rclpy message vs a decoded message (mcap_ros2 / rosbags), recursively by field name."""
    if hasattr(ros_msg, "get_fields_and_field_types"):
        return all(same_fields(getattr(ros_msg, f), getattr(other, f)) for f in ros_msg.get_fields_and_field_types())
    if isinstance(ros_msg, (list, tuple, np.ndarray)) or hasattr(ros_msg, "tolist"):
        a, b = list(ros_msg), list(other)
        return len(a) == len(b) and all(same_fields(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(ros_msg, (bytes, bytearray)):
        return bytes(ros_msg) == bytes(other)
    return bool(ros_msg == other)


def test_records_everything_published_exactly(graph: Graph, tmp_path: Path) -> None:
    pubs = graph.add(Node("publishers", context=graph.context))
    js = pubs.create_publisher(JointState, "/follower/joint_states", STREAM_QOS)
    pol = pubs.create_publisher(JointState, "/policy/joint_command", STREAM_QOS)
    joy = pubs.create_publisher(Joy, "/pedal/joy", STREAM_QOS)
    iv = pubs.create_publisher(String, "/teleop/intervention", LATCHED_QOS)
    topics = ["/follower/joint_states", "/policy/joint_command", "/pedal/joy", "/teleop/intervention"]
    rec = recorder(graph, tmp_path, topics, task="pick mug", operator="ana", rig_id="rig-7")
    wait_for(subscribed(rec, *topics), what="recorder subscriptions")
    for p in (js, pol, joy, iv):
        wait_for(lambda p=p: p.get_subscription_count() >= 1, what="matched")
    assert graph.call("/recorder/start").success
    sent: dict[str, list[Any]] = {t: [] for t in topics}
    t0 = to_ros_ns(now_ns())  # intervention times are ROS time, as the teleop node publishes them
    start_iv = String(data=json.dumps({"id": 1, "start_ns": t0, "end_ns": None, "trigger": None}))
    iv.publish(start_iv)
    sent["/teleop/intervention"].append(start_iv)
    for i in range(200):
        m = joint_state(JOINTS, [0.01 * i] * 6, now_ns(), velocities=[0.1] * 6, efforts=[0.0] * 6)
        js.publish(m)
        sent["/follower/joint_states"].append(m)
        if i % 4 == 0:
            c = joint_state(JOINTS, [0.02 * i] * 6, now_ns(), frame_id="ckpt-abc123")
            pol.publish(c)
            sent["/policy/joint_command"].append(c)
        if i % 20 == 0:
            j = Joy(axes=[0.5], buttons=[1, 0, 0, 1, 0, 0])
            stamp(j.header.stamp, now_ns())
            joy.publish(j)
            sent["/pedal/joy"].append(j)
        time.sleep(0.002)
    end_iv = String(data=json.dumps({"id": 1, "start_ns": t0, "end_ns": to_ros_ns(now_ns()), "trigger": "wrong_grasp"}))
    iv.publish(end_iv)
    sent["/teleop/intervention"].append(end_iv)
    total = sum(len(v) for v in sent.values())
    wait_for(lambda: rec.status()["messages"] >= total, what=f"{total} messages recorded")
    assert graph.label(outcome="success", attempts=2) == []
    stop = graph.call("/recorder/stop")
    assert stop.success and "outcome success" in stop.message
    bag = only_bag(tmp_path)

    # Reader 1: mcap + mcap_ros2.
    got, records, channels = read_mcap(bag)
    for topic in topics:
        assert len(got[topic]) == len(sent[topic]), topic
        for ros_msg, (m, decoded) in zip(sent[topic], got[topic], strict=True):
            assert same_fields(ros_msg, decoded), topic
            # publish_time = the DDS source timestamp (send time), log_time = receive time: rosbag2's
            assert m.publish_time <= m.log_time and abs(m.log_time - time.time_ns()) < 120 * 10**9
    assert [m.sequence for m, _ in got["/follower/joint_states"]] == list(range(1, 201))
    assert "transient_local" in channels["/teleop/intervention"].metadata["offered_qos_profiles"]
    # Reader 2: rosbags AnyReader.
    with AnyReader([bag]) as reader:
        by_topic: dict[str, list[Any]] = {}
        for conn, _t, raw in reader.messages():
            by_topic.setdefault(conn.topic, []).append(reader.deserialize(raw, conn.msgtype))
    for topic in topics:
        assert all(same_fields(a, b) for a, b in zip(sent[topic], by_topic[topic], strict=True))
        assert len(by_topic[topic]) == len(sent[topic])
    # Metadata: MCAP record == metadata.yaml custom_data; SPEC §6 fields.
    info = read_metadata_yaml(bag)
    assert info["custom_data"] == records[METADATA_RECORD]
    assert info["message_count"] == total
    meta = EpisodeMeta.from_strings(records[METADATA_RECORD])
    assert (meta.task, meta.operator, meta.rig_id, meta.outcome, meta.attempts) == ("pick mug", "ana", "rig-7",
                                                                                  "success", 2)
    assert meta.policy_checkpoint == "ckpt-abc123"
    assert [(i.id, i.trigger) for i in meta.interventions] == [(1, "wrong_grasp")]
    assert meta.drops == {t: 0 for t in topics}
    assert meta.clock_start and meta.clock_end and meta.stopped_mono_ns > meta.started_mono_ns
    assert meta.stamp_clock == "ros" and meta.started_ros_ns <= t0 < meta.stopped_ros_ns
    assert meta.software_version.startswith("teleop_flywheel")
    # Labels are cleared for the next episode, never carried over.
    assert (rec.labels.outcome, rec.labels.attempts) == ("", 0)
    assert (rec.status()["outcome"], rec.status()["attempts"]) == ("unset", 0)


def test_header_stamps_are_ros_time_and_clock_samples_span_the_episode(graph: Graph, tmp_path: Path) -> None:
    """Stamps as the nodes make them (ROS time) reach the bag within a few ms of their receive time
    on this host; publish_time is the send time between the two; (monotonic, wall) samples are taken
    at start, about once a second, and at stop."""
    pubs = graph.add(Node("arm", context=graph.context))
    js = pubs.create_publisher(JointState, "/follower/joint_states", STREAM_QOS)
    rec = recorder(graph, tmp_path, ["/follower/joint_states"])
    wait_for(subscribed(rec, "/follower/joint_states"))
    wait_for(lambda: js.get_subscription_count() >= 1, what="matched")
    assert graph.call("/recorder/start").success
    begin = time.monotonic()
    while time.monotonic() - begin < 2.6:
        js.publish(joint_state(JOINTS, [0.0] * 6, now_ns()))
        time.sleep(0.01)
    wait_for(lambda: rec.status()["messages"] >= 100, what="messages recorded")
    assert graph.call("/recorder/stop").success
    got, records, _ = read_mcap(only_bag(tmp_path))
    msgs = [m for m, _d in got["/follower/joint_states"]]
    stamps = np.array([header_stamp_ns(m.data) for m in msgs])
    log = np.array([m.log_time for m in msgs])
    pub = np.array([m.publish_time for m in msgs])
    latency_ms = (log - stamps) / 1e6
    assert np.median(latency_ms) < 5.0 and latency_ms.min() > -1.0, latency_ms  # one clock: ROS time
    assert ((pub - stamps) / 1e6).min() > -1.0 and (pub <= log).all()  # sent after stamped, received after sent
    meta = EpisodeMeta.from_strings(records[METADATA_RECORD])
    assert meta.stamp_clock == "ros"
    samples = [ClockMapping.from_dict(d) for d in meta.clock_samples]
    assert samples[0].to_dict() == meta.clock_start and samples[-1].to_dict() == meta.clock_end
    assert (samples[0].mono_ns, samples[-1].mono_ns) == (meta.started_mono_ns, meta.stopped_mono_ns)
    assert (samples[0].wall_ns, samples[-1].wall_ns) == (meta.started_ros_ns, meta.stopped_ros_ns)
    assert meta.started_ros_ns < stamps.min() and stamps.max() < meta.stopped_ros_ns  # the span covers the data
    gaps_s = np.diff([m.mono_ns for m in samples]) / 1e9
    assert len(samples) >= 4 and gaps_s[:-1].min() >= 1.0 and gaps_s.max() < 3.0, gaps_s  # about every second


def test_stop_takes_what_arrived_before_it(graph: Graph, tmp_path: Path) -> None:
    """The take thread pauses between batches; stop drains first, so the messages of an episode's
    last moments — here the intervention's end event — are in the bag, not left in a queue."""
    pubs = graph.add(Node("last_moment", context=graph.context))
    js = pubs.create_publisher(JointState, "/follower/joint_states", STREAM_QOS)
    iv = pubs.create_publisher(String, "/teleop/intervention", LATCHED_QOS)
    topics = ["/follower/joint_states", "/teleop/intervention"]
    rec = recorder(graph, tmp_path, topics, take_batch_ms=3000.0)  # a long pause: nothing taken by luck
    wait_for(subscribed(rec, *topics), what="recorder subscriptions")
    for pub in (js, iv):
        wait_for(lambda pub=pub: pub.get_subscription_count() >= 1, what="matched")
    assert graph.call("/recorder/start").success
    time.sleep(0.5)
    t0 = to_ros_ns(now_ns())
    for i in range(20):
        js.publish(joint_state(JOINTS, [0.01 * i] * 6, now_ns()))
    iv.publish(String(data=json.dumps({"id": 1, "start_ns": t0, "end_ns": to_ros_ns(now_ns()),
                                       "trigger": "too_slow"})))
    time.sleep(0.3)  # delivered to the recorder's queues, not yet taken (the batch pause is 3 s)
    assert graph.call("/recorder/stop").success
    got, records, _channels = read_mcap(only_bag(tmp_path))
    assert len(got["/follower/joint_states"]) == 20
    meta = EpisodeMeta.from_strings(records[METADATA_RECORD])
    assert [(i.id, i.trigger) for i in meta.interventions] == [(1, "too_slow")]


def test_outcome_unset_and_discard_moves_the_episode_aside(graph: Graph, tmp_path: Path) -> None:
    pubs = graph.add(Node("publishers", context=graph.context))
    js = pubs.create_publisher(JointState, "/follower/joint_states", STREAM_QOS)
    statuses: list[dict[str, Any]] = []
    pubs.create_subscription(String, "/recorder/status", lambda m: statuses.append(json.loads(m.data)), LATCHED_QOS)
    rec = recorder(graph, tmp_path, ["/follower/joint_states"])
    wait_for(subscribed(rec, "/follower/joint_states"))
    assert graph.call("/recorder/start").success
    for _ in range(20):
        js.publish(joint_state(JOINTS, [0.0] * 6, now_ns()))
    wait_for(lambda: rec.status()["messages"] >= 20)
    assert graph.call("/recorder/stop").success
    first = only_bag(tmp_path)
    assert EpisodeMeta.from_strings(read_metadata_yaml(first)["custom_data"]).outcome == "unset"
    # the last saved bag is on /recorder/status, for whoever drives the session over the graph
    wait_for(lambda: statuses and statuses[-1]["last_saved"] == str(first), what="last_saved on /recorder/status")
    assert not graph.call("/recorder/stop").success  # not recording: refused, says why

    assert graph.label(outcome="failure") == []
    assert graph.call("/recorder/start").success
    for _ in range(20):
        js.publish(joint_state(JOINTS, [0.0] * 6, now_ns()))
    wait_for(lambda: rec.status()["messages"] >= 20)
    discard = graph.call("/recorder/discard")
    assert discard.success  # moved aside, never deleted (test_recorder_verdict.py: the rest of the story)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([first.name, "discarded"])
    assert rec.labels.outcome == ""  # the label did not leak to the next episode
    # Each value is judged on its own, with its reason; a refused one changes nothing.
    assert graph.label(outcome="great", attempts=3, failure_label="ok\x07") == [
        "outcome = 'great' is not allowed: one of: '', 'success', 'failure'",
        "failure_label = 'ok\\x07' is not allowed: at most 1000 characters, no control characters, no path "
        "separators or look-alikes"]
    assert graph.label(task="x") == [
        "task is not an episode label: outcome, attempts, failure_label, machine_check, outcome_answer"]
    assert (rec.labels.outcome, rec.labels.attempts, rec.labels.failure_label) == ("", 3, "")
    # Not parameters: per-episode messages do not live in the node's configuration.
    assert not any(rec.has_parameter(n) for n in ("outcome", "attempts", "failure_label", "machine_check"))


def test_sequence_gaps_are_counted_as_drops(graph: Graph, tmp_path: Path) -> None:
    pubs = graph.add(Node("publishers", context=graph.context))
    js = pubs.create_publisher(JointState, "/follower/joint_states", QoSProfile(depth=500))
    rec = recorder(graph, tmp_path, ["/follower/joint_states"], queue_depth=1)
    wait_for(subscribed(rec, "/follower/joint_states"))
    wait_for(lambda: js.get_subscription_count() >= 1)
    assert graph.call("/recorder/start").success
    js.publish(joint_state(JOINTS, [0.0] * 6, now_ns()))  # sequence 1: the baseline
    wait_for(lambda: rec.status()["topics"]["/follower/joint_states"]["count"] == 1)
    with rec.episodes._lock:  # the recorder stalls; its 1-deep queue overflows like an overloaded recorder
        for _ in range(100):
            js.publish(joint_state(JOINTS, [0.0] * 6, now_ns()))
        time.sleep(1.0)
    js.publish(joint_state(JOINTS, [0.0] * 6, now_ns()))  # sequence 102
    wait_for(lambda: (t := rec.status()["topics"]["/follower/joint_states"])["count"] + t["drops"] == 102,
             what="every sequence number accounted for")
    assert graph.call("/recorder/stop").success
    info = read_metadata_yaml(only_bag(tmp_path))
    drops = EpisodeMeta.from_strings(info["custom_data"]).drops["/follower/joint_states"]
    assert drops > 0 and info["message_count"] + drops == 102


def _decode_pixels(data: bytes) -> int:
    return timecode.decode(cv2.imdecode(np.frombuffer(bytes(data), np.uint8), cv2.IMREAD_COLOR))


def test_image_stamp_is_capture_time_despite_latency(graph: Graph, tmp_path: Path) -> None:
    cam = graph.add(CameraNode(context=graph.context, parameter_overrides=[
        Parameter("name", value="wrist"), Parameter("width", value=320), Parameter("height", value=240),
        Parameter("fps", value=30.0), Parameter("latency_ms", value=80.0)]))
    pubs = graph.add(Node("arm", context=graph.context))
    arm = pubs.create_publisher(JointState, "/follower/joint_states", STREAM_QOS)
    arm.publish(joint_state(JOINTS, [0.3] * 6, now_ns()))
    rec = recorder(graph, tmp_path, ["/cameras/wrist/image/compressed"], cameras=["wrist"])
    wait_for(subscribed(rec, "/cameras/wrist/image/compressed"))
    assert graph.call("/recorder/start").success
    wait_for(lambda: rec.status()["messages"] >= 30, what="30 frames")
    assert graph.call("/recorder/stop").success
    got, records, _ = read_mcap(only_bag(tmp_path))
    frames = got["/cameras/wrist/image/compressed"]
    assert len(frames) >= 30
    for m, decoded in frames:
        capture = decoded.header.stamp.sec * 10**9 + decoded.header.stamp.nanosec  # ROS time
        assert abs(capture - _decode_pixels(decoded.data)) <= 1_000_000  # within 1 ms of true capture
        assert m.publish_time - capture >= 75_000_000  # sent (DDS source time) after the pipeline latency
        assert m.log_time >= m.publish_time  # and received after that
    # A loaded machine may miss captures; each one must be counted, never silent.
    stamps = sorted(d.header.stamp.sec * 10**9 + d.header.stamp.nanosec for _m, d in frames)
    period = 1e9 / 30.0
    missed = sum(round(g / period) - 1 for g in (b - a for a, b in itertools.pairwise(stamps)) if g > 1.5 * period)
    assert cam.drops.dropped >= missed


def test_stop_keeps_the_frames_still_in_flight(graph: Graph, tmp_path: Path) -> None:
    """A camera's frames reach the recorder a pipeline latency after capture (here 250 ms): stop
    waits until the camera has delivered a frame captured at or after the stop, so the episode's
    last quarter second of video is in the bag, not cut (the CI failure this fixes: a trailing
    FRAME_GAP on the clean demo episode, frames lost in flight on a loaded machine)."""
    graph.add(CameraNode(context=graph.context, parameter_overrides=[
        Parameter("name", value="wrist"), Parameter("width", value=320), Parameter("height", value=240),
        Parameter("fps", value=30.0), Parameter("latency_ms", value=250.0)]))
    topic = "/cameras/wrist/image/compressed"
    rec = recorder(graph, tmp_path, [topic], cameras=["wrist"], stop_settle_ms=5000.0)
    wait_for(subscribed(rec, topic))
    assert graph.call("/recorder/start").success
    wait_for(lambda: rec.status()["messages"] >= 30, what="30 frames")
    stop_ros_ns = to_ros_ns(now_ns())
    assert graph.call("/recorder/stop").success
    got, _records, _ = read_mcap(only_bag(tmp_path))
    last = max(d.header.stamp.sec * 10**9 + d.header.stamp.nanosec for _m, d in got[topic])
    assert last >= stop_ros_ns, (last - stop_ros_ns) / 1e6  # without the settle: ~250 ms short


def test_stall_and_stamp_offset_faults_show_in_recorded_stamps(graph: Graph, tmp_path: Path) -> None:
    small = [Parameter("width", value=320), Parameter("height", value=240), Parameter("fps", value=20.0)]
    stall = graph.add(CameraNode("camera_stall", context=graph.context, parameter_overrides=small + [
        Parameter("name", value="stall")]))
    graph.add(CameraNode("camera_skew", context=graph.context, parameter_overrides=small + [
        Parameter("name", value="skew"), Parameter("stamp_offset_ms", value=-40.0)]))
    diags: list[Any] = []
    listener = graph.add(Node("diag_listener", context=graph.context))
    listener.create_subscription(DiagnosticArray, "/diagnostics", lambda m: diags.extend(m.status), 50)
    topic = "/cameras/stall/image/compressed"
    rec = recorder(graph, tmp_path, [topic, "/cameras/skew/image/compressed"], cameras=["stall", "skew"])
    wait_for(subscribed(rec, topic, "/cameras/skew/image/compressed"))
    assert graph.call("/recorder/start").success

    def recorded() -> int:
        return int(rec.status()["topics"].get(topic, {}).get("count", 0))

    # Stall on demand once frames are being recorded, so the gap is inside the episode however
    # slowly a loaded machine got there; then record well past it.
    wait_for(lambda: recorded() >= 10, timeout=40, what="stall-camera frames recorded")
    assert stall.set_parameters([Parameter("stall_now_s", value=1.5)])[0].successful
    before = recorded()
    wait_for(lambda: stall.drops.dropped > 0 and recorded() >= before + 15, timeout=40, what="frames after the stall")
    assert graph.call("/recorder/stop").success
    got, _, _ = read_mcap(only_bag(tmp_path))
    stamps = [header_stamp_ns(m.data) for m, _ in got["/cameras/stall/image/compressed"]]
    assert max(np.diff(stamps)) >= 1.4e9  # the 1.5 s stall is a visible gap in the recorded stamps
    assert stall.drops.dropped >= 25  # 1.5 s at 20 fps ≈ 29 frames never captured
    reported = wait_for(
        lambda: [
            d
            for d in diags
            if d.name == "camera/stall"
            and d.level == DiagnosticStatus.WARN
            and int({kv.key: kv.value for kv in d.values}["dropped"]) >= 25
        ],
        what="drop diagnostics",
    )
    assert "frames dropped" in reported[-1].message
    for m, decoded in got["/cameras/skew/image/compressed"]:
        assert abs((header_stamp_ns(m.data) - _decode_pixels(decoded.data)) + 40_000_000) <= 1_000_000


_RECORDER_CMD = [sys.executable, "-c", "from teleop_flywheel.ros.nodes.recorder import main; main()"]


def test_kill_9_recorder_then_recover_loses_at_most_one_second(graph: Graph, tmp_path: Path) -> None:
    pubs = graph.add(Node("publishers", context=graph.context))
    js = pubs.create_publisher(JointState, "/follower/joint_states", STREAM_QOS)
    proc = subprocess.Popen(_RECORDER_CMD + ["--ros-args", "-p", f"output_dir:={tmp_path}",
                                             "-p", "topics:=[/follower/joint_states]", "-p", "auto_start:=true",
                                             "-p", "discovery_period_s:=0.1", "-p", "verdict:=false"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=os.environ.copy())
    try:
        wait_for(lambda: js.get_subscription_count() >= 1, timeout=60, what="recorder process subscribed")
        last_stamp = 0
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline:
            last_stamp = now_ns()
            js.publish(joint_state(JOINTS, [0.0] * 6, last_stamp))
            time.sleep(0.002)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    bag = only_bag(tmp_path)
    assert not (bag / "metadata.yaml").exists()
    report = recover(bag)
    assert report.messages > 100
    got, records, _ = read_mcap(bag)
    last_recorded = max(header_stamp_ns(m.data) for m, _ in got["/follower/joint_states"])
    assert (to_ros_ns(last_stamp) - last_recorded) / 1e9 <= 1.0
    assert EpisodeMeta.from_strings(records[METADATA_RECORD]).extra["recovered"]["from"] == "start record"


def test_full_disk_stops_episode_with_path_and_keeps_earlier_bag(graph: Graph, tmp_path: Path) -> None:
    disk = tmp_path / "disk"
    mount_tmpfs(disk, "2m")
    try:
        pubs = graph.add(Node("publishers", context=graph.context))
        img = pubs.create_publisher(CompressedImage, "/cameras/noise/image/compressed", STREAM_QOS)
        rec = recorder(graph, disk, ["/cameras/noise/image/compressed"], cameras=["noise"], max_chunk_age_s=0.1)
        wait_for(subscribed(rec, "/cameras/noise/image/compressed"))

        def burst(n: int) -> None:
            for _ in range(n):
                m = CompressedImage(format="jpeg", data=os.urandom(30_000))
                stamp(m.header.stamp, now_ns())
                img.publish(m)
                time.sleep(0.002)

        assert graph.call("/recorder/start").success
        burst(5)
        wait_for(lambda: rec.status()["messages"] >= 5)
        assert graph.call("/recorder/stop").success
        first = only_bag(disk)
        # The bag itself (its verdict.json is written beside it by the verdict worker, whenever it is done)
        first_bytes = {p.name: p.read_bytes() for p in first.iterdir() if p.name != "verdict.json"}
        assert graph.call("/recorder/start").success
        second = Path(rec.status()["bag"])
        burst(150)  # 4.5 MB of incompressible images into what is left of 2 MB
        status = wait_for(lambda: (s := rec.status())["state"] == "error" and s, what="disk-full error")
        assert "disk full" in status["error"] and str(second) in status["error"]
        assert {p.name: p.read_bytes() for p in first.iterdir() if p.name != "verdict.json"} == first_bytes
        with AnyReader([first]) as reader:
            assert reader.message_count == 5
        assert not graph.call("/recorder/stop").success  # the episode was already stopped by the error
    finally:
        unmount(disk)


def _set_remote(graph: Graph, **values: Any) -> list[Any]:
    client = AsyncParameterClient(graph.client, "recorder")
    assert client.wait_for_services(timeout_sec=20)
    future = client.set_parameters([Parameter(k, value=v) for k, v in values.items()])
    wait_for(future.done, 20, "set_parameters")
    return list(future.result().results)


def test_no_graph_participant_can_run_a_command_or_redirect_data(graph: Graph, tmp_path: Path) -> None:
    """The old `ptp_probe` ran any command line set through /recorder/set_parameters at the next start."""
    planted = tmp_path / "planted"
    out = tmp_path / "bags"
    pubs = graph.add(Node("publishers", context=graph.context))
    js = pubs.create_publisher(JointState, "/follower/joint_states", STREAM_QOS)
    rec = recorder(graph, out, ["/follower/joint_states"])
    wait_for(subscribed(rec, "/follower/joint_states"))
    attacks = {"ptp_probe": f"sh -c 'touch {planted}'", "output_dir": str(tmp_path / "elsewhere"),
               "calibration_files": ["/etc/passwd"], "topics": ["/secret"], "episode_prefix": "../escape",
               "task_spec": '{"instruction": "any success will do"}'}  # the spec episodes are judged by
    for name, value in attacks.items():
        (result,) = _set_remote(graph, **{name: value})
        assert not result.successful, name
        assert "read-only" in result.reason or "read_only" in result.reason, (name, result.reason)
    (bad_text,) = _set_remote(graph, task="pick\x1b[2Jthe cube")
    assert not bad_text.successful and "control characters" in bad_text.reason
    assert graph.call("/recorder/start").success
    js.publish(joint_state(JOINTS, [0.0] * 6, now_ns()))
    wait_for(lambda: rec.status()["messages"] >= 1)
    assert graph.call("/recorder/stop").success
    assert not planted.exists() and not (tmp_path / "elsewhere").exists()
    assert only_bag(out).name.startswith("episode_")


def test_clock_probe_is_a_fixed_mechanism_chosen_at_start(graph: Graph, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match=r"/recorder: parameter ptp_probe = 'sh -c id' is not allowed: "
                                         r"one of: '', 'pmc', 'chrony'"):
        RecorderNode(context=graph.context, parameter_overrides=[Parameter("ptp_probe", value="sh -c id")])
    # A `pmc` on PATH answers with a captured linuxptp reply; the recorder runs it with its fixed argv.
    bindir = tmp_path / "bin"
    bindir.mkdir()
    argv_log = tmp_path / "argv"
    (bindir / "pmc").write_text(
        "#!/bin/sh\n"
        f"printf '%s\\n' \"$@\" > {argv_log}\n"
        "printf 'sending: GET TIME_STATUS_NP\\n\\t90e2ba.fffe.0c3a1d-0 seq 0 RESPONSE MANAGEMENT TIME_STATUS_NP\\n"
        "\\t\\tmaster_offset              -27\\n\\t\\tgmPresent                  true\\n'\n")
    (bindir / "pmc").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    pubs = graph.add(Node("publishers", context=graph.context))
    js = pubs.create_publisher(JointState, "/follower/joint_states", STREAM_QOS)
    rec = recorder(graph, tmp_path / "bags", ["/follower/joint_states"], ptp_probe="pmc")
    wait_for(subscribed(rec, "/follower/joint_states"))
    assert graph.call("/recorder/start").success
    js.publish(joint_state(JOINTS, [0.0] * 6, now_ns()))
    wait_for(lambda: rec.status()["messages"] >= 1)
    assert graph.call("/recorder/stop").success
    meta = EpisodeMeta.from_strings(read_metadata_yaml(only_bag(tmp_path / "bags"))["custom_data"])
    assert meta.ptp_offset_ns == -27
    assert argv_log.read_text().splitlines() == ["-u", "-b", "0", "GET TIME_STATUS_NP"]


@pytest.mark.parametrize("hot_c", [66.0, None])
def test_an_episode_with_a_servo_fault_is_marked_and_rejected(graph: Graph, tmp_path: Path,
                                                               hot_c: float | None) -> None:
    """A real arm driver latches a servo fault (a servo past temperature_stop_c); its latched
    `follower/fault` is recorded with the episode and the validator rejects it as SERVO_FAULT. A
    healthy arm's episode has no such reason."""
    from teleop_flywheel.core.calibration import sim_calibration_file
    from teleop_flywheel.data.validate import validator as val
    from teleop_flywheel.hw.feetech.sim import Faults, SimulatedArm
    from teleop_flywheel.ros.nodes.arm_driver import ArmDriverNode

    faults = Faults(hot={3: hot_c}) if hot_c else Faults()
    with SimulatedArm("follower", link=tmp_path / "follower", faults=faults) as arm:
        driver = graph.add(
            ArmDriverNode(
                "follower_arm",
                context=graph.context,
                parameter_overrides=[
                    Parameter("port", value=str(arm.link)),
                    Parameter("role", value="follower"),
                    Parameter("simulated", value=True),
                    Parameter("calibration_file", value=str(sim_calibration_file("follower"))),
                    Parameter("slow_period_s", value=0.1),
                ],
            )
        )
        out = tmp_path / "bags"
        rec = recorder(graph, out, ["/follower/joint_states", "/follower/fault"])
        assert graph.label(outcome="success") == []
        wait_for(subscribed(rec, "/follower/joint_states"), 30)
        if hot_c:
            # Latched before the episode: only the state the recorder keeps for it reaches the bag.
            wait_for(lambda: bool(driver.arm.state.faults), 30, "the fault latched")
            wait_for(subscribed(rec, "/follower/fault"), 30)
            wait_for(lambda: rec.episodes.topics["/follower/fault"].latest is not None, 30, "the latched fault taken")
        assert graph.call("/recorder/start").success
        wait_for(lambda: rec.status()["messages"] > 300, 30, "an episode's worth of joint states")
        assert graph.call("/recorder/stop").success
        driver.close()  # while its arm is still there to let go
    report = val.validate_bag((str(only_bag(out)), val.ValidateConfig.load()))
    faults_found = [r for r in report.reasons if r.code == "SERVO_FAULT"]
    if hot_c:
        # The hot servo cools from its start (0.24 °C/s at 66 °C in the simulator): a driver that first reads
        # it over 2 s later, on a loaded machine, latches 65 °C — still at the stop threshold (65 °C).
        assert faults_found, report.reasons
        latched = re.search(r"elbow_flex \(servo 3\): temperature (\d+) °C", faults_found[0].detail)
        assert latched and 65 <= int(latched.group(1)) <= hot_c, faults_found[0].detail
    else:
        assert not faults_found, report.reasons


def test_the_default_topics_record_what_the_leader_rendered(graph: Graph, tmp_path: Path) -> None:
    """Without a `topics` override the recorder records `/leader/feedback` (the leader driver's
    rendered goal offset and torque ceiling per joint), as published, listed in the episode's topics."""
    pubs = graph.add(Node("leader_arm", context=graph.context))
    fb = pubs.create_publisher(JointState, "/leader/feedback", STREAM_QOS)
    rec = graph.add(RecorderNode(context=graph.context, parameter_overrides=[
        Parameter("output_dir", value=str(tmp_path)), Parameter("discovery_period_s", value=0.1),
        Parameter("status_period_s", value=0.2), NO_VERDICT]))
    wait_for(subscribed(rec, "/leader/feedback"), what="recorder subscription")
    wait_for(lambda: fb.get_subscription_count() >= 1, what="matched")
    assert graph.call("/recorder/start").success
    sent = []
    for i in range(50):
        m = joint_state(JOINTS, [0.0] * 5 + [0.002 * i], now_ns(), efforts=[0.0] * 5 + [0.15])
        fb.publish(m)
        sent.append(m)
        time.sleep(0.002)
    wait_for(lambda: rec.status()["topics"]["/leader/feedback"]["count"] >= len(sent), what="feedback recorded")
    assert graph.call("/recorder/stop").success
    got, records, _channels = read_mcap(only_bag(tmp_path))
    assert len(got["/leader/feedback"]) == len(sent)
    assert all(same_fields(a, b) for a, (_m, b) in zip(sent, got["/leader/feedback"], strict=True))
    assert "/leader/feedback" in EpisodeMeta.from_strings(records[METADATA_RECORD]).topics
