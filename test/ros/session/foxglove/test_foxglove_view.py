"""What a Foxglove user opens works: the live view of a running session, and the shipped layout on
a bag that session recorded. Real processes (a `sim` session: simulated arms on pseudo-terminals,
real DDS on localhost), foxglove-sdk's real WebSocket server, and a WebSocket client that does
what the Foxglove app does (`foxglove_client.py`)."""
from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("rclpy")
pytest.importorskip("websockets")

from support import foxglove_client as fc  # noqa: E402

from teleop_flywheel.core.kinematics import so101  # noqa: E402
from teleop_flywheel.core.resources import config_path  # noqa: E402
from teleop_flywheel.core.so101 import JOINT_NAMES  # noqa: E402
from teleop_flywheel.recording.mcap.cdr import joint_state_layout  # noqa: E402
from teleop_flywheel.recording.mcap.reader import open_bag  # noqa: E402
from teleop_flywheel.ros.session.foxglove.layout import layout, topics_of  # noqa: E402
from teleop_flywheel.ros.session.foxglove.view import LiveView  # noqa: E402
from teleop_flywheel.ros.session.launch.graph import CameraSpec, SessionConfig, build_graph, with_parameters  # noqa: E402
from teleop_flywheel.ros.session.launch.supervisor import Session  # noqa: E402

REACH = 0.135 + 0.061 + 0.098
PAN_HEIGHT, UPPER_ARM = 0.095, 0.116


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A running sim session (cameras as the default camera set: front) that has recorded one
    episode with a takeover, labelled, so every stream the layout reads has data."""
    from std_msgs.msg import String

    from teleop_flywheel.core.bag_topics import INTERVENTION
    from teleop_flywheel.hw.pedal.virtual import VirtualPedal
    from teleop_flywheel.ros.nodes.common import LATCHED_QOS
    from teleop_flywheel.ros.nodes.recorder_client import RecorderClient
    from teleop_flywheel.ros.session.clients import RecorderStatus

    out = tmp_path_factory.mktemp("view") / "bags"
    cfg = SessionConfig(cameras=(CameraSpec("front", source="synthetic", device="synthetic", fps=15.0),),
                        output_dir=str(out), task="foxglove layout test", operator="test")
    # The streams of the layout's panels the episode must hold (the intervention events are waited for
    # by content; the URDF and /tf are served beside the bag).
    streams = [t for t in topics_of(layout(("front",))) if t not in ("/robot_description", "/tf", INTERVENTION)]
    events: list[dict[str, Any]] = []

    def count(s: dict[str, Any], topic: str) -> int:
        return int(s["topics"].get(topic, {}).get("count", 0))  # over the recorder's life

    # No verdict at stop: nothing here reads one, and the session's stop waited for the episode's (up to 5 s).
    with Session(with_parameters(build_graph("sim", cfg), {"recorder": {"verdict": False}})) as session:
        client = RecorderClient(session.context, "layout_operator")
        status = RecorderStatus(client.node)
        client.node.create_subscription(String, INTERVENTION, lambda m: events.append(json.loads(m.data)), LATCHED_QOS)
        session.add_node(client.node)
        assert client.ready(30)
        status.wait_all_topics(60)
        pedal = VirtualPedal(session.graph.pedal_fifo)

        def each_stream_recorded() -> None:
            """Until every panel's stream has a message in the bag taken after this call."""
            since = status.wait(lambda s: s["state"] == "recording", 30, "recording")
            status.wait(lambda s: s["state"] == "recording" and all(count(s, t) > count(since, t) for t in streams),
                        30, "a message of every layout stream")

        def event_seen(ok: Callable[[dict[str, Any]], bool], what: str) -> None:
            deadline = time.monotonic() + 30
            while not any(ok(e) for e in events):
                assert time.monotonic() < deadline, f"no intervention event {what}"
                time.sleep(0.02)

        try:
            # Waits for what the layout reads, not fixed times: the policy's streams before the takeover,
            # the takeover's start on /teleop/intervention before its label, the labelled end after it.
            client.call("start")
            each_stream_recorded()
            pedal.takeover(True)
            event_seen(lambda e: e["end_ns"] is None, "starting the takeover")
            pedal.label("wrong_grasp")
            pedal.takeover(False)
            event_seen(lambda e: e["end_ns"] is not None and e["trigger"] == "wrong_grasp", "ending it, labelled")
            each_stream_recorded()  # the hand-back's authority included
            client.label(outcome="success")
            before = status.last_saved()
            client.call("stop")
            bag = Path(status.saved_after(before))
        finally:
            pedal.close()
        session.remove_node(client.node)
        yield {"session": session, "bag": bag}


def test_live_view_serves_the_session_and_both_arms(sim: dict[str, Any]) -> None:
    """`teleop-flywheel view` against a running session: its topics, the URDF, both arms' transforms."""
    session = sim["session"]
    view = LiveView(context=session.context, port=0)
    session.add_node(view.node)
    arm_frames = {"leader/tool_link", "follower/tool_link"}

    def done(g: fc.Received) -> bool:
        streams = {"/leader/joint_states", "/follower/joint_states", "/teleop/authority",
                   "/cameras/front/image/compressed", "/robot_description", "/tf"}
        if not streams <= set(g.messages) or len(g.messages["/tf"]) < 4:
            return False
        return arm_frames <= {e["child"] for e in fc.transforms(g)}

    try:
        got = fc.run(f"ws://127.0.0.1:{view.port}", None, until=done, timeout_s=60, settle_s=0)
    finally:
        session.remove_node(view.node)
        view.close()
    recorded = set(session.graph.node("recorder").parameters["topics"])
    served = set(got.channels)
    assert {"/" + t.lstrip("/") for t in recorded} <= served, {"/" + t.lstrip("/") for t in recorded} - served
    assert done(got), {t: len(m) for t, m in got.messages.items()}
    assert fc.cdr_string(got.messages["/robot_description"][0][1]) == so101().text
    # Transforms are stamped in ROS time (the joint states' header stamps), near the receive time.
    edges = fc.transforms(got)
    assert all(abs(e["stamp_ns"] - time.time_ns()) < 120e9 for e in edges)
    # Each arm's base stands where the layout's 3D panel expects it.
    for role, y in (("leader", 0.25), ("follower", -0.25)):
        assert fc.world_pose(edges, f"{role}/base_link")[:3, 3] == pytest.approx((0, y, 0))


