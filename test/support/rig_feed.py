"""Stand-ins for a namespaced rig's arms, policy and pedal in session tests, and its recorder's services.

Session tests that run two rigs on a 2-core machine start only some nodes of each rig's graph
(teleop, recorder, …); a `FeedRig` publishes what the others would — leader, follower and policy
joint states, the leader's rendered feedback (none: feedback off), pedal edges — under relative
names from a node in the rig's namespace, and calls the rig's recorder through its relative
service names. `feed(rigs, stop)` publishes every rig's arms at 100 Hz until `stop` is set.
Imports ROS: import it after `pytest.importorskip("rclpy")`.
"""
from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterable
from typing import Any

import rclpy
from rcl_interfaces.srv import SetParameters
from sensor_msgs.msg import JointState, Joy
from std_srvs.srv import Trigger

from support.procs import wait_for
from teleop_flywheel.core import topics
from teleop_flywheel.core.clock import now_ns
from teleop_flywheel.core.so101 import JOINT_NAMES
from teleop_flywheel.ros.nodes.common import STREAM_QOS, joint_state, stamp
from teleop_flywheel.ros.nodes.recorder_client import named_values, refusals


class FeedRig:
    """One rig's stand-ins (see the module doc); `amplitude` (rad) tells the rigs' motions apart,
    `checkpoint` is the policy commands' frame_id."""

    def __init__(self, session: Any, namespace: str, amplitude: float = 0.2, checkpoint: str = "") -> None:
        self.amplitude, self.checkpoint = amplitude, checkpoint
        self.node = rclpy.create_node("feed", namespace=namespace, context=session.context)
        self.pubs = [self.node.create_publisher(JointState, name, STREAM_QOS)
                     for name in (topics.LEADER_STATE, topics.FOLLOWER_STATE, topics.POLICY_COMMAND)]
        self.feedback = self.node.create_publisher(JointState, topics.LEADER_FEEDBACK, STREAM_QOS)
        self.pedal = self.node.create_publisher(Joy, topics.PEDAL_JOY, STREAM_QOS)
        session.add_node(self.node)

    def publish(self, t_s: float) -> None:
        """The arms and the policy at `t_s` on a 0.5 Hz sine: a moving arm, no dead air."""
        value = self.amplitude * math.sin(math.pi * t_s)
        for pub in self.pubs:
            pub.publish(joint_state(JOINT_NAMES, [value] * 6, now_ns(), frame_id=self.checkpoint))
        self.feedback.publish(joint_state(JOINT_NAMES, [0.0] * 6, now_ns(), efforts=[0.0] * 6))  # as a leader

    def press(self, down: bool) -> None:
        """A pedal edge (buttons[0]), stamped now."""
        msg = Joy(buttons=[int(down)] + [0] * 5)
        stamp(msg.header.stamp, now_ns())
        self.pedal.publish(msg)

    def call(self, service: str) -> str:
        """`recorder/<service>` (std_srvs/Trigger) of this rig; its message (AssertionError if it failed)."""
        client = self.node.create_client(Trigger, f"recorder/{service}")  # relative: this rig's recorder
        assert client.wait_for_service(timeout_sec=60), f"{self.node.get_namespace()}/recorder/{service}"
        future = client.call_async(Trigger.Request())
        result = wait_for(lambda: future.done() and future.result(), 60, f"recorder/{service}")
        assert result.success, result.message
        return str(result.message)

    def set_outcome(self, outcome: str = "success") -> None:
        """Label the episode being recorded through `recorder/label_episode`."""
        client = self.node.create_client(SetParameters, "recorder/label_episode")  # relative: this rig's
        assert client.wait_for_service(timeout_sec=60), f"{self.node.get_namespace()}/recorder/label_episode"
        future = client.call_async(named_values(outcome=outcome))
        assert not refusals(wait_for(lambda: future.done() and future.result(), 60, "set outcome"))


def feed(rigs: Iterable[FeedRig], stop: threading.Event) -> threading.Thread:
    """Publish every rig's arms at 100 Hz from a thread of its own until `stop` is set."""
    everyone, t0 = list(rigs), time.monotonic()

    def run() -> None:
        while not stop.is_set():
            for rig in everyone:
                rig.publish(time.monotonic() - t0)
            stop.wait(0.01)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread
