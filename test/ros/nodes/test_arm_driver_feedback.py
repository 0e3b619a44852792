"""arm_driver's force feedback through ROS: a leader node, a simulated leader held by the modelled
hand, the real teleop node (whose authority the feedback answers to), and the follower's joint
states and the pedal node's messages published by a real rclpy node."""
from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from itertools import pairwise
from pathlib import Path

import pytest
from rclpy.context import Context
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.parameter import Parameter
from sensor_msgs.msg import JointState, Joy
from support.procs import wait_for

from ros.nodes.test_arm_driver_node import Graph
from teleop_flywheel.core.calibration import load_calibration, sim_calibration_file
from teleop_flywheel.core.clock import now_ns
from teleop_flywheel.core.so101 import JOINT_NAMES
from teleop_flywheel.hw.feetech.sim import Hand, SimulatedArm
from teleop_flywheel.ros.nodes.arm_driver import ArmDriverNode
from teleop_flywheel.ros.nodes.common import STREAM_QOS, joint_state, msg_stamp_ns, stamp
from teleop_flywheel.ros.nodes.teleop import TeleopNode

pytestmark = pytest.mark.timeout(120)
SQUEEZED = [2050.0, 2050.0, 1975.0, 2025.0, 2050.0, 2050.0]  # leader shaft steps: the body still, the trigger shut


def teleop(graph: Graph) -> TeleopNode:
    """The real teleop node, in teleop mode; its leader commands go nowhere, so that in policy mode
    the leader is not driven (what is seen is the feedback's own answer to the mode)."""
    node = TeleopNode("teleop", context=graph.context, cli_args=["--ros-args", "-r",
                                                                   "leader/joint_command:=unused_leader_command"])
    graph.add(node)
    return node


@contextmanager
def leader_rig(tmp_path: Path, feedback: str = "gripper") -> Iterator[tuple[Graph, SimulatedArm, ArmDriverNode]]:
    """A leader driver node on a simulated leader the modelled hand holds, the trigger squeezed."""
    graph = Graph()
    try:
        with SimulatedArm("leader", link=tmp_path / "leader", hand=Hand()) as arm:
            arm.set_human(lambda t: SQUEEZED)
            yield graph, arm, graph.driver("leader", arm, feedback=feedback)
    finally:
        graph.close()


class Follower:
    """The follower's joint states as its driver publishes them: the jaws stopped on an object."""

    def __init__(self, graph: Graph) -> None:
        self.node = graph.add(Node("follower_probe", context=graph.context))
        self.pub = self.node.create_publisher(JointState, "/follower/joint_states", STREAM_QOS)
        cal = load_calibration(sim_calibration_file("leader"))["gripper"]
        self.stopped = float(cal.raw_to_rad(2400 - cal.homing_offset))  # the jaws stopped on an object there

    def grasping(self, load: float = -0.16) -> None:
        self.pub.publish(joint_state(JOINT_NAMES, [0.0] * 5 + [self.stopped], now_ns(), velocities=[0.0] * 6,
                                     efforts=[0.0] * 5 + [load]))


def test_a_leader_feels_the_followers_grasp_and_lets_go_when_its_states_stop(tmp_path: Path) -> None:
    with leader_rig(tmp_path) as (graph, arm, _node):
        teleop(graph)
        grasping = Follower(graph).grasping
        grip = arm.servos[6]
        wait_for(lambda: (grasping(-0.16), grip.torque_on)[1], 30, "the leader's trigger torqued")
        wait_for(lambda: (grasping(-0.16), abs(arm.hand_forces()[5]) > 0.1)[1], 10, "the hand feels the grasp")
        assert grip.get("Torque_Limit") == 150
        assert not any(s.torque_on for sid, s in arm.servos.items() if sid != 6), "only the trigger"
        wait_for(lambda: not grip.torque_on, 10, "released once the follower's states stop")


