"""Both arms in one 3D scene, for Foxglove's 3D panel: the URDF and the frame transforms.

One TF tree holds both arms: every link is prefixed with its arm (`leader/base_link`,
`follower/tool_link`; with a rig namespace `rig_a/leader/base_link`), and each arm's base sits
beside the other under one `world` frame (leader at +y, follower at −y: left and right of an
observer looking along +x). The transforms come from the joint states through
`core.kinematics` (the shipped `urdf/so101.urdf`), so the 3D view and the forward kinematics
cannot disagree; `launch_description` gives a real ROS install's `robot_state_publisher` the same
URDF, prefixes and base poses.

`ArmScene` is the Foxglove side, shared by `replay --foxglove` (`playback.py`) and the live view
(`view.py`), which serve a rig namespace-free — its frames too (`leader/…`), so the shipped
layout's URDF layers fit every rig; a ROS install's TF tree keeps the namespace in the prefix
(`rig_a/leader/…`: `launch_description`), since rigs share it. It has a `/robot_description` channel
(`std_msgs/msg/String`, CDR — the topic type Foxglove's URDF layer reads; re-sent when a client subscribes and every
few seconds, as a latched ROS topic would be) and a `/tf` channel of `foxglove.FrameTransforms` (protobuf, the SDK's own
schema). The layout's 3D panel has one URDF layer per arm on that topic with the arm's frame
prefix.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any

from teleop_flywheel.core.kinematics import Transform, so101
from teleop_flywheel.core.topics import normalize_namespace
from teleop_flywheel.recording.mcap import cdr, msgdefs

ROLES = ("leader", "follower")
WORLD_FRAME = "world"
DESCRIPTION_TOPIC = "/robot_description"
TF_TOPIC = "/tf"
# Where each arm's base_link sits in the world frame (m): side by side, 0.5 m apart.
BASE_OFFSETS: dict[str, tuple[float, float, float]] = {"leader": (0.0, 0.25, 0.0), "follower": (0.0, -0.25, 0.0)}
RESEND_DESCRIPTION_S = 2.0


def frame_prefix(role: str, namespace: str = "") -> str:
    """`leader/`, or `rig_a/leader/` for a rig under `namespace:=rig_a`."""
    if role not in ROLES:
        raise ValueError(f"unknown arm {role!r}; expected one of {ROLES}")
    ns = normalize_namespace(namespace).strip("/")
    return f"{ns}/{role}/" if ns else f"{role}/"


def base_transform(role: str, namespace: str = "") -> Transform:
    """world → `<prefix>base_link`: where the arm stands."""
    return Transform(
        WORLD_FRAME, frame_prefix(role, namespace) + so101().root, BASE_OFFSETS[role], (0.0, 0.0, 0.0, 1.0)
    )


def arm_transforms(role: str, positions: Mapping[str, float], namespace: str = "") -> list[Transform]:
    """The arm's base placement and every joint's parent→child transform at `positions` (rad)."""
    return [base_transform(role, namespace), *so101().transforms(positions, prefix=frame_prefix(role, namespace))]


def arm_of(topic: str, namespace: str = "") -> str | None:
    """`leader` / `follower` for an arm's joint-state topic (relative, absolute or under the rig
    namespace), else None."""
    ns = normalize_namespace(namespace)
    name = topic[len(ns):] if ns and topic.startswith(ns + "/") else topic
    for role in ROLES:
        if name.lstrip("/") == f"{role}/joint_states":
            return role
    return None


def decode_positions(data: bytes) -> tuple[int, dict[str, float]]:
    """(header stamp ns, {joint: position}) of a sensor_msgs/JointState in CDR."""
    reader = cdr.CdrReader(data)
    stamp = reader.stamp()
    reader.string()  # frame_id
    names = [reader.string() for _ in range(reader.count(4))]
    position, _offset = reader.array("f8", 8)
    if len(position) != len(names):
        raise cdr.CdrError(f"JointState has {len(position)} positions for {len(names)} names")
    return stamp, dict(zip(names, (float(p) for p in position), strict=True))


class ArmScene:
    """The 3D scene's Foxglove channels in `context`; feed it joint states."""

    def __init__(self, context: Any, namespace: str = "", max_rate_hz: float = 50.0) -> None:
        from foxglove import Channel, Schema
        from foxglove.channels import FrameTransformsChannel

        self.namespace = normalize_namespace(namespace)
        string_def = msgdefs.definition("std_msgs/msg/String")
        self.description = Channel(DESCRIPTION_TOPIC, schema=Schema(name=string_def.type_name, encoding="ros2msg",
                                                                    data=string_def.text.encode()),
                                   message_encoding="cdr", context=context)
        self.tf = FrameTransformsChannel(TF_TOPIC, context=context)
        self._urdf = cdr.string_cdr(so101().text)
        self._min_step_ns = int(1e9 / max_rate_hz) if max_rate_hz > 0 else 0
        self._last: dict[str, int] = {}
        self._lock = threading.Lock()
        self._sent_description = 0.0
        self.transforms_sent = 0

    @property
    def topics(self) -> tuple[str, str]:
        return DESCRIPTION_TOPIC, TF_TOPIC

    def send_description(self, log_time: int | None = None) -> None:
        """The URDF to every subscriber (call when a client subscribes: the channel is not latched)."""
        with self._lock:
            self.description.log(self._urdf, log_time=log_time if log_time is not None else time.time_ns())
            self._sent_description = time.monotonic()

    def keep_description(self, log_time: int | None = None) -> None:
        """Re-send the URDF if it has not gone out for a while (late joiners, seeks)."""
        if time.monotonic() - self._sent_description >= RESEND_DESCRIPTION_S:
            self.send_description(log_time)

    def on_joint_state(self, role: str, data: bytes, receive_ns: int) -> bool:
        """Log the arm's transforms for one JointState (at most `max_rate_hz` per arm); True if sent."""
        from foxglove.messages import FrameTransform, FrameTransforms, Quaternion, Timestamp, Vector3

        stamp, positions = decode_positions(data)  # the header stamp, ROS time
        with self._lock:
            last = self._last.get(role)
            if last is not None and 0 <= stamp - last < self._min_step_ns:
                return False
            self._last[role] = stamp
        when = Timestamp(sec=stamp // 1_000_000_000, nsec=stamp % 1_000_000_000)
        message = FrameTransforms(transforms=[
            FrameTransform(timestamp=when, parent_frame_id=t.parent, child_frame_id=t.child,
                           translation=Vector3(x=t.translation[0], y=t.translation[1], z=t.translation[2]),
                           rotation=Quaternion(x=t.rotation[0], y=t.rotation[1], z=t.rotation[2], w=t.rotation[3]))
            for t in arm_transforms(role, positions, self.namespace)])
        self.tf.log(message, log_time=receive_ns)
        self.transforms_sent += 1
        return True

    def close(self) -> None:
        self.description.close()
        self.tf.close()
