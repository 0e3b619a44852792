"""Foxglove replay of a bag with a real WebSocket client on loopback: channels, playback, 3D arms."""
from __future__ import annotations

import asyncio
import json
import struct
import time
from pathlib import Path

import pytest
from support.paths import ROOT
from support.replay_bags import ROS_T0, STEP_NS, T0, N, make_arm_bag, make_bag

from teleop_flywheel.recording.mcap.player import BagSource
from teleop_flywheel.ros.session.foxglove.playback import serve_foxglove

REACH = 0.135 + 0.061 + 0.098  # forearm + wrist + tool, along +x at zero (urdf/so101.urdf)
PAN_HEIGHT, UPPER_ARM = 0.095, 0.116


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
