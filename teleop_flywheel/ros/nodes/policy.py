"""`policy` node: runs a policy on the follower's state and publishes `/policy/joint_command`.

`header.frame_id` of every command is the checkpoint id, so the recorder stores which model
produced each episode. Parameters:

* `policy`: `scripted` | `replay` | a `teleop_flywheel.policies` plugin (`lerobot` ships with the
  package; it needs the `lerobot` extra installed).
* `policy_args` (`TARGET[,key=value...]`): scripted — a waypoint YAML file or empty; replay — a bag
  directory, or `DATASET_DIR#EPISODE_INDEX[,calibration=FILE]` (an episode of a LeRobot v3.0
  dataset); lerobot — `CHECKPOINT_DIR[,calibration=FILE][,device=cpu][,fps=30][,task=TEXT]`
  (see `policies/lerobot_checkpoint.py`).
* `checkpoint_id`: the tag; empty (default) = the policy's own: scripted `scripted-v0`, replay
  `replay:<episode id>`, lerobot `lerobot:<checkpoint dir name>:<hash of its config and weights>`.
* `rate_hz`: command rate.

A policy that needs images names its cameras (`Policy.cameras`); the node subscribes to
`/cameras/<name>/image/compressed` for each, decodes the latest JPEG to RGB at the tick that uses
it, and publishes nothing until every camera has delivered a frame (warning which one is missing).
"""
from __future__ import annotations

import threading

import cv2
import numpy as np
from rcl_interfaces.msg import ParameterDescriptor
from rclpy.node import Node
from sensor_msgs.msg import CompressedImage, JointState

from teleop_flywheel.core.clock import now_ns
from teleop_flywheel.core.so101 import JOINT_NAMES
from teleop_flywheel.core.topics import FOLLOWER_STATE, POLICY_COMMAND, camera_image
from teleop_flywheel.policies.base import load_policy
from teleop_flywheel.ros.nodes.common import CONTROL_QOS, IMAGE_QOS, STREAM_QOS, joint_state, spin_node


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
    def __init__(self, node_name: str = "policy", **kwargs: object) -> None:
        super().__init__(node_name, **kwargs)

        def param(name: str, default: object, text: str) -> object:
            return self.declare_parameter(name, default, ParameterDescriptor(description=text)).value

        name = str(param("policy", "scripted", "scripted | replay | plugin name (e.g. lerobot)"))
        args = str(param("policy_args", "", "TARGET[,key=value...]: waypoint file, bag, DATASET#EPISODE, "
                                            "checkpoint dir"))
        checkpoint = str(param("checkpoint_id", "", "checkpoint id tagged on every command "
                                                               "(empty: the policy's default)"))
        rate = float(param("rate_hz", 50.0, "command rate"))
        self.policy = load_policy(name, args, checkpoint)
        self._state: list[float] | None = None
        self._lock = threading.Lock()
        self._images = {cam: LatestImage() for cam in self.policy.cameras}
        self._pub = self.create_publisher(JointState, POLICY_COMMAND, STREAM_QOS)
        self.create_subscription(JointState, FOLLOWER_STATE, self._on_state, CONTROL_QOS)
        for cam, latest in self._images.items():
            self.create_subscription(CompressedImage, camera_image(cam), latest.put, IMAGE_QOS)
        self.create_timer(1.0 / rate, self._tick)

    def _on_state(self, msg: JointState) -> None:
        by_name = dict(zip(msg.name, msg.position))
        if all(n in by_name for n in JOINT_NAMES):
            with self._lock:
                self._state = [float(by_name[n]) for n in JOINT_NAMES]

    def _tick(self) -> None:
        t = now_ns()
        images = {cam: rgb for cam, latest in self._images.items() if (rgb := latest.get()) is not None}
        missing = [camera_image(cam) for cam in self._images if cam not in images]
        if missing:
            self.get_logger().warning(f"no image yet on {', '.join(missing)}; not commanding",
                                      throttle_duration_sec=5.0)
            return
        with self._lock:
            command = self.policy.act(self._state, t, images)
        if command is not None:
            self._pub.publish(joint_state(JOINT_NAMES, command, t, frame_id=self.policy.checkpoint_id))

    def restart(self) -> None:
        """Start the policy's episode over from the current state (between episodes)."""
        with self._lock:
            self.policy.reset(self._state, now_ns())


def main() -> int:
    return spin_node(PolicyNode)
