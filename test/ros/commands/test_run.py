"""The session supervisor starts one process per graph node, as `ros2 launch` does, and supervises
them: real processes, real DDS on localhost, simulated arms (sim-bus on pseudo-terminals)."""
from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
from support.cli import run_cli
from support.procs import alive, children, cmdline, process_name, running_with, wait_gone

from teleop_flywheel.ros.session.launch.graph import SIM_DIR, CameraSpec, Graph, SessionConfig, SimArmSpec, build_graph

pytest.importorskip("rclpy")

from teleop_flywheel.data.reports.bag_info import bag_info  # noqa: E402
from teleop_flywheel.recording.mcap.reader import open_bag  # noqa: E402
from teleop_flywheel.ros.errors import SessionError  # noqa: E402
from teleop_flywheel.ros.session.launch.supervisor import Session  # noqa: E402

SIM_ARGS = ["--arg", "cameras=front:synthetic"]


def _cfg(tmp_path: Path) -> SessionConfig:
    return SessionConfig(cameras=(CameraSpec("front", source="synthetic", device="synthetic", fps=15.0),),
                         output_dir=str(tmp_path / "bags"), task="supervisor test")


def test_build_graph_creates_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fails before the fix: every build_graph("sim") made a temp dir that nobody removed."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    graph = build_graph("sim")
    build_graph("sim", _cfg(tmp_path))
    assert list(tmp_path.iterdir()) == []
    assert graph.needs_sim_dir and graph.node("leader_arm").parameters["port"] == f"{SIM_DIR}/leader"
    placed = graph.in_sim_dir("/run/x")
    assert not placed.needs_sim_dir and placed.pedal_fifo == "/run/x/pedal"
    assert placed.node("follower_arm").parameters["port"] == placed.sim_arms[1].link == "/run/x/follower"
    assert placed.node("pedal").parameters["device"] == "/run/x/pedal"


def test_a_failing_second_simulator_leaves_nothing_behind() -> None:
    """Fails before the fix: the first sim-bus kept running after the second failed to start."""
    graph = Graph("sim", (), (SimArmSpec("leader", f"{SIM_DIR}/leader"),
                              SimArmSpec("follower", f"{SIM_DIR}/follower", faults=("no-such-fault",))))
    session = Session(graph, log=lambda _text: None)
    with pytest.raises(SessionError, match="simulated arm did not start.*no-such-fault"):
        session.start()
    assert session.dir is not None and not session.dir.exists()
    assert running_with(str(session.dir)) == []
    assert session.exit_codes["sim_leader"] == 0  # stopped by SIGINT, as at every stop


def _list_parameters(session: Session, names: list[str]) -> tuple[dict[str, set[str]], list[str]]:
    """Each node's declared parameters (over ROS), and the node names on the graph."""
    import rclpy
    from rcl_interfaces.srv import ListParameters

    from teleop_flywheel.ros.session.clients import call

    node = rclpy.create_node("param_probe", context=session.context)
    session.add_node(node)
    try:
        return ({n: set(call(node.create_client(ListParameters, f"/{n}/list_parameters"),
                             ListParameters.Request()).result.names) for n in names},
                [name for name, _ns in node.get_node_names_and_namespaces()])
    finally:
        session.remove_node(node)


RECORDED = ("/leader/joint_states", "/follower/joint_states", "/policy/joint_command",
            "/cameras/front/image/compressed")


