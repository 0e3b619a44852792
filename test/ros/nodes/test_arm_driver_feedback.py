"""arm_driver's force feedback (`feedback: gripper`) through ROS: a leader node, a simulated leader
held by the modelled hand, and the follower's joint states published by a real rclpy node."""
from __future__ import annotations

from pathlib import Path

import pytest
from rclpy.node import Node
from sensor_msgs.msg import JointState
from support.procs import wait_for

from ros.nodes.test_arm_driver_node import Graph
from teleop_flywheel.core.calibration import load_calibration, sim_calibration_file
from teleop_flywheel.core.clock import now_ns
from teleop_flywheel.core.so101 import JOINT_NAMES
from teleop_flywheel.hw.feetech.sim import Hand, SimulatedArm
from teleop_flywheel.ros.nodes.common import STREAM_QOS, joint_state

pytestmark = pytest.mark.timeout(120)


def test_a_leader_feels_the_followers_grasp_and_lets_go_when_its_states_stop(tmp_path: Path) -> None:
    graph = Graph()
    try:
        with SimulatedArm("leader", link=tmp_path / "leader", hand=Hand()) as arm:
            arm.set_human(lambda t: [2050.0, 2050.0, 1975.0, 2025.0, 2050.0, 2050.0])  # the trigger squeezed
            graph.driver("leader", arm, feedback="gripper")
            follower = graph.add(Node("follower_probe", context=graph.context))
            pub = follower.create_publisher(JointState, "/follower/joint_states", STREAM_QOS)
            cal = load_calibration(sim_calibration_file("leader"))["gripper"]
            stopped = float(cal.raw_to_rad(2400 - cal.homing_offset))  # the jaws stopped on an object there
            grip = arm.servos[6]

            def grasping(load: float) -> None:
                positions = [0.0] * 5 + [stopped]
                pub.publish(joint_state(JOINT_NAMES, positions, now_ns(), velocities=[0.0] * 6,
                                        efforts=[0.0] * 5 + [load]))

            wait_for(lambda: (grasping(-0.16), grip.torque_on)[1], 30, "the leader's trigger torqued")
            wait_for(lambda: (grasping(-0.16), abs(arm.hand_forces()[5]) > 0.1)[1], 10, "the hand feels the grasp")
            assert grip.get("Torque_Limit") == 150
            assert not any(s.torque_on for sid, s in arm.servos.items() if sid != 6), "only the trigger"
            wait_for(lambda: not grip.torque_on, 10, "released once the follower's states stop")
    finally:
        graph.close()
