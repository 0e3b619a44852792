"""Node executables as their own processes, as `ros2 run`/`ros2 launch` (and the session supervisor)
start them: a signal stops them cleanly (exit 0, their background threads stopped before the
context, nothing on stderr but log lines) and a bad parameter is one line and a non-zero exit.
"""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import rclpy
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from rclpy.context import Context
from rclpy.node import Node
from sensor_msgs.msg import CompressedImage, JointState
from std_msgs.msg import String
from support.procs import node_cmd, wait_for

from teleop_flywheel.core.calibration import sim_calibration_file
from teleop_flywheel.hw.feetech.sim import SimulatedArm
from teleop_flywheel.ros.nodes.common import IMAGE_QOS, LATCHED_QOS, STREAM_QOS, NodeSpinner

pytestmark = pytest.mark.timeout(180)



@pytest.fixture
def listener() -> Iterator[Node]:
    context = Context()
    rclpy.init(context=context, args=[])
    node = Node("process_listener", context=context)
    spinner = NodeSpinner(context)
    spinner.add(node)
    yield node
    spinner.shutdown()
    node.destroy_node()
    context.shutdown()


def stop_cleanly(proc: subprocess.Popen[str], sig: int) -> str:
    """Send `sig`; the node must exit 0 with no traceback; returns its stderr."""
    proc.send_signal(sig)
    try:
        _out, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        _out, err = proc.communicate()
        raise AssertionError(f"did not stop within 30 s of {signal.Signals(sig).name}: {err}") from None
    assert proc.returncode == 0, err
    for bad in ("Traceback", "RCLError", "Exception", "context is invalid"):
        assert bad not in err, err
    return err


def start(cmd: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=os.environ.copy())


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_camera_process_stops_cleanly(listener: Node, sig: int) -> None:
    frames: list[CompressedImage] = []
    listener.create_subscription(CompressedImage, "/cameras/proc/image/compressed", frames.append, IMAGE_QOS)
    proc = start(node_cmd("camera", name="proc", source="synthetic", width=320, height=240, fps=60))
    try:
        # frames flowing: the capture thread is publishing when the signal lands
        wait_for(lambda: len(frames) >= 10, 60, "camera frames", proc)
        stop_cleanly(proc, sig)
    finally:
        if proc.poll() is None:
            proc.kill()


def test_a_node_that_crashes_says_where(listener: Node) -> None:
    """A node process killed by SIGSEGV (seen once in CI: an arm driver at start, with nothing on its
    stderr) prints every thread's Python stack on its way out, and still dies of the signal."""
    frames: list[CompressedImage] = []
    listener.create_subscription(CompressedImage, "/cameras/crash/image/compressed", frames.append, IMAGE_QOS)
    proc = start(node_cmd("camera", name="crash", source="synthetic", width=320, height=240, fps=60))
    try:
        wait_for(lambda: len(frames) >= 3, 60, "camera frames", proc)
        proc.send_signal(signal.SIGSEGV)
        _out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGSEGV, (proc.returncode, err)
    assert "Fatal Python error: Segmentation fault" in err and "spin_node" in err, err


def test_camera_process_waits_for_its_camera_and_reopens_it_after_an_unplug(listener: Node, tmp_path: Path) -> None:
    """The camera node does not die when its camera is missing or goes away: /diagnostics says
    ERROR naming it while it lasts, and frames flow again once it is back (the synthetic camera's
    presence file is its USB cable)."""
    plug = tmp_path / "video0"
    frames: list[CompressedImage] = []
    errors: list[str] = []

    def on_diag(msg: DiagnosticArray) -> None:
        errors.extend(s.message for s in msg.status if s.name == "camera/plug" and s.level == DiagnosticStatus.ERROR)

    listener.create_subscription(CompressedImage, "/cameras/plug/image/compressed", frames.append, IMAGE_QOS)
    listener.create_subscription(DiagnosticArray, "/diagnostics", on_diag, 10)
    proc = start(node_cmd("camera", name="plug", source="synthetic", width=320, height=240, fps=60,
                          presence_file=str(plug)))
    try:
        wait_for(lambda: any("is not there" in e for e in errors), 60, "ERROR: the camera is not there", proc)
        assert not frames
        plug.touch()
        wait_for(lambda: len(frames) >= 10, 60, "frames once the camera is plugged in", proc)
        errors.clear()
        plug.unlink()
        wait_for(
            lambda: any(str(plug) in e and "is not there" in e for e in errors), 60, "ERROR after the unplug", proc
        )
        seen = len(frames)
        plug.touch()
        wait_for(lambda: len(frames) >= seen + 10, 60, "frames again after the replug", proc)
        err = stop_cleanly(proc, signal.SIGINT)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert err.count("retrying with backoff") == 2 and err.count("reopening with backoff") == 1, err
    assert "opened, frames" in err and "reconnected, frames again" in err