def test_sim_session_runs_each_node_in_its_own_process_and_records(tmp_path: Path) -> None:
    from teleop_flywheel.ros.nodes.recorder_client import RecorderClient
    from teleop_flywheel.ros.session.clients import RecorderStatus

    graph = build_graph("sim", _cfg(tmp_path))
    # Children this test process had before (a multiprocessing resource tracker or forkserver an
    # earlier test started lives as long as pytest does) are not the session's.
    before = set(children(os.getpid()))
    with Session(graph) as session:
        # One process per graph node, plus the simulated arms, all children of the supervisor.
        assert sorted(session.processes) == sorted([*graph_names(graph), "sim_leader", "sim_follower"])
        started = sorted(set(children(os.getpid())) - before)
        assert started == sorted(p.pid for p in session.processes.values())
        for name, proc in session.processes.items():
            argv = cmdline(proc.pid)
            assert process_name(argv) == name, argv
            # its own session and group: a terminal's Ctrl-C goes to the supervisor; its own CPU share
            assert os.getsid(proc.pid) == os.getpgid(proc.pid) == proc.pid
            if not name.startswith("sim_"):
                spec = session.graph.node(name)
                assert argv[1:5] == [
                    "-m",
                    "teleop_flywheel.ros.session.launch.exec_node",
                    spec.executable,
                    "--ros-args",
                ]
                params = argv[argv.index("--params-file") + 1]
                assert Path(params).parent.parent == session.dir
        # Every parameter the graph gives is one the node declares (no silent typos).
        declared, on_graph = _list_parameters(session, session.node_names)
        # `-r __node:=recorder` names the recorder only, not its private raw node as well.
        assert on_graph.count("recorder") == 1 and "recorder_raw" in on_graph, on_graph
        for spec in session.graph.nodes:
            assert set(spec.parameters) <= declared[spec.name], (spec.name, set(spec.parameters) - declared[spec.name])
        client = RecorderClient(session.context, "test_operator")
        status = RecorderStatus(client.node)
        session.add_node(client.node)
        assert client.ready(30)
        status.wait_all_topics(30)
        client.call("start")
        # Until the recorder has taken more than 10 messages of each stream checked below.
        status.wait(lambda s: s["state"] == "recording" and all(
            s["topics"].get(t, {}).get("count", 0) > 10 for t in RECORDED), 30, "10 messages of each stream")
        before = status.last_saved()
        client.call("stop")
        saved = Path(status.saved_after(before))
        session.remove_node(client.node)
        sim_dir = session.dir
    assert all(code == 0 for code in session.exit_codes.values()), session.exit_codes
    assert not session.problems and not session.failed.is_set()
    assert sim_dir is not None and not sim_dir.exists(), "the session's directory goes at stop"
    assert running_with(str(sim_dir)) == []
    bags = sorted((tmp_path / "bags").iterdir())
    assert bags == [saved]
    episode = open_bag(saved).episode
    assert episode is not None and set(episode.calibration) == {"leader", "follower"}  # keyed by role
    counts = {t.name: t.count for t in bag_info(saved).topics}
    for topic in RECORDED:
        assert counts.get(topic, 0) > 10, f"{topic}: {counts.get(topic)} messages"


def graph_names(graph: Graph) -> list[str]:
    return [n.name for n in graph.nodes]