def test_live_view_transforms_are_the_hand_computed_forward_kinematics() -> None:
    """Known joint states published on a namespaced rig: the view serves the rig namespace-free,
    topics and frames alike (the shipped layout fits it), the arms at the hand-computed poses."""
    import rclpy
    from sensor_msgs.msg import JointState

    from teleop_flywheel.ros.nodes.common import NodeSpinner

    context = rclpy.Context()
    rclpy.init(context=context)
    spinner = NodeSpinner(context)
    publisher = rclpy.create_node("known_arms", namespace="/viewtest", context=context)
    view = LiveView(context=context, namespace="viewtest", port=0)
    spinner.add(publisher)
    spinner.add(view.node)
    q = {"leader": {"shoulder_pan": math.pi / 2}, "follower": {"elbow_flex": -math.pi / 2}}
    pubs = {role: publisher.create_publisher(JointState, f"{role}/joint_states", 10) for role in q}
    stop = threading.Event()

    def publish() -> None:
        while not stop.is_set():
            for role, pub in pubs.items():
                msg = JointState(name=list(JOINT_NAMES), position=[q[role].get(j, 0.0) for j in JOINT_NAMES])
                now = time.time_ns()
                msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(now, 10**9)
                pub.publish(msg)
            stop.wait(0.02)

    thread = threading.Thread(target=publish, daemon=True)
    thread.start()
    frames = {"leader/tool_link", "follower/tool_link"}
    try:
        got = fc.run(f"ws://127.0.0.1:{view.port}", ["/tf", "/leader/joint_states", "/robot_description"],
                     until=lambda g: "/tf" in g.messages and frames <= {e["child"] for e in fc.transforms(g)},
                     timeout_s=60, settle_s=0)
    finally:
        stop.set()
        thread.join()
        spinner.shutdown()
        view.close()
        publisher.destroy_node()
        context.try_shutdown()
    assert "/leader/joint_states" in got.channels and "/viewtest/leader/joint_states" not in got.channels
    edges = fc.transforms(got)
    leader = fc.world_pose(edges, "leader/tool_link")
    assert leader[:3, 3] == pytest.approx((0.0, 0.25 + REACH, PAN_HEIGHT + UPPER_ARM), abs=1e-9)
    follower = fc.world_pose(edges, "follower/tool_link")
    assert follower[:3, 3] == pytest.approx((0.0, -0.25, PAN_HEIGHT + UPPER_ARM + REACH), abs=1e-9)


def test_every_layout_panel_shows_data_on_a_recorded_bag(sim: dict[str, Any]) -> None:
    """Every topic and message path of the shipped layout exists in a bag the sim session recorded
    (or is one `replay --foxglove` serves beside the bag: the URDF and /tf), with data, and its
    header stamps on the bag's timeline."""
    from teleop_flywheel.recording.mcap.player import BagSource
    from teleop_flywheel.ros.session.foxglove.playback import serve_foxglove

    shipped = json.loads(config_path("foxglove_layout.json").read_text())
    assert shipped == layout(("front",))  # the default camera set; others: replay/view --layout
    wanted = topics_of(shipped)
    bag = open_bag(sim["bag"])
    assert not bag.damage, bag.damage
    source = BagSource(sim["bag"])
    start, end = source.start_ns, source.end_ns
    for topic, fields in wanted.items():
        if topic in ("/robot_description", "/tf"):
            continue
        assert bag.has(topic), f"{topic}: not in the bag (topics: {sorted(bag.topics)})"
        raw = bag.raw(topic)
        assert len(raw) > 0, f"{topic}: no messages"
        stamps = bag.stamps(topic) if topic not in ("/teleop/intervention",) else raw.log_ns
        # On the bag's timeline: a stamp is the capture instant, at most a little before its receipt.
        assert stamps.min() >= start - 1e9 and stamps.max() <= end, (topic, stamps.min() - start, end - stamps.max())
        for path in fields:  # position[i] of JointState messages
            index = int(path[len("position["):-1])
            _stamp, _frame, names, spans = joint_state_layout(raw.data[0])
            assert path.startswith("position[") and index < spans[0][1], (topic, path, names)
    # The 3D panel's topics come from the replay of this same bag, on its timeline.
    session = serve_foxglove(source, port=0, start_paused=True)
    try:
        got = fc.run(f"ws://127.0.0.1:{session.port}", None, play=(8.0, None), timeout_s=120,
                     until=lambda g: any(s == fc.PLAYBACK_ENDED for s, _ in g.playback_states))
    finally:
        session.stop()
    for topic in wanted:
        assert got.messages.get(topic), f"replay served nothing on {topic}"
    tf = fc.transforms(got)
    assert {"leader/tool_link", "follower/tool_link"} <= {e["child"] for e in tf}
    assert all(start - 1e9 <= e["stamp_ns"] <= end for e in tf)
    assert "wrong_grasp" in " ".join(text for _t, text in bag.strings("/teleop/intervention"))
