"""Operator console: the view model as plain functions, and the real console driven in a pty."""
from __future__ import annotations

import contextlib
import json
import os
import pty
import re
import sys
import time

import pytest
from support.terminal import read_until

from teleop_flywheel.core.labels import TRIGGER_LABELS
from teleop_flywheel.ros.session.console_view import KEYS, ConsoleState


def test_view_shows_authority_streams_and_labels() -> None:
    st = ConsoleState(session="sim")
    st.on_authority(["alpha", "mode", "intervention_id", "trigger"], [0.42, 1.0, 3.0, 0.0])
    st.on_recorder_status(json.dumps({
        "state": "recording", "episode": "ep_0007", "elapsed_s": 12.5, "outcome": "unset",
        "topics": {"/follower/joint_states": {"rate_hz": 200.0, "count": 2500, "drops": 2}},
        "missing_topics": ["/cameras/wrist/image/compressed"], "disk_free_bytes": 5e9,
    }))
    st.on_diagnostic("follower_arm", "ERROR", "port /dev/ttyACM1 unplugged", {})
    text = "\n".join(st.render())
    assert "mode policy" in text and "alpha 0.42" in text
    assert "intervention 3" in text and "UNLABELLED" in text
    assert "ep_0007" in text and "recording" in text
    assert re.search(r"/follower/joint_states\s+200.0\s+2500\s+2", text)
    assert "/cameras/wrist/image/compressed" in text and "MISSING" in text
    assert "! follower_arm: ERROR port /dev/ttyACM1 unplugged" in text


def test_keys_cover_every_trigger_label_and_lifecycle() -> None:
    assert {arg for a, arg in KEYS.values() if a == "trigger"} == set(TRIGGER_LABELS)
    assert {a for a, _ in KEYS.values()} >= {"start", "stop", "discard", "keep", "attempts", "outcome", "mode",
                                             "quit", "pedal"}


def test_a_then_a_digit_sets_attempts_and_digits_alone_stay_labels() -> None:
    st = ConsoleState()
    assert st.key("3") == ("trigger", TRIGGER_LABELS[2])
    assert st.key("a") is None and "press a digit" in st.message
    assert st.key("3") == ("attempts", "3")
    assert st.key("3") == ("trigger", TRIGGER_LABELS[2])  # the pair is over
    assert st.key("a") is None
    assert st.key("x") == ("discard", "") and st.message == "attempts: cancelled"  # another key cancels, then acts
    assert st.key("k") == ("keep", "") and st.key("?") is None


def test_view_shows_the_verdict_what_to_do_and_the_clock_field() -> None:
    st = ConsoleState(session="sim")
    status = {"state": "idle", "episode": "", "attempts": 2, "outcome": "unset",
              "verdict": {"episode": "ep_0008", "verdict": "pending", "codes": [], "decision": None},
              "clock": {"cameras": {"front": {"latency_ms": 4.25}}, "ptp_offset_ns": None}}
    st.on_recorder_status(json.dumps(status))
    text = "\n".join(st.render(200))
    assert "verdict ep_0008: … validating" in text and "attempts: 2" in text
    assert "clock offset: front ? (recv 4.2 ms)" in text  # no estimate yet: the receive latency
    status["verdict"] = {"episode": "ep_0008", "verdict": "FAIL", "codes": ["FRAME_GAP", "OUTCOME_UNSET"],
                         "reasons": [{"code": "FRAME_GAP", "detail": "/cameras/front/image/compressed gap 4.0s"},
                                     {"code": "OUTCOME_UNSET", "detail": "outcome was never set"}],
                         "warnings": [{"code": "CAMERA_LAG_UNKNOWN", "detail": "too little motion"}], "decision": None}
    status["clock"] = {"cameras": {"front": {"latency_ms": 4.0, "lag": {"lag_ms": 31.5, "stderr_ms": 1.25, "r2": 0.9}}},
                       "ptp_offset_ns": 250_000}
    st.on_recorder_status(json.dumps(status))
    text = "\n".join(st.render(200))
    assert "verdict ep_0008: FAIL FRAME_GAP OUTCOME_UNSET" in text
    assert "  FRAME_GAP: /cameras/front/image/compressed gap 4.0s" in text
    assert "warning CAMERA_LAG_UNKNOWN: too little motion" in text
    assert "x discard and re-record   k keep" in text
    assert "front lag +31.5±1.2 ms (recv 4.0 ms), PTP +0.250 ms" in text
    # with the running pool of the camera instance's episodes (the verdict at stop): the pooled figure and N
    status["clock"]["cameras"]["front"]["pool"] = {"lag_ms": 2.4, "stderr_ms": 2.9, "episodes": 12}
    st.on_recorder_status(json.dumps(status))
    assert "camera front lag +2 ± 3 ms (12 episodes) (recv 4.0 ms)" in "\n".join(st.render(200))
    del status["clock"]["cameras"]["front"]["pool"]
    status["verdict"]["decision"] = "discard"
    st.on_recorder_status(json.dumps(status))
    assert "discarded (moved to discarded/)" in "\n".join(st.render(200))
    st.on_intervention(json.dumps({"id": 2, "start_ns": 1, "end_ns": None, "trigger": None, "kind": "correction"}))
    assert "last correction: #2 trigger=UNLABELLED (running)" in "\n".join(st.render(200))


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


