"""`policy` node: runs a policy on the follower's state and publishes `/policy/joint_command`.

`header.frame_id` of every command is the checkpoint id, so the recorder stores which model
produced each episode; `header.stamp` is the tick, taken on CLOCK_MONOTONIC (the time the policy
sees) and converted to ROS time (`common.stamp`) — except for a late action (below).

Every tick that acts also publishes `/policy/inference` (JointState with named numeric fields
`inference_ms`, `period_ms`, `late`, `frame_id` the checkpoint id; recorded with every episode):
how long the policy took to produce that command, the node's period, and whether it took longer.
It is stamped when the action became available, the instant the figure is known (its tick is the
stamp less `inference_ms`): stamped at the tick, a 40 ms inference would arrive 40 ms "late" and
read as a clock offset to the validator, which bounds every stream's receive-minus-stamp latency.
A late action (inference longer than the period) holds, then plays: until it arrives the rig holds
the last command (nothing newer exists; the teleop node holds a policy command older than its
`stale_ms`); it is published stamped at the instant it became available, not at its tick, and the
timer's overdue tick that follows at once is skipped, so it is in effect for about a period like
any other. The policy's actions play in order, later — never the late one skipped as stale (or
overwritten at once by the next) for a jump to the next.
Parameters:

* `policy`: `scripted` | `replay` | a `teleop_flywheel.policies` plugin (`lerobot` ships with the
  package; it needs the `lerobot` extra installed).
* `policy_args` (`TARGET[,key=value...]`): scripted — a waypoint YAML file or empty; replay — a bag
  directory, or `DATASET_DIR#EPISODE_INDEX[,calibration=FILE]` (an episode of a LeRobot v3.0
  dataset); lerobot — `CHECKPOINT_DIR[,calibration=FILE][,device=cpu][,fps=30][,task=TEXT]`
  (see `policies/lerobot_checkpoint.py`).
* `checkpoint_id`: the tag; empty (default) = the policy's own: scripted `scripted-v0`, replay
  `replay:<episode id>`, lerobot `lerobot:<checkpoint dir name>:<hash of its config and weights>`.
* `rate_hz`: command rate (read-only).

`policy`, `policy_args` and `checkpoint_id` change at run time: the node loads the new policy
(set them together with `/policy/set_parameters_atomically`, or one at a time when each step
loads); one that cannot be loaded is refused with the reason and the running policy stays. Swapping
back to one of the two policies it ran last (the same three values) reuses it, loaded already: an
unattended evaluation interleaving two checkpoints with start-pose moves loads each once (a LeRobot
checkpoint's load and first inference take seconds of CPU, which a loaded simulator host cannot
spare; the price is up to three policies in memory). A swapped-in policy commands nothing until
`~/reset` starts its episode: between a start-pose move and a trial the arm holds where the move
left it (the teleop node holds the last command), so the trial's bag, started before that reset,
begins at the start pose and holds only the new checkpoint's commands.
`~/reset` (std_srvs/Trigger) starts the running policy's episode over from the current state
(between episodes or evaluation trials). When the blend weight α on `/teleop/authority` returns
to 0 after a human takeover, the node calls `Policy.drop_plan()`: a plan made before the human
moved the arm (LeRobot's action-chunk queue) never resumes.

The scripted policy drives the follower to hard-coded waypoints: it runs only when the session
says the follower is a simulator (`simulated: true`, which `sim` sessions pass) or when asked for
on purpose (`scripted_on_real: true`); otherwise the node refuses to start and says so. A policy in
LeRobot units (`lerobot`, `replay` of a dataset) converts them through the follower's calibration:
on a follower not marked simulated it must be named (`calibration=FILE` in `policy_args`) and a
simulator's is refused — one line saying what to pass — as the arm driver refuses a simulator's
calibration on a real port; a simulated one falls back to the simulator's.

A policy that needs images names its cameras (`Policy.cameras`); the node subscribes to
`/cameras/<name>/image/compressed` for each, decodes the latest JPEG to RGB at the tick that uses
it, and publishes nothing until every camera has delivered a frame (warning which one is missing).
"""
from __future__ import annotations

import sys
import threading
from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np
from rclpy.node import Node
from rclpy.subscription import Subscription
from sensor_msgs.msg import CompressedImage, JointState
from std_srvs.srv import Trigger

