"""`policy` node: runs a policy on the follower's state and publishes `/policy/joint_command`.

`header.frame_id` of every command is the checkpoint id, so the recorder stores which model
produced each episode. Parameters: `policy` (scripted | replay | a `teleop_flywheel.policies`
plugin), `policy_args` (a file for scripted, a bag for replay, a checkpoint for plugins),
`checkpoint_id`, `rate_hz`.
"""
from __future__ import annotations

import threading

from rcl_interfaces.msg import ParameterDescriptor
from rclpy.node import Node
from sensor_msgs.msg import JointState

from teleop_flywheel.clock import now_ns
from teleop_flywheel.nodes.common import STREAM_QOS, joint_state, spin_node
from teleop_flywheel.policies.base import load_policy
from teleop_flywheel.so101 import JOINT_NAMES


class PolicyNode(Node):
    def __init__(self, node_name: str = "policy", **kwargs: object) -> None:
        super().__init__(node_name, **kwargs)

        def param(name: str, default: object, text: str) -> object:
            return self.declare_parameter(name, default, ParameterDescriptor(description=text)).value

        name = str(param("policy", "scripted", "scripted | replay | plugin name"))
        args = str(param("policy_args", "", "policy arguments (file, bag, checkpoint dir)"))
        checkpoint = str(param("checkpoint_id", "scripted-v0", "checkpoint id tagged on every command"))
        rate = float(param("rate_hz", 50.0, "command rate"))
        self.policy = load_policy(name, args, checkpoint)
        self._state: list[float] | None = None
        self._lock = threading.Lock()
        self._pub = self.create_publisher(JointState, "/policy/joint_command", STREAM_QOS)
        self.create_subscription(JointState, "/follower/joint_states", self._on_state, STREAM_QOS)
        self.create_timer(1.0 / rate, self._tick)

    def _on_state(self, msg: JointState) -> None:
        by_name = dict(zip(msg.name, msg.position))
        if all(n in by_name for n in JOINT_NAMES):
            with self._lock:
                self._state = [float(by_name[n]) for n in JOINT_NAMES]

    def _tick(self) -> None:
        t = now_ns()
        with self._lock:
            command = self.policy.act(self._state, t)
        if command is not None:
            self._pub.publish(joint_state(JOINT_NAMES, command, t, frame_id=self.policy.checkpoint_id))

    def restart(self) -> None:
        """Start the policy's episode over from the current state (between episodes)."""
        with self._lock:
            self.policy.reset(self._state, now_ns())


def main() -> int:
    return spin_node(PolicyNode)