class FeedbackProbe(Node):
    """Records the leader's `/leader/feedback` and `/leader/joint_states` as they arrive."""

    def __init__(self, context: Context) -> None:
        super().__init__("feedback_probe", context=context)
        self.feedback: list[tuple[int, JointState]] = []
        self.states: list[JointState] = []
        self.create_subscription(JointState, "/leader/feedback", lambda m: self.feedback.append((now_ns(), m)),
                                 STREAM_QOS)
        self.create_subscription(JointState, "/leader/joint_states", self.states.append, STREAM_QOS)


def test_every_leader_tick_says_what_it_rendered_on_leader_feedback(tmp_path: Path) -> None:
    """`/leader/feedback` (docs/teleop.md): one message per leader tick, all zeros while nothing is
    rendered, stamped at the source between the tick's read and its arrival; with `gripper`
    rendering a grasp, the trigger's goal offset and ceiling (0.15)."""
    with leader_rig(tmp_path) as (graph, arm, _node):
        teleop(graph)
        probe = graph.add(FeedbackProbe(graph.context))
        wait_for(lambda: len(probe.feedback) > 50, 30, "leader feedback")
        _, first = probe.feedback[-1]
        assert list(first.name) == list(JOINT_NAMES) and not first.velocity
        assert list(first.position) == [0.0] * 6 and list(first.effort) == [0.0] * 6, "no grasp: nothing"
        # One per tick: each feedback message follows the joint states of its tick, stamped after them.
        states = {msg_stamp_ns(m) for m in list(probe.states)}
        pairs = [(received, msg_stamp_ns(m)) for received, m in list(probe.feedback)]
        assert all(b > a for (_, a), (_, b) in pairwise(pairs)), "one per tick, in order"
        assert all(stamp <= received for received, stamp in pairs), "stamped before it arrived"
        ticks = sorted(states)
        for _, stamp in pairs[5:-5]:
            before = [s for s in ticks if s <= stamp]
            assert before and stamp - before[-1] < 0.5 * 1e9, "the feedback of a tick follows its reading"
        assert abs(len(probe.feedback) - len(probe.states)) <= 3, "once per tick, like the joint states"

        follower = Follower(graph)
        stopped = follower.stopped

        def grasping() -> bool:
            follower.grasping()
            return bool(probe.feedback) and probe.feedback[-1][1].effort[5] > 0

        wait_for(grasping, 30, "a grasp rendered on the trigger")
        wait_for(lambda: (grasping(), arm.servos[6].position < 2400 - 5)[1], 10, "the hand squeezing past it")
        grasping()
        _, msg = probe.feedback[-1]
        assert list(msg.effort) == [0.0] * 5 + [0.15], "the trigger alone, at its ceiling"
        assert list(msg.position[:5]) == [0.0] * 5
        present = dict(zip(probe.states[-1].name, probe.states[-1].position, strict=True))["gripper"]
        assert msg.position[5] == pytest.approx(stopped - present, abs=0.05), "goal minus present"
        assert msg.position[5] > 0.01, "the hand is past the object: the goal pushes it back open"
        wait_for(lambda: probe.feedback[-1][1].effort[5] == 0.0, 10, "zero once the follower is quiet")