from teleop_flywheel.core.clock import now_ns
from teleop_flywheel.core.so101 import JOINT_NAMES
from teleop_flywheel.core.topics import AUTHORITY, FOLLOWER_STATE, POLICY_COMMAND, POLICY_INFERENCE, camera_image
from teleop_flywheel.policies import load_policy
from teleop_flywheel.policies.base import Policy
from teleop_flywheel.ros.errors import PolicyLoadError
from teleop_flywheel.ros.nodes.common import CONTROL_QOS, IMAGE_QOS, STREAM_QOS, joint_state, spin_node
from teleop_flywheel.ros.params import Invalid, NodeParameters, NodeParams, spec

RESET_SERVICE = "~/reset"
INFERENCE_FIELDS = ("inference_ms", "period_ms", "late")
RECENT_POLICIES = 2  # swapped-away policies kept loaded: two checkpoints interleaved with a start-pose move


@dataclass
class PolicyParams(NodeParams):
    policy: str = spec("scripted", "scripted | replay | plugin name (e.g. lerobot); changeable at run time",
                       required=True, read_only=False)
    policy_args: str = spec("", "TARGET[,key=value...]: waypoint file, bag, DATASET#EPISODE, checkpoint dir; "
                            "changeable at run time", read_only=False)
    checkpoint_id: str = spec("", "checkpoint id tagged on every command (empty: the policy's own); "
                              "changeable at run time", read_only=False)
    rate_hz: float = spec(50.0, "command rate (Hz)", range=(0.1, 1000.0))
    simulated: bool = spec(False, "the follower is a simulator this session started")
    scripted_on_real: bool = spec(False, "let the scripted policy (hard-coded waypoints) drive a real follower")

    def check(self) -> None:
        if self.policy == "scripted" and not (self.simulated or self.scripted_on_real):
            raise Invalid(
                "policy",
                "'scripted' drives the follower to hard-coded waypoints and the follower is "
                "not a simulator: choose your policy (policy:=lerobot policy_args:=CHECKPOINT_DIR), "
                "or set scripted_on_real:=true if you mean it",
            )


def _load(p: PolicyParams) -> Policy:
    """The policy `p` names; PolicyLoadError with the reason (any failure of a plugin included)."""
    try:
        return load_policy(p.policy, p.policy_args, p.checkpoint_id, simulated=p.simulated)
    except Exception as exc:  # noqa: BLE001 - a plugin may fail in any way; the reason is what matters
        raise PolicyLoadError(f"cannot load policy {p.policy!r} with policy_args {p.policy_args!r}: {exc}") from exc


def _key(p: PolicyParams) -> tuple[str, str, str]:
    return p.policy, p.policy_args, p.checkpoint_id


class LatestImage:
    """The newest JPEG of one camera topic, decoded to RGB only when a tick asks for it."""

    def __init__(self) -> None:
        self._jpeg: bytes | None = None
        self._rgb: np.ndarray | None = None

    def put(self, msg: CompressedImage) -> None:
        self._jpeg = bytes(msg.data)

    def get(self) -> np.ndarray | None:
        jpeg, self._jpeg = self._jpeg, None
        if jpeg is not None:
            bgr = cv2.imdecode(np.frombuffer(jpeg, np.uint8), cv2.IMREAD_COLOR)
            if bgr is not None:  # an undecodable frame keeps the previous one
                self._rgb = cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
        return self._rgb


class PolicyNode(Node):
    def __init__(self, node_name: str = "policy", **kwargs: Any) -> None:
        super().__init__(node_name, **kwargs)
        self._lock = threading.Lock()
        self.params = NodeParameters(self, PolicyParams, self._on_params)
        try:
            self.policy = _load(self.params.values)
        except PolicyLoadError as exc:
            raise PolicyLoadError(f"{self.get_fully_qualified_name()}: {exc}") from exc.__cause__
        self._recent: dict[tuple[str, str, str], Policy] = {}  # swapped away from lately, oldest first
        self._state: list[float] | None = None
        self._images: dict[str, LatestImage] = {}
        self._image_subs: dict[str, Subscription] = {}
        self._pub = self.create_publisher(JointState, POLICY_COMMAND, STREAM_QOS)
        self._inference_pub = self.create_publisher(JointState, POLICY_INFERENCE, STREAM_QOS)
        self.period_ns = round(1e9 / self.params.values.rate_hz)
        self.late_actions = 0
        self._acted_ns = 0  # when the last command was published
        self._engaged = True  # False from a swap until `~/reset` starts the new policy's episode
        self.create_subscription(JointState, FOLLOWER_STATE, self._on_state, CONTROL_QOS)
        self._alpha = 0.0
        self.plans_dropped = 0
        self.create_subscription(JointState, AUTHORITY, self._on_authority, CONTROL_QOS)
        self._watch_cameras(self.policy.cameras)
        self.create_service(Trigger, RESET_SERVICE, self._srv_reset)
        self.create_timer(1.0 / self.params.values.rate_hz, self._tick)

    def _watch_cameras(self, cameras: tuple[str, ...]) -> None:
        """Subscribe to the cameras the running policy needs, and only to those."""
        for cam in [c for c in self._image_subs if c not in cameras]:
            self.destroy_subscription(self._image_subs.pop(cam))
            del self._images[cam]
        for cam in [c for c in cameras if c not in self._image_subs]:
            self._images[cam] = LatestImage()
            self._image_subs[cam] = self.create_subscription(CompressedImage, camera_image(cam),
                                                             self._images[cam].put, IMAGE_QOS)

    def _on_params(self, old: PolicyParams, new: PolicyParams, names: set[str]) -> str | None:
        """A new policy/checkpoint: loaded before anything changes, so a refusal leaves the running one."""
        if not names & {"policy", "policy_args", "checkpoint_id"}:
            return None
        wanted = _key(new)
        policy = self._recent.get(wanted)  # one it ran lately: loaded already
        if policy is None:
            try:
                policy = _load(new)
            except PolicyLoadError as exc:
                self.get_logger().error(f"refused: {exc}; still running {self.policy.checkpoint_id}")
                return str(exc)
        with self._lock:
            self._recent.pop(wanted, None)
            self._recent[_key(old)] = self.policy
            while len(self._recent) > RECENT_POLICIES:
                self._recent.pop(next(iter(self._recent)))
            self.policy = policy
            self._engaged = False
            self._watch_cameras(policy.cameras)
        self.get_logger().info(f"now running policy {new.policy} ({policy.checkpoint_id})")
        return None

    def _on_state(self, msg: JointState) -> None:
        by_name = dict(zip(msg.name, msg.position, strict=False))
        if all(n in by_name for n in JOINT_NAMES):
            with self._lock:
                self._state = [float(by_name[n]) for n in JOINT_NAMES]

    def _on_authority(self, msg: JointState) -> None:
        """α back at 0 after a takeover: the policy drops any plan made before it."""
        fields = dict(zip(msg.name, msg.position, strict=False))
        alpha = float(fields.get("alpha", 0.0))
        if alpha == 0.0 and self._alpha > 0.0:
            with self._lock:
                self.policy.drop_plan()
                self.plans_dropped += 1
        self._alpha = alpha

    def _tick(self) -> None:
        t = now_ns()
        if t - self._acted_ns < self.period_ns // 2:
            return  # the timer catching up after a late action: that action gets its period first
        with self._lock:
            if not self._engaged:
                return
            policy, images_in = self.policy, dict(self._images)
        images = {cam: rgb for cam, latest in images_in.items() if (rgb := latest.get()) is not None}
        missing = [camera_image(cam) for cam in images_in if cam not in images]
        if missing:
            self.get_logger().warning(f"no image yet on {', '.join(missing)}; not commanding",
                                      throttle_duration_sec=5.0)
            return
        # Published under the lock a swap takes: once a swap returns, no command of the policy it
        # replaced is still to be sent (an evaluation walk starts recording the next checkpoint's
        # trial right after its swap from the start-pose move).
        with self._lock:
            if policy is not self.policy:  # swapped meanwhile: its next tick acts
                return
            command = policy.act(self._state, t, images)
            done = now_ns()
            if command is None:
                return
            late = done - t > self.period_ns
            self.late_actions += late
            self._acted_ns = done
            self._pub.publish(joint_state(JOINT_NAMES, command, done if late else t, frame_id=policy.checkpoint_id))
            self._inference_pub.publish(joint_state(
                INFERENCE_FIELDS, [(done - t) / 1e6, self.period_ns / 1e6, float(late)], done,
                frame_id=policy.checkpoint_id))

    def restart(self) -> str:
        """Start the policy's episode over from the current state (between episodes)."""
        with self._lock:
            self.policy.reset(self._state, now_ns())
            self._engaged = True
            where = "the current state" if self._state is not None else "no follower state yet"
            return f"{self.policy.checkpoint_id} restarted from {where}"

    def _srv_reset(self, _req: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        response.message = self.restart()
        response.success = True
        return response


def main() -> int:
    return spin_node(PolicyNode, name="policy")


if __name__ == "__main__":
    sys.exit(main())