def test_a_killed_recorder_takes_only_the_recorder(tmp_path: Path) -> None:
    """kill -9 of the recorder is reported with its name and exit code; the arm drivers (own
    processes) keep publishing until the session is stopped, then stop cleanly."""
    import rclpy
    from sensor_msgs.msg import JointState

    from teleop_flywheel.ros.nodes.common import STREAM_QOS

    full = build_graph("sim", _cfg(tmp_path))
    keep = {"leader_arm", "follower_arm", "recorder"}
    graph = Graph("sim", tuple(n for n in full.nodes if n.name in keep), full.sim_arms)
    reports: list[str] = []
    with Session(graph, log=reports.append) as session:
        stamps: list[float] = []  # header stamps (ROS time, s) of the follower's states, as they arrive
        node = rclpy.create_node("follower_watch", context=session.context)
        node.create_subscription(JointState, "/follower/joint_states",
                                 lambda m: stamps.append(m.header.stamp.sec + m.header.stamp.nanosec / 1e9), STREAM_QOS)
        session.add_node(node)
        deadline = time.monotonic() + 30
        while len(stamps) < 20 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(stamps) >= 20, "the follower's joint states never arrived"
        recorder = session.pid("recorder")
        os.kill(recorder, signal.SIGKILL)
        assert session.failed.wait(10), "the recorder's death was not noticed"
        assert session.failure == f"recorder (pid {recorder}) exited unexpectedly: killed by SIGKILL (exit code -9)"
        assert reports == [session.failure]
        # The driver kept publishing: states stamped in the second after the death was noticed
        # (counted by stamp, so a moment's delay in this process's own delivery does not count).
        noticed = time.time()
        deadline = time.monotonic() + 30
        while not (stamps and stamps[-1] > noticed + 1.0) and time.monotonic() < deadline:
            time.sleep(0.05)
        after = [t for t in stamps if noticed < t <= noticed + 1.0]
        gaps = np.diff([t for t in stamps if t > noticed - 1.0])
        assert len(after) > 50, (f"the follower published {len(after)} states in the second after the recorder died "
                                 f"(longest gap between stamps {gaps.max() if gaps.size else float('nan'):.3f} s)")
        assert all(session.processes[n].poll() is None for n in session.processes if n != "recorder")
    assert session.exit_codes["recorder"] == -signal.SIGKILL
    assert {n: c for n, c in session.exit_codes.items() if n != "recorder"} == dict.fromkeys(
        ["leader_arm", "follower_arm", "sim_leader", "sim_follower"], 0)
    assert not session.problems


def _start_run(tmp_path: Path, *args: str) -> tuple[subprocess.Popen[str], Path]:
    err = tmp_path / "run.stderr"
    proc = subprocess.Popen([sys.executable, "-m", "teleop_flywheel.cli", "run", *args],
                            stdout=subprocess.PIPE, stderr=err.open("w"), stdin=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    deadline = time.monotonic() + 120
    line = ""
    while "session up" not in line:
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            pytest.fail(f"no 'session up' from run: {line!r}\n{err.read_text()[-3000:]}")
        if select.select([proc.stdout], [], [], 0.5)[0]:
            line = proc.stdout.readline()
    return proc, err


def test_run_reports_a_dead_node_and_stops_the_session(tmp_path: Path) -> None:
    proc, err = _start_run(tmp_path, "sim", *SIM_ARGS, "--arg", f"output_dir={tmp_path}")
    try:
        kids = {process_name(cmdline(pid)): pid for pid in children(proc.pid)}
        os.kill(kids["recorder"], signal.SIGKILL)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = err.read_text()
    assert proc.returncode == 1, text[-3000:]
    assert f"run: recorder (pid {kids['recorder']}) exited unexpectedly: killed by SIGKILL (exit code -9)" in text
    assert "session stopped because recorder" in text
    assert "did not stop cleanly" not in text and "Traceback" not in text, text[-3000:]
    assert wait_gone(list(kids.values()), 5) == []


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "Ctrl-C"])
def test_a_signal_to_run_stops_every_child(tmp_path: Path, sig: signal.Signals) -> None:
    proc, err = _start_run(tmp_path, "sim", *SIM_ARGS, "--arg", f"output_dir={tmp_path}")
    try:
        kids = {process_name(cmdline(pid)): pid for pid in children(proc.pid)}
        # The processes `run` started are exactly the graph's nodes plus the simulated arms.
        expected = [n.name for n in build_graph("sim", _cfg(tmp_path)).nodes] + ["sim_leader", "sim_follower"]
        assert sorted(kids) == sorted(expected)
        proc.send_signal(sig)
        try:
            out, _ = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail(f"run had not stopped 60 s after {sig.name}; its log:\n{err.read_text()[-4000:]}")
    finally:
        if proc.poll() is None:
            proc.kill()
    text = err.read_text()
    assert proc.returncode == 0, text[-3000:]
    assert "session stopped cleanly" in out
    assert "Traceback" not in text, text[-3000:]
    assert wait_gone(list(kids.values()), 5) == []


