"""Launch files are thin declarations over graph.build_graph.

`launch`/`launch_ros` cannot be installed here, so the launch files are executed against
recording stand-ins for those two APIs (constructor calls are captured, nothing else), and
what they would start is compared with the processes the session supervisor (`teleop-flywheel
run`) starts for the same graph. Where the real `launch_ros` is installed, the last test builds
the description with it for real.
"""
from __future__ import annotations

import importlib.metadata
import json
import os
import runpy
import shutil
import signal
import stat
import sys
import tempfile
import types
from pathlib import Path
from typing import Any

import pytest
from support.paths import ROOT

from teleop_flywheel.ros.session.launch.graph import (
    EXECUTABLES,
    KINDS,
    LAUNCH_ARGUMENTS,
    build_graph,
    config_from_arguments,
    load_param_file,
    with_params_files,
)
from teleop_flywheel.ros.session.launch.launch_description import LAUNCH_ONLY_ARGUMENTS
from teleop_flywheel.ros.session.launch.supervisor import commands

ROOT = ROOT
LAUNCH_FILES = {"teleop": "teleop.launch.py", "rollout": "rollout.launch.py", "sim": "sim.launch.py"}


class _Recorded:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.args, self.kwargs = args, kwargs


class _LaunchConfiguration:
    def __init__(self, name: str) -> None:
        self.name = name

    def perform(self, context: dict[str, str]) -> str:
        return context[self.name]


class _Context(dict):  # type: ignore[type-arg]
    """launch's LaunchContext as the launch description uses it: argument values, is_shutdown."""

    is_shutdown = False


def _stand_ins() -> dict[str, types.ModuleType]:
    launch = types.ModuleType("launch")
    launch.LaunchDescription = type("LaunchDescription", (_Recorded,), {})
    actions = types.ModuleType("launch.actions")
    for name in ("DeclareLaunchArgument", "EmitEvent", "ExecuteProcess", "LogInfo", "OpaqueFunction",
                 "RegisterEventHandler"):
        setattr(actions, name, type(name, (_Recorded,), {}))
    handlers = types.ModuleType("launch.event_handlers")
    handlers.OnShutdown = type("OnShutdown", (_Recorded,), {})
    handlers.OnProcessExit = type("OnProcessExit", (_Recorded,), {})
    events = types.ModuleType("launch.events")
    events.Shutdown = type("Shutdown", (_Recorded,), {})
    events.matches_action = lambda action: ("matches", action)
    process_events = types.ModuleType("launch.events.process")
    process_events.SignalProcess = type("SignalProcess", (_Recorded,), {})
    subs = types.ModuleType("launch.substitutions")
    subs.LaunchConfiguration = _LaunchConfiguration
    launch_ros = types.ModuleType("launch_ros")
    ros_actions = types.ModuleType("launch_ros.actions")
    ros_actions.Node = type("Node", (_Recorded,), {})
    return {"launch": launch, "launch.actions": actions, "launch.event_handlers": handlers, "launch.events": events,
            "launch.events.process": process_events, "launch.substitutions": subs,
            "launch_ros": launch_ros, "launch_ros.actions": ros_actions}


def _expand(kind: str, monkeypatch: pytest.MonkeyPatch, **arguments: str) -> tuple[list[_Recorded], list[_Recorded]]:
    for name, module in _stand_ins().items():
        monkeypatch.setitem(sys.modules, name, module)
    desc = runpy.run_path(str(ROOT / "launch" / LAUNCH_FILES[kind]))["generate_launch_description"]()
    declared = [a for a in desc.args[0] if type(a).__name__ == "DeclareLaunchArgument"]
    opaque = [a for a in desc.args[0] if type(a).__name__ == "OpaqueFunction"]
    assert len(opaque) == 1
    context = _Context({a.args[0]: a.kwargs["default_value"] for a in declared} | arguments)
    actions = opaque[0].kwargs["function"](context)
    return declared, actions


def _exit_handlers(actions: list[_Recorded]) -> dict[str, Any]:
    """The OnProcessExit handler of each started node, by node name."""
    out = {}
    for action in actions:
        if type(action).__name__ == "RegisterEventHandler" and type(action.args[0]).__name__ == "OnProcessExit":
            handler = action.args[0]
            out[handler.kwargs["target_action"].kwargs["name"]] = handler.kwargs["on_exit"]
    return out