def test_a_stop_on_a_flag_the_spec_disagrees_with_is_asked_about_first() -> None:
    st = ConsoleState(session="sim")
    spec = {"id": "0123abcd", "name": "place", "instruction": "Put the brick on the square.",
            "start": {"inside": False, "detail": "shoulder_pan +0.300 outside [-0.100, +0.100]"},
            "success": None, "last": {}}
    st.on_recorder_status(json.dumps({"state": "idle", "outcome": "unset", "task_spec": spec}))
    text = "\n".join(st.render(200))
    assert "spec place (0123abcd): Put the brick on the square." in text
    assert "start: OUTSIDE the start region (shoulder_pan +0.300 outside [-0.100, +0.100])" in text
    assert st.key("e") == ("stop", "")  # nothing to compare: a stop is a stop
    # Marked failure while the predicate holds: asked; any other key goes back to recording.
    spec["success"] = {"passed": True, "detail": "joints in region"}
    st.on_recorder_status(json.dumps({"state": "recording", "outcome": "failure", "task_spec": spec}))
    assert "success now: met, you marked failure: DISAGREE" in "\n".join(st.render(200))
    assert st.key("e") is None
    assert st.prompt() == ["? the spec says success (joints in region)",
                           "? you marked failure: [k]eep failure / mark success [y]   (other key: back to recording)"]
    assert st.prompt()[1] in st.render(200)
    assert st.key("f") is None and not st.prompt() and st.message == "stop: cancelled, still recording"
    assert st.key("e") is None and st.key("y") == ("answer", "success")
    assert st.key("e") is None and st.key("k") == ("answer", "kept")
    # Stopped elsewhere while the question was on screen: the answer must not label the next episode.
    assert st.key("e") is None
    st.on_recorder_status(json.dumps({"state": "idle", "outcome": "unset", "task_spec": spec}))
    assert st.key("k") is None and "already stopped" in st.message
    st.on_recorder_status(json.dumps({"state": "recording", "outcome": "failure", "task_spec": spec}))
    # A flag that agrees is not asked about.
    st.on_recorder_status(json.dumps({"state": "recording", "outcome": "success", "task_spec": spec}))
    assert st.key("e") == ("stop", "")
    # After the stop: the predicate on the final pose beside the flag it was stopped with.
    spec["last"] = {"episode": "ep_0009", "passed": False, "detail": "gripper open (+0.600 rad, closed below +0.200)",
                    "outcome": "success", "disagrees": True, "operator_answer": "kept"}
    st.on_recorder_status(json.dumps({"state": "idle", "outcome": "unset", "task_spec": spec}))
    text = "\n".join(st.render(200))
    assert "at stop ep_0009: success NOT met, marked success, kept when asked: DISAGREE (OUTCOME_MISMATCH)" in text
    assert "    gripper open (+0.600 rad, closed below +0.200)" in text
