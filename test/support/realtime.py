"""Which test modules are `realtime`: they run real processes against the wall clock and so run one at a time.

The README runs the suite in two parts: the tests marked `realtime` one at a time with the machine to
themselves, then the others on two workers. Beside a CPU-bound test the demo saw a 0.64 s stall of
the follower's command stream and the unattended walk lost a takeover's label (`-n 2`), while the
data tests are CPU work that two cores share without harm. A module is listed by need, not by its
folder: it starts a simulated arm, a ROS session, a node spinning, an operator's pty, or times a
capture thread or a server against the clock. A module whose tests are maths, parsers, configs,
graphs built but not started, or bags written and read back runs on the workers, wherever it lives.
`unlisted_wall_clock_modules` finds a module outside the list that starts one of the first four
(test_architecture.py fails on it).
"""
from __future__ import annotations

import re
from pathlib import Path

TEST_DIR = Path(__file__).resolve().parent.parent

# Paths under test/: a module, or a folder whose every module is one of these.
REALTIME = (
    "cli/test_cli_voice.py",
    "core/test_priority.py",
    "core/test_signals.py",
    "data/convert/test_frame_labels_session.py",
    "data/convert/test_ingest_live.py",
    "data/reports/test_task_init_lerobot.py",
    "evaluation/test_protocol_run.py",
    "hw/arm/test_arm.py",
    "hw/arm/test_arm_fault_paths.py",
    "hw/arm/test_arm_faults.py",
    "hw/arm/test_arm_feedback.py",
    "hw/arm/test_arm_health.py",
    "hw/arm/test_arm_motion.py",
    "hw/bringup/",
    "hw/camera/test_camera.py",
    "hw/feetech/test_bus_adversarial.py",
    "hw/feetech/test_feetech.py",
    "hw/feetech/test_sim_hand.py",
    "hw/pedal/",
    "policies/",
    "ros/commands/",
    "ros/nodes/test_arm_driver_feedback.py",
    "ros/nodes/test_arm_driver_motion.py",
    "ros/nodes/test_arm_driver_node.py",
    "ros/nodes/test_camera_pose.py",
    "ros/nodes/test_metrics_node.py",
    "ros/nodes/test_node_processes.py",
    "ros/nodes/test_policy_node.py",
    "ros/nodes/test_recorder_node.py",
    "ros/nodes/test_recorder_verdict.py",
    "ros/nodes/test_rig_safety.py",
    "ros/nodes/test_teleop_node.py",
    "ros/session/foxglove/test_foxglove_view.py",
    "ros/session/foxglove/test_playback.py",
    "ros/session/launch/",
)

# What a test module's source says when it starts one of these (how the suite's tests start them).
WALL_CLOCK = {
    "a simulated arm": re.compile(r"with \(?SimulatedArm\b|SimulatedArm\([^()\n]*\)\.start\(|[\"']sim-bus[\"']"
                                  r"|\bAdversarialServos\("),
    "a ROS session": re.compile(r"\bSession\(graph|supervisor import [^\n]*\bSession\b"
                                r"|support\.(rig_feed|recorder_rig)\b|[\"']eval[\"'], [\"']watch[\"']"
                                r"|[\"'](run|demo)[\"'], [\"'](sim|teleop|rollout|--out)[\"']"),
    "a node spinning": re.compile(r"\bspin_once\(|\bspin_until_future_complete\(|\b(SingleThreaded|MultiThreaded)"
                                  r"Executor\(|\.spin\(\)|\bNodeSpinner\(|\bnode_cmd\b"),
    "an operator's pty": re.compile(r"\bpty\.fork\(|\bopenpty\(|support\.terminal\b"),
}


def realtime(path: Path) -> bool:
    """Whether the test module at `path` is one REALTIME lists."""
    return path.resolve().relative_to(TEST_DIR).as_posix().startswith(REALTIME)


def unlisted_wall_clock_modules() -> dict[str, list[str]]:
    """{module outside REALTIME: what it starts (WALL_CLOCK's keys)} for every test module whose source says
    it starts a simulated arm, a session, a node spinning or a pty."""
    found = {}
    for path in sorted(TEST_DIR.rglob("test_*.py")):
        if "support" in path.relative_to(TEST_DIR).parts or realtime(path):
            continue
        text = path.read_text(encoding="utf-8")
        if starts := [what for what, pattern in WALL_CLOCK.items() if pattern.search(text)]:
            found[path.relative_to(TEST_DIR).as_posix()] = starts
    return found