def _shutdown(actions: list[_Recorded]) -> None:
    """What launch does at shutdown: the registered OnShutdown handlers run."""
    for action in actions:
        if type(action).__name__ == "RegisterEventHandler" and type(action.args[0]).__name__ == "OnShutdown":
            action.args[0].kwargs["on_shutdown"]()


@pytest.mark.parametrize("kind", sorted(LAUNCH_FILES))
def test_launch_file_starts_what_the_runner_starts(kind: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv("AMENT_PREFIX_PATH", str(tmp_path / "no_ros"))  # no robot_state_publisher here
    declared, actions = _expand(kind, monkeypatch)
    try:
        assert {a.args[0] for a in declared} == set(LAUNCH_ARGUMENTS) | set(LAUNCH_ONLY_ARGUMENTS)
        defaults = {name: default for name, (default, _text) in LAUNCH_ARGUMENTS.items()}
        graph = build_graph(kind, config_from_arguments(defaults))
        sim_dirs = list(tmp_path.iterdir())
        assert len(sim_dirs) == (1 if kind == "sim" else 0)  # a sim session's own directory: pty links, FIFO
        if sim_dirs:
            graph = graph.in_sim_dir(sim_dirs[0])
            assert stat.S_ISFIFO(os.stat(graph.pedal_fifo).st_mode)
        runner = commands(graph, "/params")  # what `teleop-flywheel run` starts, in its order
        started = [a for a in actions if type(a).__name__ in ("ExecuteProcess", "Node")]
        names = [a.kwargs["name"] for a in started]
        assert names == list(runner)
        sims = {}
        for action in started:
            argv = runner[action.kwargs["name"]]
            if type(action).__name__ == "ExecuteProcess":  # a simulated arm: the same command line, own session
                assert action.kwargs["cmd"] == argv
                assert action.kwargs["prefix"] == f"{sys.executable} -m teleop_flywheel.ros.session.launch.detach"
                sims[action.kwargs["name"]] = action
                continue
            spec = graph.node(action.kwargs["name"])
            assert action.kwargs["package"] == "teleop_flywheel"
            assert action.kwargs["executable"] == spec.executable == argv[3]
            assert f"__node:={spec.name}" in argv
            assert action.kwargs["remappings"] == list(spec.remappings)
            assert action.kwargs["parameters"] == [spec.parameters]
            assert (
                action.kwargs["prefix"]
                == f"{sys.executable} -m teleop_flywheel.ros.session.launch.detach --same-session"
            )
            assert action.kwargs["exec_name"] == spec.name  # the console labels it so, not `[python3-N]`
        # Not on this machine: said once, nothing started for it.
        assert any(type(a).__name__ == "LogInfo" and "robot_state_publisher not started" in a.kwargs["msg"]
                   for a in actions)
        # Supervision as the supervisor's: a failing node ends the session, a clean stop does not;
        # an arm driver's exit stops its simulator (SIGTERM: the terminal's Ctrl-C never reaches it).
        handlers = _exit_handlers(actions)
        assert set(handlers) == {spec.name for spec in graph.nodes}
        running = _Context()
        for name, on_exit in handlers.items():
            failed = on_exit(types.SimpleNamespace(returncode=1), running)
            assert [type(e.kwargs["event"]).__name__ for e in failed][-1] == "Shutdown"
            assert name in failed[-1].kwargs["event"].kwargs["reason"]
            clean = on_exit(types.SimpleNamespace(returncode=0), running)
            assert all(type(e.kwargs["event"]).__name__ != "Shutdown" for e in clean)
            sim = sims.get("sim_" + graph.node(name).parameters.get("role", "")) if name.endswith("_arm") else None
            signals = [e.kwargs["event"] for e in clean if type(e.kwargs["event"]).__name__ == "SignalProcess"]
            if sim is None:
                assert signals == []
            else:
                assert [(s.kwargs["signal_number"], s.kwargs["process_matcher"]) for s in signals] == \
                    [(signal.SIGTERM, ("matches", sim))]
    finally:
        _shutdown(actions)
    assert list(tmp_path.iterdir()) == [], "the sim directory is removed at shutdown"


def test_sim_says_which_arguments_it_ignores_and_calibration_texts_match_defaults(
        monkeypatch: pytest.MonkeyPatch) -> None:
    for kind in LAUNCH_FILES:
        declared, _ = _expand(kind, monkeypatch, **({} if kind != "sim" else {}))
        texts = {a.args[0]: (a.kwargs["default_value"], a.kwargs["description"]) for a in declared}
        for role in ("leader", "follower"):
            default, text = texts[f"{role}_calibration"]
            assert default == "" and "empty (default)" in text
            assert ("_sim.yaml" in text) == (kind == "sim"), text
        for name in ("leader_port", "follower_port", "pedal_device"):
            assert texts[name][1].startswith("ignored by sim") == (kind == "sim"), (kind, name)
        assert ("sim keeps the names" in texts["cameras"][1]) == (kind == "sim")


def test_robot_state_publisher_per_arm_on_a_ros_install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """robot_state_publisher:=true (auto: when installed) adds, per arm, robot_state_publisher on the
    shipped URDF with the arm's frame prefix, in `<rig>/<role>` (it reads `<role>/joint_states`),
    and the world→base transform the Foxglove view uses; with namespace:=rig_a all under /rig_a."""
    from teleop_flywheel.core.kinematics import so101
    from teleop_flywheel.ros.session.foxglove.arms3d import BASE_OFFSETS

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    for namespace, prefix in (("", ""), ("rig_a", "rig_a/")):
        _declared, actions = _expand("rollout", monkeypatch, robot_state_publisher="true", namespace=namespace)
        nodes = [a for a in actions if type(a).__name__ == "Node"]
        ours = [a for a in nodes if a.kwargs["package"] == "teleop_flywheel"]
        assert all(a.kwargs.get("namespace", "") == ("/rig_a" if namespace else "") for a in ours)
        rsp = {a.kwargs["namespace"]: a for a in nodes if a.kwargs["package"] == "robot_state_publisher"}
        ns = "/rig_a" if namespace else ""
        assert set(rsp) == {f"{ns}/leader", f"{ns}/follower"}
        for role in ("leader", "follower"):
            (params,) = rsp[f"{ns}/{role}"].kwargs["parameters"]
            assert params == {"robot_description": so101().text, "frame_prefix": f"{prefix}{role}/"}
            (tf,) = [a for a in nodes if a.kwargs["name"] == f"{role}_base_tf"]
            args = tf.kwargs["arguments"]
            assert args[args.index("--child-frame-id") + 1] == f"{prefix}{role}/base_link"
            assert args[args.index("--frame-id") + 1] == "world"
            assert float(args[args.index("--y") + 1]) == BASE_OFFSETS[role][1]


def test_robot_state_publisher_publishes_the_view_s_transforms(tmp_path: Path) -> None:
    """On a ROS install: robot_state_publisher, started as the launch files start it, publishes on
    /tf the transforms `arms3d` computes for the same joint state."""
    pytest.importorskip("tf2_msgs", reason="tf2_msgs is not installable on this machine (no ROS 2 distro): "
                                           "robot_state_publisher's /tf is checked only on a ROS install")
    import shutil
    import subprocess
    import time

    import rclpy
    from sensor_msgs.msg import JointState
    from tf2_msgs.msg import TFMessage

    from teleop_flywheel.ros.session.foxglove.arms3d import arm_transforms
    from teleop_flywheel.ros.session.launch.launch_description import installed, state_publishers

    if not installed("robot_state_publisher") or shutil.which("ros2") is None:
        pytest.skip("robot_state_publisher or ros2 is not installed")
    (rsp, _tf) = state_publishers(build_graph("teleop"))[:2]
    params = tmp_path / "rsp.yaml"
    params.write_text(json.dumps({"/**": {"ros__parameters": rsp["parameters"][0]}}))
    proc = subprocess.Popen(["ros2", "run", "robot_state_publisher", "robot_state_publisher", "--ros-args",
                             "-r", f"__ns:={rsp['namespace']}", "--params-file", str(params)])
    rclpy.init()
    got: dict[str, Any] = {}
    try:
        node = rclpy.create_node("rsp_probe")
        node.create_subscription(
            TFMessage, "/tf", lambda m: got.update({t.child_frame_id: t for t in m.transforms}), 10
        )
        pub = node.create_publisher(JointState, "/leader/joint_states", 10)
        q = {"shoulder_pan": 0.5, "elbow_flex": -0.7}
        deadline = time.monotonic() + 30
        while "leader/tool_link" not in got and time.monotonic() < deadline:
            pub.publish(JointState(name=list(q), position=list(q.values())))
            rclpy.spin_once(node, timeout_sec=0.1)
        expected = {t.child: t for t in arm_transforms("leader", q)[1:]}
        for child, t in expected.items():
            if child in got:
                r = got[child].transform
                assert (r.translation.x, r.translation.y, r.translation.z) == pytest.approx(t.translation, abs=1e-6)
                assert (r.rotation.x, r.rotation.y, r.rotation.z, r.rotation.w) == pytest.approx(t.rotation, abs=1e-6)
        assert "leader/shoulder_link" in got
    finally:
        proc.terminate()
        proc.wait(10)
        rclpy.shutdown()


def test_detach_runs_the_command_in_place_and_it_dies_with_its_parent(tmp_path: Path) -> None:
    import subprocess
    import time

    out = subprocess.run([sys.executable, "-m", "teleop_flywheel.ros.session.launch.detach", "sh", "-c",
                          'echo "$$ $(ps -o sid= -p $$) $PPID"'], capture_output=True, text=True, timeout=30)
    pid, sid, ppid = (int(x) for x in out.stdout.split())
    assert pid == sid  # a session of its own: a terminal's Ctrl-C to the launch does not reach it
    assert ppid == os.getpid()  # exec'd in place: the process launch started is the command itself
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "teleop_flywheel.ros.session.launch.detach",
            "--same-session",
            "sh",
            "-c",
            'echo "$(ps -o sid= -p $$)"',
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert int(out.stdout) == os.getsid(0)  # --same-session: stays where a terminal's Ctrl-C reaches it
    # The parent dies (as `ros2 launch` does on SIGTERM, without stopping its processes): the child follows.
    pid_file = tmp_path / "pid"
    parent = subprocess.Popen([sys.executable, "-c", (
        "import subprocess, sys, time; "
        f"subprocess.Popen([sys.executable, '-m', 'teleop_flywheel.ros.session.launch.detach', '--same-session', "
        f"'sh', '-c', 'echo $$ > {pid_file}; exec sleep 60']); time.sleep(60)")])
    deadline = time.monotonic() + 30
    while not (pid_file.exists() and pid_file.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.05)
    child = int(pid_file.read_text())
    parent.kill()
    parent.wait()
    from support.procs import wait_gone

    assert wait_gone([child], 10) == []


def test_params_file_argument(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """`params_file:=F` reaches every node after the graph's own parameters (launch), and the
    runner merges the same file into the same parameters."""
    params = tmp_path / "params.yaml"
    params.write_text("/**:\n  ros__parameters:\n    rate_hz: 250.0\n"
                      "/teleop:\n  ros__parameters:\n    blend_duration_ms: 300.0\n"
                      "/policy:\n  ros__parameters:\n    rate_hz: 40.0\n")
    _declared, actions = _expand("teleop", monkeypatch, params_file=str(params))
    nodes = {a.kwargs["name"]: a for a in actions if type(a).__name__ == "Node"}
    graph = build_graph("teleop", config_from_arguments({"params_file": str(params)}))
    assert graph.params_files == (str(params),)
    merged = with_params_files(graph)
    assert merged.params_files == ()
    for spec in graph.nodes:
        assert nodes[spec.name].kwargs["parameters"] == [spec.parameters, str(params)]
        # rcl applies the file after the dict: the runner's merge gives the same values
        expected = {**spec.parameters, **load_param_file(params)["**"], **load_param_file(params).get(spec.name, {})}
        assert merged.node(spec.name).parameters == expected
    assert merged.node("teleop").parameters["blend_duration_ms"] == 300.0
    assert merged.node("leader_arm").parameters["rate_hz"] == 250.0
    # /policy is not in a teleop graph (ignored, as ROS ignores it); a name no graph has is an error
    typo = tmp_path / "typo.yaml"
    typo.write_text("/teleopp:\n  ros__parameters:\n    mode: teleop\n")
    with pytest.raises(ValueError, match="not in the teleop graph: teleopp"):
        with_params_files(graph, (typo,))


def test_task_argument_gives_the_recorder_the_spec_s_content_not_its_path(monkeypatch: pytest.MonkeyPatch,
                                                                         tmp_path: Path) -> None:
    """`task:=task.yaml` is read and checked when the graph is built (launch and runner alike); the
    recorder gets the canonical content, and no parameter names the file. A bad file stops the
    launch before any node starts, naming the file and the field."""
    from teleop_flywheel.core.errors import TaskSpecError
    from teleop_flywheel.core.task_spec import load_task_spec

    task = tmp_path / "task.yaml"
    task.write_text("instruction: Put the brick on the square.\nsuccess: {joints: {shoulder_pan: [0.2, 0.6]}}\n")
    _declared, actions = _expand("teleop", monkeypatch, task=str(task))
    nodes = {a.kwargs["name"]: a.kwargs["parameters"][0] for a in actions if type(a).__name__ == "Node"}
    graph = build_graph("teleop", config_from_arguments({"task": str(task)}))
    assert nodes["recorder"] == graph.node("recorder").parameters
    assert json.loads(nodes["recorder"]["task_spec"]) == load_task_spec(task).content
    assert nodes["recorder"]["task"] == ""  # the instruction stands unless the operator sets another
    assert not [(n, k) for n, params in nodes.items() for k, v in params.items() if str(task) in str(v)]
    assert "clock_probe" not in nodes["teleop"]  # the spec asks for none
    task.write_text("instruction: x\nclock_probe: {joint: wrist_flex, amplitude_rad: 0.1, duration_s: 0.3}\n")
    probed = build_graph("teleop", config_from_arguments({"task": str(task)})).node("teleop").parameters
    assert json.loads(probed["clock_probe"]) == {"joint": "wrist_flex", "amplitude_rad": 0.1, "duration_s": 0.3}
    task.write_text("instruction: x\nsuccess: {joints: {elbow: [0.2, 0.6]}}\n")
    with pytest.raises(TaskSpecError, match=rf"^{task}: field 'success.joints.elbow' names joint 'elbow'"):
        _expand("teleop", monkeypatch, task=str(task))


def test_every_executable_is_a_console_script() -> None:
    scripts = {ep.name: ep.value for ep in importlib.metadata.entry_points(group="console_scripts")
               if ep.value.startswith("teleop_flywheel.")}
    for exe, target in EXECUTABLES.items():
        assert exe in scripts, f"{exe} is not an installed console script"
        assert scripts[exe] == target.split(":")[0] + ":main"
    for kind in KINDS:
        for spec in build_graph(kind).nodes:
            assert spec.executable in scripts


def test_exec_node_runs_each_executables_main(capsys: pytest.CaptureFixture[str]) -> None:
    """The supervisor starts `python -m ...exec_node EXECUTABLE`: each executable's module has the
    console script's `main`; an unknown executable is a usage error."""
    pytest.importorskip("rclpy")
    from teleop_flywheel.ros.session.launch import exec_node

    for exe, target in EXECUTABLES.items():
        assert callable(getattr(importlib.import_module(target.split(":")[0]), "main", None)), exe
    assert exec_node.main(["nosuch"]) == 2 and "usage: exec_node" in capsys.readouterr().err


def test_launch_files_are_installed_by_setup() -> None:
    setup_text = (ROOT / "setup.py").read_text()
    assert 'glob("launch/*.launch.py")' in setup_text and 'glob("urdf/*.urdf")' in setup_text
    package = (ROOT / "package.xml").read_text()
    for dep in ("launch", "launch_ros", "robot_state_publisher", "tf2_ros"):
        assert f"<exec_depend>{dep}</exec_depend>" in package, dep
    assert set(LAUNCH_FILES.values()) <= {p.name for p in (ROOT / "launch").glob("*.launch.py")}


def test_with_real_launch_ros(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Under the real launch/launch_ros (where installed: a ROS install, or their sources in a
    scratch venv): each launch file's actions, with substitutions performed as `ros2 launch` does,
    start the runner's processes in its order: the simulators' exact command lines (after the
    detach prefix), each node's installed executable under its node name."""
    pytest.importorskip("launch_ros", reason="launch_ros is not installable on this machine (no ROS 2 distro)")
    from launch.actions import DeclareLaunchArgument, ExecuteProcess, OpaqueFunction
    from launch.utilities import perform_substitutions
    from launch_ros.actions import Node

    from launch import LaunchContext, LaunchDescription

    prefix = tmp_path / "install"  # an ament prefix holding the package's executables, as colcon installs them
    (prefix / "share" / "ament_index" / "resource_index" / "packages").mkdir(parents=True)
    (prefix / "share" / "ament_index" / "resource_index" / "packages" / "teleop_flywheel").write_text("")
    (prefix / "lib" / "teleop_flywheel").mkdir(parents=True)
    for exe in EXECUTABLES:
        (prefix / "lib" / "teleop_flywheel" / exe).write_text("#!/bin/sh\n")
        (prefix / "lib" / "teleop_flywheel" / exe).chmod(0o755)
    monkeypatch.setenv("AMENT_PREFIX_PATH", str(prefix))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    for kind, name in LAUNCH_FILES.items():
        desc = runpy.run_path(str(ROOT / "launch" / name))["generate_launch_description"]()
        assert isinstance(desc, LaunchDescription)
        context = LaunchContext()
        actions: list[Any] = []
        for entity in desc.entities:
            if isinstance(entity, DeclareLaunchArgument):
                context.launch_configurations[entity.name] = perform_substitutions(context, entity.default_value)
            elif isinstance(entity, OpaqueFunction):
                actions = list(entity.execute(context) or [])
        defaults = {n: context.launch_configurations[n] for n in LAUNCH_ARGUMENTS}
        graph = build_graph(kind, config_from_arguments(defaults))
        if graph.needs_sim_dir:
            (sim_dir,) = [p for p in tmp_path.iterdir() if p.name.startswith("teleop_flywheel_session_")]
            graph = graph.in_sim_dir(sim_dir)
        runner = commands(graph, "/params")
        started = []
        for action in actions:
            if isinstance(action, ExecuteProcess):
                node_name = ""
                if isinstance(action, Node):  # what Node.execute does before preparing its command
                    action._perform_substitutions(context)
                    node_name = action.node_name
                    namespace = action.expanded_node_namespace
                    context.extend_locals({"ros_specific_arguments": {
                        "name": f"__node:={node_name.rsplit('/', 1)[-1]}",
                        **({"ns": f"__ns:={namespace}"} if namespace not in ("", "/") else {})}})
                action.prepare(context)
                started.append((node_name or action.process_details["name"], action.process_details["cmd"]))
        assert len(started) == len(runner)
        for (label, cmd), (runner_name, argv) in zip(started, runner.items(), strict=True):
            if runner_name.startswith("sim_"):
                assert label.startswith(runner_name)
                assert cmd == [sys.executable, "-m", "teleop_flywheel.ros.session.launch.detach", *argv]
            else:
                spec = graph.node(runner_name)
                assert label.rsplit("/", 1)[-1] == spec.name, label  # launch_ros: "<unspecified ns>/name"
                assert cmd[:4] == [sys.executable, "-m", "teleop_flywheel.ros.session.launch.detach", "--same-session"]
                assert cmd[4] == str(prefix / "lib" / "teleop_flywheel" / spec.executable), (label, cmd)
                assert cmd[cmd.index("-r") + 1] == f"__node:={spec.name}"
        for p in tmp_path.iterdir():  # what launch's OnShutdown does: the session directory goes
            if p.name.startswith("teleop_flywheel_session_"):
                shutil.rmtree(p)


@pytest.mark.parametrize("kind", KINDS)
def test_every_recording_session_records_what_the_leader_rendered(kind: str) -> None:
    """The leader's rendered force feedback (`leader/feedback`) is on the record of every session that
    records: the dataset's complementary_info.feedback comes from it."""
    topics = build_graph(kind).node("recorder").parameters["topics"]
    assert "leader/feedback" in topics and "leader/joint_states" in topics
