"""A Foxglove WebSocket client for the tests: what the Foxglove app does on a connection, minus drawing.

Speaks the subprotocol foxglove-sdk's server accepts (`foxglove.sdk.v1`; the classic
`foxglove.websocket.v1` is refused): reads serverInfo and advertisements, subscribes to topics,
collects message data (opcode 1), time (2) and playback state (5), sends playback control
requests (3). Decodes what the 3D panel needs with independent decoders: the URDF from its CDR
`std_msgs/String`, `foxglove.FrameTransforms` from the advertised protobuf schema (google.protobuf),
and composes frames into world poses with plain quaternion algebra.
"""
from __future__ import annotations

import asyncio
import base64
import json
import struct
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

SUBPROTOCOL = "foxglove.sdk.v1"
PLAYBACK_ENDED = 3


@dataclass
class Received:
    info: dict[str, Any] = field(default_factory=dict)
    channels: dict[str, dict[str, Any]] = field(default_factory=dict)  # by topic
    messages: dict[str, list[tuple[int, bytes]]] = field(default_factory=dict)  # topic -> [(log_time, payload)]
    playback_states: list[tuple[int, int]] = field(default_factory=list)  # (status, current_time)


async def session(url: str, topics: list[str] | None, until: Any, timeout_s: float = 30.0,
                  play: tuple[float, int | None] | None = None, settle_s: float = 1.0,
                  drain_s: float = 0.5) -> Received:
    """Connect, subscribe to `topics` (None: every advertised topic) once advertised, optionally send
    a play request (speed, seek time), and collect until `until(received)` is true or the timeout,
    then `drain_s` longer: the server queues control messages (playback state) and data apart, so
    `Ended` may overtake the last messages."""
    import websockets

    got = Received()
    subscribed: dict[int, str] = {}
    async with websockets.connect(url, subprotocols=[SUBPROTOCOL], max_size=None) as ws:
        assert ws.subprotocol == SUBPROTOCOL
        deadline = time.monotonic() + timeout_s
        drained = False
        sub_deadline = time.monotonic() + settle_s
        played = play is None
        next_id = 1
        while time.monotonic() < deadline:
            try:
                frame = await asyncio.wait_for(ws.recv(), 0.2)
            except TimeoutError:
                frame = None
            if isinstance(frame, str):
                msg = json.loads(frame)
                if msg["op"] == "serverInfo":
                    got.info = msg
                elif msg["op"] == "advertise":
                    for ch in msg["channels"]:
                        got.channels[ch["topic"]] = ch
                    wanted = [ch for ch in msg["channels"] if topics is None or ch["topic"] in topics]
                    subs = []
                    for ch in wanted:
                        subscribed[next_id] = ch["topic"]
                        subs.append({"id": next_id, "channelId": ch["id"]})
                        next_id += 1
                    if subs:
                        await ws.send(json.dumps({"op": "subscribe", "subscriptions": subs}))
                        sub_deadline = time.monotonic() + settle_s  # play once the server has had them a while
            elif isinstance(frame, bytes):
                if frame[0] == 1:
                    sub_id, log_time = struct.unpack_from("<IQ", frame, 1)
                    got.messages.setdefault(subscribed[sub_id], []).append((log_time, frame[13:]))
                elif frame[0] == 5:
                    status, current = struct.unpack_from("<BQ", frame, 1)
                    got.playback_states.append((status, current))
            if not played and time.monotonic() >= sub_deadline:
                speed, seek = play  # type: ignore[misc]
                req = b"p1"
                await ws.send(bytes([3, 0]) + struct.pack("<fBQI", speed, seek is not None, seek or 0, len(req)) + req)
                played = True
            if played and not drained and until(got):
                drained = True
                deadline = min(deadline, time.monotonic() + drain_s)
    return got


def run(url: str, topics: list[str] | None, until: Any, **kwargs: Any) -> Received:
    return asyncio.run(session(url, topics, until, **kwargs))


def cdr_string(payload: bytes) -> str:
    (n,) = struct.unpack_from("<I", payload, 4)
    return payload[8:8 + n - 1].decode()


def protobuf_class(channel: dict[str, Any]) -> Any:
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    assert channel["encoding"] == "protobuf" and channel["schemaEncoding"] == "protobuf"
    files = descriptor_pb2.FileDescriptorSet.FromString(base64.b64decode(channel["schema"]))
    pool = descriptor_pool.DescriptorPool()
    for f in files.file:
        pool.Add(f)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(channel["schemaName"]))


@dataclass(frozen=True)
class Edge:
    parent: str
    stamp_ns: int
    matrix: np.ndarray


def quaternion_matrix(x: float, y: float, z: float, w: float) -> np.ndarray:
    return np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
                     [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
                     [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)]])


def transforms(got: Received, topic: str = "/tf") -> list[dict[str, Any]]:
    """Every FrameTransform received, decoded: parent, child, stamp_ns, matrix (4×4)."""
    cls = protobuf_class(got.channels[topic])
    out = []
    for _log_time, payload in got.messages.get(topic, []):
        for t in cls.FromString(payload).transforms:
            m = np.eye(4)
            m[:3, :3] = quaternion_matrix(t.rotation.x, t.rotation.y, t.rotation.z, t.rotation.w)
            m[:3, 3] = (t.translation.x, t.translation.y, t.translation.z)
            out.append({"parent": t.parent_frame_id, "child": t.child_frame_id,
                        "stamp_ns": t.timestamp.seconds * 10**9 + t.timestamp.nanos, "matrix": m})
    return out


def world_pose(edges: list[dict[str, Any]], frame: str, root: str = "world") -> np.ndarray:
    """`frame`'s pose in `root`, from the latest transform of each child frame."""
    latest: dict[str, dict[str, Any]] = {}
    for e in edges:
        if e["child"] not in latest or e["stamp_ns"] >= latest[e["child"]]["stamp_ns"]:
            latest[e["child"]] = e
    pose = np.eye(4)
    while frame != root:
        edge = latest[frame]
        pose = edge["matrix"] @ pose
        frame = edge["parent"]
    return pose
