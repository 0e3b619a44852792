"""`teleop-flywheel console`: the real console driven in a pty against a real session."""
from __future__ import annotations

import contextlib
import json
import os
import pty
import sys
import time

import pytest
from support.terminal import read_until


def test_console_in_a_pty_starts_and_stops_a_real_recorder(tmp_path) -> None:
    """Under a task spec: the instruction and the start region before recording, the predicate beside
    the flag while recording, a stop on a flag the predicate disagrees with asked about first, and
    the answer (a changed flag) in the episode."""
    pytest.importorskip("rclpy")
    recorder_mod = pytest.importorskip("teleop_flywheel.ros.nodes.recorder", reason="recorder node not available")
    import threading

    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.parameter import Parameter

    rclpy.init()
    from sensor_msgs.msg import JointState, Joy

    from teleop_flywheel.core.so101 import JOINT_NAMES
    from teleop_flywheel.core.task_spec import parse_task_spec
    from teleop_flywheel.ros.nodes.common import STREAM_QOS

    spec = parse_task_spec({"instruction": "Put the brick on the square.",
                            "start_region": {"joints": {"shoulder_pan": [-0.1, 0.1]}},
                            "success": {"joints": {"shoulder_pan": [0.4, 0.6]}}}, "task.yaml")
    pid, fd = pty.fork()
    if pid == 0:
        os.execv(sys.executable, [sys.executable, "-m", "teleop_flywheel.cli", "console", "--session", "pty-test"])
    node = executor = None
    try:
        # The operator presses start before the recorder exists: the key waits for the service
        # (a recorder's status can also reach the console before its services are discovered).
        read_until(fd, r"teleop_flywheel console", 60)
        os.write(fd, b"s")
        read_until(fd, r"waiting for /recorder/start", 30)
        node = recorder_mod.RecorderNode(parameter_overrides=[
            Parameter("output_dir", value=str(tmp_path)),
            Parameter("topics", value=["/chatter", "/follower/joint_states"]),
            Parameter("task_spec", value=json.dumps(dict(spec.content))), Parameter("status_period_s", value=0.2),
        ])
        joys: list[list[int]] = []
        node.create_subscription(Joy, "/pedal/joy", lambda m: joys.append(list(m.buttons)), STREAM_QOS)
        follower = node.create_publisher(JointState, "/follower/joint_states", STREAM_QOS)
        node.create_timer(0.05, lambda: follower.publish(JointState(name=list(JOINT_NAMES), position=[0.0] * 6)))
        executor = SingleThreadedExecutor()
        executor.add_node(node)
        threading.Thread(target=executor.spin, daemon=True).start()
        read_until(fd, r"recording: recording", 30)
        read_until(fd, rf"spec task \({spec.id}\): Put the brick on the square\.", 30)
        os.write(fd, b"y")
        read_until(fd, r"outcome: success", 30)
        read_until(fd, r"success now: NOT met, you marked success: DISAGREE\s+shoulder_pan \+0\.000 outside "
                       r"\[\+0\.400, \+0\.600\]", 30)
        os.write(fd, b"a4")  # attempts: `a` then a digit
        read_until(fd, r"attempts: 4", 30)
        os.write(fd, b" ")  # the terminal fallback pedal
        read_until(fd, r"takeover \(pedal down\)", 30)
        os.write(fd, b"e")  # asked first: nothing is stopped until answered
        read_until(fd, r"\? the spec says NOT success \(shoulder_pan .*\)\s+\? you marked success: \[k\]eep success / "
                       r"mark \[f\]ailure", 30)
        os.write(fd, b"f")
        read_until(fd, r"recording: idle", 30)
        read_until(fd, r"start: inside the start region .*at stop episode_\S+: success NOT met, marked failure, "
                       r"changed when asked\s+shoulder_pan \+0\.000 outside", 30)
        # The verdict of the episode just stopped comes onto the screen (this one has no command streams).
        read_until(fd, r"verdict episode_\S+: FAIL [A-Z_ ]*MISSING_STREAM.*x discard and re-record", 60)
        os.write(fd, b"k")
        read_until(fd, r"keep: ok kept .*  kept", 30)
        os.write(fd, b"q")
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, 9)
        if node is not None:
            node.close()
            executor.shutdown()
            node.destroy_node()
        rclpy.shutdown()
    assert joys and joys[0][0] == 1, "space bar must press the takeover on /pedal/joy"
    bags = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert len(bags) == 1, f"expected one saved episode, found {bags}"
    from teleop_flywheel.core.episode import EpisodeMeta
    from teleop_flywheel.recording.mcap.metadata import read_metadata_yaml

    meta = EpisodeMeta.from_strings(read_metadata_yaml(bags[0])["custom_data"])
    assert (meta.outcome, meta.attempts, meta.task, meta.task_spec_id) == ("failure", 4, spec.instruction, spec.id)
    assert meta.outcome_check == {"passed": False, "detail": "shoulder_pan +0.000 outside [+0.400, +0.600]",
                                  "operator_answer": "changed"}
    doc = json.loads((bags[0] / "verdict.json").read_text())
    assert doc["verdict"] == "FAIL" and "MISSING_STREAM" in doc["codes"] and doc["decision"]["action"] == "keep"


def test_escape_e_stops_the_arms_and_the_teleop_node_and_r_resets(tmp_path) -> None:
    """The console's e-stop reaches every node that can move the follower, at once."""
    pytest.importorskip("rclpy")
    import threading

    import rclpy
    from rclpy.executors import MultiThreadedExecutor
    from rclpy.parameter import Parameter

    from teleop_flywheel.core.calibration import sim_calibration_file
    from teleop_flywheel.hw.feetech.sim import SimulatedArm
    from teleop_flywheel.ros.nodes.arm_driver import ArmDriverNode
    from teleop_flywheel.ros.nodes.teleop import TeleopNode

    rclpy.init()
    executor = MultiThreadedExecutor()
    nodes = []
    pid = -1
    with SimulatedArm("follower", link=tmp_path / "follower") as arm:
        try:
            arm_node = ArmDriverNode(
                "follower_arm",
                parameter_overrides=[
                    Parameter("port", value=str(arm.link)),
                    Parameter("role", value="follower"),
                    Parameter("simulated", value=True),
                    Parameter("calibration_file", value=str(sim_calibration_file("follower"))),
                ],
            )
            teleop = TeleopNode("teleop")
            nodes = [arm_node, teleop]
            for n in nodes:
                executor.add_node(n)
            threading.Thread(target=executor.spin, daemon=True).start()
            pid, fd = pty.fork()
            if pid == 0:
                os.execv(sys.executable, [sys.executable, "-m", "teleop_flywheel.cli", "console"])
            read_until(fd, r"ESC E-STOP", 60)
            os.write(fd, b"\x1b")
            read_until(fd, r"estop: ok", 30)
            deadline = time.monotonic() + 30
            while not (arm_node.arm.state.estop and teleop._held()):
                assert time.monotonic() < deadline, "the e-stop did not reach both nodes"
                time.sleep(0.05)
            assert all(s.torque_on for s in arm.servos.values())  # held, not dropped
            os.write(fd, b"r")
            while arm_node.arm.state.estop or teleop._held():
                assert time.monotonic() < deadline + 30, "the reset did not reach both nodes"
                time.sleep(0.05)
            os.write(fd, b"q")
            os.waitpid(pid, 0)
            pid = -1
        finally:
            if pid > 0:
                os.kill(pid, 9)
            for n in nodes:
                getattr(n, "close", lambda: None)()
            executor.shutdown()
            for n in nodes:
                n.destroy_node()
            rclpy.shutdown()