def realtime_permitted() -> bool:
    return subprocess.run(["chrt", "-f", "1", "true"], capture_output=True).returncode == 0


def assert_every_thread_real_time(pid: int) -> None:
    """A node with a real-time loop, alone in its process, runs every thread of it at SCHED_FIFO 50
    where permitted (a normal-policy thread holding the GIL would hold the loop off), and none where
    not."""
    policies = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            policies[tid] = (os.sched_getscheduler(int(tid)) & ~os.SCHED_RESET_ON_FORK,
                             os.sched_getparam(int(tid)).sched_priority)
    if realtime_permitted():
        assert set(policies.values()) == {(os.SCHED_FIFO, 50)}, policies
    else:
        assert {policy for policy, _ in policies.values()} == {os.SCHED_OTHER}, policies


def test_the_teleop_process_runs_every_thread_real_time(listener: Node) -> None:
    ticks: list[JointState] = []
    listener.create_subscription(JointState, "/teleop/authority", ticks.append, STREAM_QOS)
    proc = start(node_cmd("teleop", mode="policy"))
    try:
        wait_for(lambda: len(ticks) >= 20, 60, "ticks of the teleop loop", proc)
        assert_every_thread_real_time(proc.pid)
        stop_cleanly(proc, signal.SIGTERM)
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_arm_driver_process_stops_cleanly(listener: Node, tmp_path: Path, sig: int) -> None:
    states: list[JointState] = []
    listener.create_subscription(JointState, "/follower/joint_states", states.append, STREAM_QOS)
    with SimulatedArm("follower", link=tmp_path / "follower") as arm:
        proc = start(node_cmd("arm_driver", port=arm.link, role="follower", simulated="true",
                              calibration_file=sim_calibration_file("follower")))
        try:
            wait_for(lambda: len(states) >= 50, 60, "joint states from the bus loop", proc)
            assert_every_thread_real_time(proc.pid)
            stop_cleanly(proc, sig)
            # the driver released torque on exit (torque_on_exit false): it ran its close() on the bus
            assert all(s.get("Torque_Enable") == 0 for s in arm.servos.values())
        finally:
            if proc.poll() is None:
                proc.kill()


def test_recorder_process_saves_the_episode_on_sigterm(listener: Node, tmp_path: Path) -> None:
    import json

    status: list[dict[str, Any]] = []
    listener.create_subscription(String, "/recorder/status", lambda m: status.append(json.loads(m.data)), LATCHED_QOS)
    pub = listener.create_publisher(JointState, "/follower/joint_states", STREAM_QOS)
    proc = start(node_cmd("recorder", output_dir=tmp_path, topics="[/follower/joint_states]", auto_start="true",
                          discovery_period_s=0.1, status_period_s=0.1))
    try:
        from teleop_flywheel.core.clock import now_ns
        from teleop_flywheel.ros.nodes.common import joint_state

        def recording() -> bool:
            pub.publish(joint_state(["a"], [0.0], now_ns()))
            return bool(status) and status[-1]["messages"] > 20

        wait_for(recording, 60, "messages recorded", proc)
        err = stop_cleanly(proc, signal.SIGTERM)
        assert "saved" in err  # the log line of the episode closed at shutdown
        bags = [p for p in tmp_path.iterdir() if p.is_dir()]
        assert len(bags) == 1 and (bags[0] / "metadata.yaml").exists()
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.mark.parametrize("module,param,value,allowed", [
    ("teleop", "rate_hz", "0", "within [1, 2000]"),
    ("teleop", "blend_duration_ms", "5000.0", "within [20, 1000]"),
    ("camera", "fps", "0", "within [0.1, 1000]"),
    ("camera", "height", "40", "room for its timecode"),
    ("policy", "rate_hz", "0.0", "within [0.1, 1000]"),
    ("recorder", "ptp_probe", "'sh -c id'", "one of: '', 'pmc', 'chrony'"),
])
def test_a_bad_parameter_is_one_line_and_a_nonzero_exit(module: str, param: str, value: str, allowed: str) -> None:
    res = subprocess.run(node_cmd(module, **{param: value}), capture_output=True, text=True, timeout=120,
                         env=os.environ.copy())
    assert res.returncode == 1, res
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith(f"/{module}: parameter {param} = "), lines[0]
    assert allowed in lines[0], lines[0]


