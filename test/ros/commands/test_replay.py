"""Foxglove replay with a real WebSocket client on loopback; ROS republish onto a real graph."""
from __future__ import annotations

import asyncio
import json
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from mcap_ros2.writer import Writer as Ros2Writer
from support.paths import ROOT

from teleop_flywheel.ros.commands.replay import BagSource, Player, ReplayError, serve_foxglove

STRING_DEF = "string data"
N = 40
STEP_NS = 10_000_000  # 100 Hz
T0 = 5_000_000_000


def make_bag(root: Path) -> Path:
    bag = root / "ep"
    bag.mkdir()
    with (bag / "ep_0.mcap").open("wb") as f:
        writer = Ros2Writer(f)
        schema = writer.register_msgdef("std_msgs/msg/String", STRING_DEF)
        for i in range(N):
            t = T0 + i * STEP_NS
            writer.write_message("/chatter", schema, {"data": f"m{i}"}, log_time=t, publish_time=t)
        writer.finish()
    return bag


def test_source_reads_index(tmp_path: Path) -> None:
    src = BagSource(make_bag(tmp_path))
    assert (src.start_ns, src.end_ns, src.message_count) == (T0, T0 + (N - 1) * STEP_NS, N)
    assert [m.log_time for m in src.messages(T0 + 30 * STEP_NS)][0] == T0 + 30 * STEP_NS