def test_the_feedback_answers_to_the_teleop_nodes_authority_and_the_pedal(tmp_path: Path) -> None:
    """The grasp is rendered only while the real teleop node says the human alone drives: not before
    it is heard, not in policy mode, not while the pedal node says its device is lost, not while
    the teleop node holds for a pedal gone silent, and not once the teleop node is gone."""
    with leader_rig(tmp_path) as (graph, arm, leader):
        follower = Follower(graph)
        pedal = follower.node.create_publisher(Joy, "/pedal/joy", STREAM_QOS)
        grip = arm.servos[6]

        def say(buttons: list[int], frame: str = "pedal_heartbeat") -> None:
            msg = Joy()
            stamp(msg.header.stamp, now_ns())
            msg.header.frame_id, msg.buttons = frame, buttons
            pedal.publish(msg)

        def torqued(beat: bool = True) -> bool:
            follower.grasping()
            if beat:
                say([0])
            return grip.torque_on

        def released(beat: bool = True) -> bool:
            return not torqued(beat)

        for _ in range(100):  # a grasp felt, no teleop node: nothing rendered
            assert released()
            time.sleep(0.01)
        assert "authority not heard" in leader.arm.health().values["feedback_gated"]
        node = teleop(graph)
        wait_for(torqued, 30, "rendered once the teleop node says the human drives")
        say([], frame="pedal")  # the pedal node lost its device
        wait_for(lambda: released(beat=False), 10, "released: the pedal is lost")
        wait_for(torqued, 10, "rendered again: the pedal is back")
        node.set_parameters([Parameter("mode", value="policy")])
        wait_for(released, 10, "released in policy mode")
        assert "policy mode" in leader.arm.health().values["feedback_gated"]
        node.set_parameters([Parameter("mode", value="teleop")])
        wait_for(torqued, 10, "rendered again in teleop mode")
        wait_for(lambda: released(beat=False), 10, "released: the pedal went silent, the teleop node holds")
        assert "teleop node holds" in leader.arm.health().values["feedback_gated"]
        wait_for(torqued, 10, "rendered again: the pedal heard again")
        graph.nodes.remove(node)
        graph.spinner.remove(node)
        node.destroy_node()
        wait_for(released, 10, "released: the teleop node is gone")
        assert "stale" in leader.arm.health().values["feedback_gated"]


def test_a_leader_without_feedback_says_so_every_tick(tmp_path: Path) -> None:
    """`feedback: off` publishes `leader/feedback` too: nothing rendered is on the record."""
    with leader_rig(tmp_path, feedback="off") as (graph, _arm, _node):
        probe = graph.add(FeedbackProbe(graph.context))
        wait_for(lambda: len(probe.feedback) > 20, 30, "leader feedback with feedback off")
        assert all(list(m.position) == [0.0] * 6 and list(m.effort) == [0.0] * 6 for _t, m in list(probe.feedback))


def test_what_a_leader_feels_never_wakes_its_executor(tmp_path: Path) -> None:
    """The follower's 200 Hz states (and the authority, the pedal) are taken by the bus thread right
    before each tick, never delivered by the executor: each delivery cost the leader ~0.6 ms of
    CPU (bench/rig_cpu.py --part feedback). While a grasp streams in and is felt, the leader node's
    own executor runs its 1 Hz diagnostics and nothing else."""
    graph = Graph()
    try:
        with SimulatedArm("leader", link=tmp_path / "leader", hand=Hand()) as arm:
            arm.set_human(lambda t: SQUEEZED)
            overrides = [Parameter("port", value=str(arm.link)), Parameter("role", value="leader"),
                         Parameter("calibration_file", value=str(sim_calibration_file("leader"))),
                         Parameter("simulated", value=True), Parameter("feedback", value="gripper")]
            leader = ArmDriverNode("leader_driver", context=graph.context, parameter_overrides=overrides)
            graph.nodes.append(leader)  # closed with the graph, spun below by an executor of its own
            executor = SingleThreadedExecutor(context=graph.context)
            executor.add_node(leader)
            teleop(graph)
            follower = Follower(graph)
            stop = threading.Event()
            sent = [0]

            def stream() -> None:  # the follower's driver: a grasp, every 5 ms
                while not stop.wait(0.005):
                    follower.grasping()
                    sent[0] += 1

            streamer = threading.Thread(target=stream, daemon=True)
            streamer.start()
            try:
                wait_for(lambda: (executor.spin_once(timeout_sec=0.01), arm.servos[6].torque_on)[1], 30,
                         "the grasp felt")
                woke, start, felt = 0, time.monotonic(), []
                while time.monotonic() - start < 1.0:
                    executor.spin_once(timeout_sec=2.0)  # returns once it ran something
                    woke += 1
                    felt.append(arm.servos[6].torque_on)
            finally:
                stop.set()
                streamer.join()
                executor.remove_node(leader)
                executor.shutdown()
            assert sent[0] > 100, "the follower streamed"
            assert all(felt), "the grasp stayed felt"
            assert woke <= 3, f"the executor ran {woke} callbacks in a second"
    finally:
        graph.close()
