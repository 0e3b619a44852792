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

from teleop_flywheel.ros.session.playback import BagSource, Player, ReplayError, serve_foxglove

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
            while adv.get("op") != "advertise":
                adv = json.loads(await ws.recv())
            channel = adv["channels"][0]
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
        proc = subprocess.Popen([sys.executable, "-m", "teleop_flywheel.cli", "replay", str(bag), "--ros", "--rate", "2", "--wait-for-subscribers", "1"])
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