def test_missing_and_unindexed_bags_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(ReplayError, match="no such bag"):
        BagSource(tmp_path / "nope")
    bag = make_bag(tmp_path)
    data = (bag / "ep_0.mcap").read_bytes()
    (bag / "ep_0.mcap").write_bytes(data[: len(data) // 2])
    with pytest.raises(ReplayError, match="recover"):
        BagSource(bag)


def test_player_paces_and_seeks(tmp_path: Path) -> None:
    src = BagSource(make_bag(tmp_path))
    got: list[int] = []
    player = Player(src, lambda m: got.append(m.log_time), speed=4.0)
    started = time.monotonic()
    thread = threading.Thread(target=player.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not player.ended and time.monotonic() < deadline:
        time.sleep(0.01)
    elapsed = time.monotonic() - started
    assert got == [T0 + i * STEP_NS for i in range(N)]
    # 390 ms of bag at 4x is ~100 ms: pacing happened (not instantaneous dumping of 40 messages).
    assert elapsed >= 0.09
    got.clear()
    player.seek(T0 + 35 * STEP_NS)
    player.play()
    deadline = time.monotonic() + 10
    while len(got) < N - 35 and time.monotonic() < deadline:
        time.sleep(0.01)
    player.stop()
    assert got[0] == T0 + 35 * STEP_NS


def test_foxglove_websocket_client_receives_bag(tmp_path: Path) -> None:
    websockets = pytest.importorskip("websockets")
    src = BagSource(make_bag(tmp_path))
    session = serve_foxglove(src, port=0, start_paused=True)

    async def client() -> tuple[dict, list[int], list[bytes]]:
        async with websockets.connect(f"ws://127.0.0.1:{session.port}", subprotocols=["foxglove.sdk.v1"]) as ws:
            info = json.loads(await ws.recv())
            adv = json.loads(await ws.recv())
            while adv.get("op") != "advertise" or all(c["topic"] != "/chatter" for c in adv["channels"]):
                adv = json.loads(await ws.recv())
            channel = next(c for c in adv["channels"] if c["topic"] == "/chatter")
            await ws.send(json.dumps({"op": "subscribe", "subscriptions": [{"id": 3, "channelId": channel["id"]}]}))
            await asyncio.sleep(0.2)
            # PlaybackControlRequest (opcode 3): play at 4x after seeking to message 20.
            req_id = b"r1"
            await ws.send(bytes([3, 0]) + struct.pack("<fBQI", 4.0, 1, T0 + 20 * STEP_NS, len(req_id)) + req_id)
            stamps: list[int] = []
            payloads: list[bytes] = []
            deadline = time.monotonic() + 15
            while len(stamps) < N - 20 and time.monotonic() < deadline:
                frame = await asyncio.wait_for(ws.recv(), 10)
                if isinstance(frame, bytes) and frame[0] == 1:
                    sub_id, log_time = struct.unpack_from("<IQ", frame, 1)
                    assert sub_id == 3
                    stamps.append(log_time)
                    payloads.append(frame[13:])
            return {"info": info, "channel": channel}, stamps, payloads

    try:
        meta, stamps, payloads = asyncio.run(client())
    finally:
        session.stop()
    assert "playbackControl" in meta["info"]["capabilities"]
    assert meta["info"]["dataStartTime"] == {"sec": T0 // 10**9, "nsec": T0 % 10**9}
    assert meta["channel"]["topic"] == "/chatter"
    assert meta["channel"]["encoding"] == "cdr" and meta["channel"]["schemaEncoding"] == "ros2msg"
    assert stamps == [T0 + i * STEP_NS for i in range(20, N)]
    assert b"m20" in payloads[0]


def test_ros_republish_reaches_a_subscriber(tmp_path: Path) -> None:
    rclpy = pytest.importorskip("rclpy")
    from std_msgs.msg import String


    bag = make_bag(tmp_path)
    received: list[str] = []
    rclpy.init()
    try:
        node = rclpy.create_node("replay_listener")
        from teleop_flywheel.ros.nodes.common import STREAM_QOS

        node.create_subscription(String, "/chatter", lambda m: received.append(m.data), STREAM_QOS)
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "teleop_flywheel.cli",
                "replay",
                str(bag),
                "--ros",
                "--rate",
                "2",
                "--wait-for-subscribers",
                "1",
            ]
        )
        deadline = time.monotonic() + 30
        while proc.poll() is None and time.monotonic() < deadline:
            rclpy.spin_once(node, timeout_sec=0.05)
        for _ in range(20):
            rclpy.spin_once(node, timeout_sec=0.05)
        assert proc.wait(5) == 0
        node.destroy_node()
    finally:
        rclpy.shutdown()
    # Playback waited for the subscriber to match, so every message arrives, in order.
    assert received == [f"m{i}" for i in range(N)]


# -- both arms in 3D, playback state at the end ---------------------------------------------------

ROS_T0 = 1_780_000_000 * 10**9  # header stamps are ROS time (wall clock)
REACH = 0.135 + 0.061 + 0.098  # forearm + wrist + tool, along +x at zero (urdf/so101.urdf)
PAN_HEIGHT, UPPER_ARM = 0.095, 0.116


def make_arm_bag(root: Path, leader: dict[str, float], follower: dict[str, float], n: int = 30,
                 namespace: str = "") -> Path:
    """Both arms' joint states (100 Hz, fixed positions) as the recorder writes them (under a rig
    namespace: fully qualified topic names, the namespace in the episode record)."""
    from mcap.writer import Writer

    from teleop_flywheel.core.so101 import JOINT_NAMES
    from teleop_flywheel.recording.mcap.cdr import joint_state_cdr
    from teleop_flywheel.recording.mcap.msgdefs import definition

    bag = root / "arms"
    bag.mkdir()
    js = definition("sensor_msgs/msg/JointState")
    with (bag / "arms_0.mcap").open("wb") as f:
        writer = Writer(f)
        writer.start(profile="ros2")
        schema = writer.register_schema(name=js.type_name, encoding="ros2msg", data=js.text.encode())
        channels = {role: writer.register_channel(f"{namespace}/{role}/joint_states", "cdr", schema)
                    for role in ("leader", "follower")}
        if namespace:
            writer.add_metadata("teleop_flywheel.episode", {"namespace": namespace, "stamp_clock": "ros"})
        for i in range(n):
            for role, q in (("leader", leader), ("follower", follower)):
                stamp = ROS_T0 + i * STEP_NS
                data = joint_state_cdr(stamp, list(JOINT_NAMES), [q.get(j, 0.0) for j in JOINT_NAMES])
                writer.add_message(channels[role], log_time=stamp + 1_000_000, data=data, publish_time=stamp)
        writer.finish()
    return bag


def test_foxglove_replay_sends_the_urdf_and_both_arms_transforms(tmp_path: Path) -> None:
    """A Foxglove client gets /robot_description (the shipped URDF) and /tf frame transforms of both
    prefixed arms whose composed poses are the hand-computed forward kinematics; at the end of the
    data the server says Ended."""
    pytest.importorskip("websockets")
    import math

    from support import foxglove_client as fc

    from teleop_flywheel.core.kinematics import so101

    bag = make_arm_bag(tmp_path, leader={"shoulder_pan": math.pi / 2}, follower={"elbow_flex": -math.pi / 2})
    session = serve_foxglove(BagSource(bag), port=0, start_paused=True)
    try:
        got = fc.run(f"ws://127.0.0.1:{session.port}", ["/robot_description", "/tf", "/leader/joint_states"],
                     until=lambda g: any(s == fc.PLAYBACK_ENDED for s, _ in g.playback_states),
                     play=(4.0, None), timeout_s=30)
    finally:
        session.stop()
    assert got.info["metadata"]["fg-library"].startswith("foxglove-sdk-python/")
    assert got.channels["/robot_description"]["schemaName"] == "std_msgs/msg/String"
    assert got.channels["/robot_description"]["encoding"] == "cdr"
    assert fc.cdr_string(got.messages["/robot_description"][0][1]) == so101().text
    assert got.channels["/tf"]["schemaName"] == "foxglove.FrameTransforms"
    edges = fc.transforms(got)
    assert {e["child"] for e in edges} >= {"leader/base_link", "leader/tool_link", "follower/tool_link"}
    # Transforms are stamped with the joint states' header stamps (ROS time): on the bag's timeline.
    assert all(ROS_T0 <= e["stamp_ns"] <= ROS_T0 + 30 * STEP_NS for e in edges)
    # Leader: base at world +0.25 y, pan +90° turns the straight-forward arm to +y.
    leader_tool = fc.world_pose(edges, "leader/tool_link")
    assert leader_tool[:3, 3] == pytest.approx((0.0, 0.25 + REACH, PAN_HEIGHT + UPPER_ARM), abs=1e-9)
    assert leader_tool[:3, 0] == pytest.approx((0.0, 1.0, 0.0), abs=1e-9)  # tool x axis along world +y
    # Follower: base at world −0.25 y, elbow −90° points forearm, wrist and tool straight up.
    follower_tool = fc.world_pose(edges, "follower/tool_link")
    assert follower_tool[:3, 3] == pytest.approx((0.0, -0.25, PAN_HEIGHT + UPPER_ARM + REACH), abs=1e-9)
    elbow = fc.world_pose(edges, "follower/lower_arm_link")
    assert elbow[:3, 3] == pytest.approx((0.0, -0.25, PAN_HEIGHT + UPPER_ARM), abs=1e-9)
    # Ended, at the end of the data (the client's player stops waiting).
    status, current = got.playback_states[-1]
    assert status == fc.PLAYBACK_ENDED and current == ROS_T0 + 29 * STEP_NS + 1_000_000


def make_latched_bag(root: Path) -> Path:
    """A stream (/chatter, volatile) and a latched topic (/teleop/intervention, transient-local),
    each with the QoS its publisher offered in the channel metadata, as rosbag2 and our recorder write it."""
    from mcap.writer import Writer

    from teleop_flywheel.recording.mcap.cdr import string_cdr
    from teleop_flywheel.recording.mcap.metadata import Qos, qos_yaml
    from teleop_flywheel.recording.mcap.msgdefs import definition

    bag = root / "latched"
    bag.mkdir()
    sd = definition("std_msgs/msg/String")
    with (bag / "latched_0.mcap").open("wb") as f:
        writer = Writer(f)
        writer.start(profile="ros2")
        schema = writer.register_schema(name=sd.type_name, encoding="ros2msg", data=sd.text.encode())
        chatter = writer.register_channel("/chatter", "cdr", schema,
                                          {"offered_qos_profiles": qos_yaml([Qos(depth=50)])})
        events = writer.register_channel("/teleop/intervention", "cdr", schema, {
            "offered_qos_profiles": qos_yaml([Qos(depth=20, durability="transient_local")])})
        for i in range(N):
            t = T0 + i * STEP_NS
            writer.add_message(chatter, log_time=t, data=string_cdr(f"m{i}"), publish_time=t)
            if i in (0, 10, 20):
                writer.add_message(events, log_time=t, data=string_cdr(f'{{"id": {i}}}'), publish_time=t)
        writer.finish()
    return bag


def test_ros_republish_keeps_recorded_qos_and_waits_for_subscribers(tmp_path: Path) -> None:
    """`replay --ros` (no options) publishes the latched topic transient-local, as recorded, so the
    console's transient-local subscriber matches it; and it waits for subscribers: ones created
    seconds after the start still get the first message."""
    rclpy = pytest.importorskip("rclpy")
    from rclpy.qos import DurabilityPolicy
    from std_msgs.msg import String

    from teleop_flywheel.ros.commands.replay_ros import recorded_qos
    from teleop_flywheel.ros.nodes.common import LATCHED_QOS, STREAM_QOS

    bag = make_latched_bag(tmp_path)
    src = BagSource(bag)
    by_topic = {ch.topic: ch for ch in src.channels.values()}
    assert recorded_qos(by_topic["/teleop/intervention"]).durability == "transient_local"
    assert recorded_qos(by_topic["/chatter"]).durability == "volatile"
    proc = subprocess.Popen([sys.executable, "-m", "teleop_flywheel.cli", "replay", str(bag), "--ros", "--rate", "2"],
                            stdout=subprocess.PIPE, text=True)
    chatter: list[str] = []
    events: list[str] = []
    rclpy.init()
    try:
        assert "waiting for subscribers" in proc.stdout.readline()  # type: ignore[union-attr]
        time.sleep(2.0)  # discovery long done: without waiting, the first second would be lost
        node = rclpy.create_node("replay_console_like")
        node.create_subscription(String, "/teleop/intervention", lambda m: events.append(m.data), LATCHED_QOS)
        node.create_subscription(String, "/chatter", lambda m: chatter.append(m.data), STREAM_QOS)
        deadline = time.monotonic() + 30
        offered = []
        while proc.poll() is None and time.monotonic() < deadline:
            rclpy.spin_once(node, timeout_sec=0.05)
            offered = offered or node.get_publishers_info_by_topic("/teleop/intervention")
        for _ in range(20):
            rclpy.spin_once(node, timeout_sec=0.05)
        assert proc.wait(5) == 0
        node.destroy_node()
    finally:
        if proc.poll() is None:
            proc.kill()
        rclpy.shutdown()
    assert offered and offered[0].qos_profile.durability == DurabilityPolicy.TRANSIENT_LOCAL
    assert events == ['{"id": 0}', '{"id": 10}', '{"id": 20}']
    assert chatter == [f"m{i}" for i in range(N)]


def test_foxglove_replay_of_a_namespaced_rig_serves_the_layout_s_names(tmp_path: Path) -> None:
    """A bag recorded under namespace:=rig_a is served namespace-free, topics and the arms' frames
    alike: the shipped layout (topics, URDF layers framed leader/ and follower/) fits it."""
    pytest.importorskip("websockets")
    from support import foxglove_client as fc

    bag = make_arm_bag(tmp_path, leader={}, follower={}, namespace="/rig_a")
    session = serve_foxglove(BagSource(bag), port=0, start_paused=True)
    try:
        got = fc.run(f"ws://127.0.0.1:{session.port}", ["/tf", "/leader/joint_states"],
                     until=lambda g: any(s == fc.PLAYBACK_ENDED for s, _ in g.playback_states)
                     and len(g.messages.get("/leader/joint_states", [])) >= 30,
                     play=(4.0, None), timeout_s=30)
    finally:
        session.stop()
    assert {"/leader/joint_states", "/follower/joint_states"} <= set(got.channels)
    assert not any(t.startswith("/rig_a") for t in got.channels)
    assert len(got.messages["/leader/joint_states"]) == 30
    frames = {e["child"] for e in fc.transforms(got)}
    assert {"leader/base_link", "follower/tool_link"} <= frames
    assert not any(f.startswith("rig_a") for f in frames)


def test_the_server_speaks_the_subprotocol_the_readme_names(tmp_path: Path) -> None:
    """docs/foxglove.md names the foxglove-sdk version and its subprotocol: `foxglove.sdk.v1` is accepted, a
    client offering only the classic `foxglove.websocket.v1` is refused (HTTP 400)."""
    websockets = pytest.importorskip("websockets")
    import importlib.metadata

    readme = (ROOT / "docs" / "foxglove.md").read_text()
    assert f"foxglove-sdk {importlib.metadata.version('foxglove-sdk')}" in readme
    assert "`foxglove.sdk.v1`" in readme
    session = serve_foxglove(BagSource(make_bag(tmp_path)), port=0, start_paused=True)

    async def offer(protocol: str) -> str | None:
        async with websockets.connect(f"ws://127.0.0.1:{session.port}", subprotocols=[protocol]) as ws:
            return ws.subprotocol

    try:
        assert asyncio.run(offer("foxglove.sdk.v1")) == "foxglove.sdk.v1"
        with pytest.raises(websockets.exceptions.InvalidStatus, match="400"):
            asyncio.run(offer("foxglove.websocket.v1"))
    finally:
        session.stop()