def test_kill_9_of_the_supervisor_leaves_no_child(tmp_path: Path) -> None:
    """The kernel stops the children (PR_SET_PDEATHSIG) when the supervisor cannot."""
    proc, err = _start_run(tmp_path, "sim", *SIM_ARGS, "--arg", f"output_dir={tmp_path}")
    kids = children(proc.pid)
    session_dirs = {Path(a).parent.parent for pid in kids for a in cmdline(pid) if a.endswith(".yaml")}
    try:
        # The sim graph's nodes (metrics included) and the two simulated buses, one process each.
        assert len(kids) == 10 and len(session_dirs) == 1
        proc.kill()
        proc.wait(10)
        # Each stops within its shutdown bound (SHUTDOWN_BOUND_S, 25 s) even if DDS teardown hangs.
        left = wait_gone(kids, 60)
        assert left == [], (
            f"children outlived their supervisor: {[cmdline(p) for p in left]}\n{err.read_text()[-3000:]}"
        )
    finally:
        for pid in kids:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        for d in session_dirs:  # nobody was left to remove it
            subprocess.run(["rm", "-rf", str(d)], check=False)


def test_run_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    pytest.importorskip("rclpy")
    proc = subprocess.Popen([sys.executable, "-m", "teleop_flywheel.cli", "run", "record",
                             "--arg", "cameras=front:synthetic", "--arg", f"output_dir={tmp_path}"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()  # type: ignore[union-attr]
        assert "session up" in line, line + proc.stderr.read()  # type: ignore[union-attr]
        time.sleep(1.0)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-2000:]
    assert "session stopped cleanly" in out


def test_run_with_a_bad_task_spec_stops_before_anything_starts(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """One line naming the file and the field, exit 2, no process started (the spec is read once, by `run`;
    in this process, whose children are checked after every test)."""
    task = tmp_path / "task.yaml"
    task.write_text("instruction: Put the brick on the square.\nstart_region: {joints: {shoulder_pan: [0.5, -0.5]}}\n")
    before = set(children(os.getpid()))
    code, out, err = run_cli(capsys, "run", "sim", *SIM_ARGS, "--arg", f"output_dir={tmp_path / 'bags'}",
                             "--arg", f"task:={task}")
    assert code == 2, err
    assert set(children(os.getpid())) == before
    assert out == "" and len(err.splitlines()) == 1, err
    assert err.startswith("teleop-flywheel run: error: field 'start_region.joints.shoulder_pan' is empty: "
                                  f"low 0.5 > high -0.5, {task} (docs/task_spec.md")
    assert not (tmp_path / "bags").exists()


def test_sessions_stay_on_this_machine_unless_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    """`run` and `demo` children (and the supervisor's helpers) default to LOCALHOST discovery;
    a range the user set on purpose is kept."""
    from teleop_flywheel.ros.session.launch.supervisor import child_env

    monkeypatch.delenv("ROS_AUTOMATIC_DISCOVERY_RANGE", raising=False)
    assert child_env()["ROS_AUTOMATIC_DISCOVERY_RANGE"] == "LOCALHOST"
    monkeypatch.setenv("ROS_AUTOMATIC_DISCOVERY_RANGE", "SUBNET")
    assert child_env()["ROS_AUTOMATIC_DISCOVERY_RANGE"] == "SUBNET"


def test_the_supervisor_lets_a_node_stop_within_its_own_bound() -> None:
    """A node bounds its own stop (`SHUTDOWN_BOUND_S`: past it, its stacks and exit 1); the supervisor
    must not SIGTERM it sooner: a leader arm still closing on a loaded machine was killed 10 s after
    SIGINT and the session did not stop cleanly (test_unattended_sim_run_judges_what_each_checkpoint_did…)."""
    from teleop_flywheel.ros.nodes.common import SHUTDOWN_BOUND_S, TEARDOWN_BOUND_S

    assert Session(build_graph("sim", SessionConfig())).stop_timeout_s > SHUTDOWN_BOUND_S + TEARDOWN_BOUND_S
