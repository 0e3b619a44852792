"""Which test modules are `realtime` (they run real processes against the wall clock) and which of
those are `whole_machine` (they run a whole rig and so run one at a time).

The README runs the suite in three parts: the tests not marked `realtime` on two workers (CPU work
that two cores share without harm), then the `realtime` ones that are not `whole_machine` on two
workers, then the `whole_machine` ones one at a time with the machine to themselves. A module is
listed by need, not by its folder: it starts a simulated arm, a ROS session, a node spinning, an
operator's pty, or times a capture thread or a server against the clock. A module whose tests are
maths, parsers, configs, graphs built but not started, or bags written and read back runs on the
workers, wherever it lives. `unlisted_wall_clock_modules` finds a module outside the list that
starts one of the first four (test_architecture.py fails on it).

Beside a CPU-bound test the demo saw a 0.64 s stall of the follower's command stream and the
unattended walk lost a takeover's label: a realtime test next to the data tests is starved. Two
realtime tests of one arm or one node each share the two cores without harm: they wait on a bus
or a topic most of the time (run one at a time, the realtime tests kept 0.45 of a core busy on
average), and on two workers all of them passed, beside one CPU burner too (beside two, two tests
whose simulated arm runs in the test's own process missed its replies: four busy processes on two
cores; each passes alone beside two). A whole ROS session (nine processes, ~1.2 cores while it
records) does not share: it has the machine to itself, as do the modules in `WHOLE_MACHINE` that
load it on purpose. `unlisted_session_modules` finds a module starting a session outside that list.
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

# Paths under test/ (within REALTIME) whose tests run one at a time: each starts a whole ROS session,
# or records on purpose against a machine it loads itself.
WHOLE_MACHINE = (
    "cli/test_cli_voice.py",
    "data/convert/test_frame_labels_session.py",
    "data/convert/test_ingest_live.py",  # a recording checked for drops while ingest encodes beside it
    "evaluation/test_protocol_run.py",
    "ros/commands/test_demo.py",
    "ros/commands/test_eval_watch.py",
    "ros/commands/test_run.py",
    "ros/nodes/test_camera_pose.py",  # frames checked against the pose on a machine it loads
    "ros/nodes/test_recorder_verdict.py",
    "ros/session/foxglove/test_foxglove_view.py",
    "ros/session/launch/test_namespaces.py",
    "ros/session/launch/test_session_ingest.py",
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


def whole_machine(path: Path) -> bool:
    """Whether the test module at `path` is one WHOLE_MACHINE lists."""
    return path.resolve().relative_to(TEST_DIR).as_posix().startswith(WHOLE_MACHINE)


def unlisted_session_modules() -> list[str]:
    """Every test module outside WHOLE_MACHINE whose source says it starts a ROS session."""
    return [path.relative_to(TEST_DIR).as_posix() for path in sorted(TEST_DIR.rglob("test_*.py"))
            if "support" not in path.relative_to(TEST_DIR).parts and not whole_machine(path)
            and WALL_CLOCK["a ROS session"].search(path.read_text(encoding="utf-8"))]


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