def _stopping_node(name: str, methods: str, shutdown_bound_s: float) -> str:
    """A node process that prints "spinning" once it spins, with `methods` (its stop) added."""
    return f"""
import sys, threading
from rclpy.node import Node
from teleop_flywheel.ros.nodes.common import spin_node

class Stopping(Node):
    def __init__(self):
        super().__init__("{name}")
        self.timer = self.create_timer(0.05, self.spinning)

    def spinning(self):
        print("spinning", flush=True)
        self.timer.cancel()
{methods}
sys.exit(spin_node(Stopping, name="{name}", shutdown_bound_s={shutdown_bound_s}))
"""


HANGING_NODE = _stopping_node("hangs", """
    def close(self):  # stands in for a teardown that waits on a peer that is gone
        threading.Event().wait()
""", 2.0)


def test_a_node_whose_stop_hangs_exits_within_the_shutdown_bound() -> None:
    """Nobody escalates to SIGKILL for a node stopped by the parent-death signal: it must end itself."""
    proc = subprocess.Popen([sys.executable, "-c", HANGING_NODE], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "spinning\n"
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1
    assert "Timeout (0:00:02)!" in err and "in close" in err  # the stack says where it hung


IDLE_NODE = _stopping_node("idle", """
    def close(self):
        print("closed", flush=True)

import teleop_flywheel.ros.nodes.common as common
common.NODE_POLL_S = 600.0  # so that only the signal can end its wait within the test's bound
""", 60.0)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_wakes_a_node_with_nothing_to_do(sig: signal.Signals) -> None:
    """An idle node (no timer, no message: a pedal waiting for its device, an arm driver whose bus
    loop has its own thread) stops on the signal itself, not on its next poll for a `failure`
    (NODE_POLL_S): at the shipped 1 s poll, such nodes added up to a second to every session's stop."""
    proc = subprocess.Popen([sys.executable, "-c", IDLE_NODE], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "spinning\n"
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert out == "closed\n", err


TEARDOWN_HANGS = _stopping_node("closes", """
    def close(self):
        print("closed", flush=True)

    def destroy_node(self):  # stands in for Fast DDS's teardown waiting on a peer that is gone
        threading.Event().wait()

import teleop_flywheel.ros.nodes.common as common
common.TEARDOWN_BOUND_S = 1.0  # the bound ending it is what is checked, not its length (5 s shipped)
""", 60.0)


def test_a_node_that_stopped_cleanly_is_not_held_by_a_hanging_middleware_teardown() -> None:
    """Its stop was clean (closed, hardware safe): a teardown that never ends costs TEARDOWN_BOUND_S,
    one line, and exit 0 — not the shutdown bound's stacks and exit 1 (a session "not stopped cleanly")."""
    from teleop_flywheel.ros.nodes.common import TEARDOWN_BOUND_S

    proc = subprocess.Popen([sys.executable, "-c", TEARDOWN_HANGS], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "spinning\n"
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=TEARDOWN_BOUND_S + 30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert out == "closed\n"
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("/closes: stopped, but the middleware's teardown did not finish"), err
    assert "Timeout" not in err