"""Launch files are thin declarations over graph.build_graph.

`launch`/`launch_ros` cannot be installed here, so the launch files are executed against
recording stand-ins for those two APIs (constructor calls are captured, nothing else), and
what they would start is compared with the processes the session supervisor (`teleop-flywheel
run`) starts for the same graph. Where the real `launch_ros` is installed, the last test builds
the description with it for real.
"""
from __future__ import annotations

import importlib.metadata
import os
import runpy
import stat
import sys
import tempfile
import types
from pathlib import Path
from typing import Any

import pytest

from teleop_flywheel.ros.session.graph import (
    EXECUTABLES,
    KINDS,
    LAUNCH_ARGUMENTS,
    build_graph,
    config_from_arguments,
    load_param_file,
    with_params_files,
)
from teleop_flywheel.ros.session.supervisor import commands

ROOT = Path(__file__).resolve().parent.parent
LAUNCH_FILES = {"teleop": "teleop.launch.py", "rollout": "rollout.launch.py", "sim": "sim.launch.py"}


class _Recorded:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.args, self.kwargs = args, kwargs


class _LaunchConfiguration:
    def __init__(self, name: str) -> None:
        self.name = name

    def perform(self, context: dict[str, str]) -> str:
        return context[self.name]


def _stand_ins() -> dict[str, types.ModuleType]:
    launch = types.ModuleType("launch")
    launch.LaunchDescription = type("LaunchDescription", (_Recorded,), {})
    actions = types.ModuleType("launch.actions")
    for name in ("DeclareLaunchArgument", "ExecuteProcess", "OpaqueFunction", "RegisterEventHandler"):
        setattr(actions, name, type(name, (_Recorded,), {}))
    handlers = types.ModuleType("launch.event_handlers")
    handlers.OnShutdown = type("OnShutdown", (_Recorded,), {})
    subs = types.ModuleType("launch.substitutions")
    subs.LaunchConfiguration = _LaunchConfiguration
    launch_ros = types.ModuleType("launch_ros")
    ros_actions = types.ModuleType("launch_ros.actions")
    ros_actions.Node = type("Node", (_Recorded,), {})
    return {"launch": launch, "launch.actions": actions, "launch.event_handlers": handlers, "launch.substitutions": subs,
            "launch_ros": launch_ros, "launch_ros.actions": ros_actions}


def _expand(kind: str, monkeypatch: pytest.MonkeyPatch, **arguments: str) -> tuple[list[_Recorded], list[_Recorded]]:
    for name, module in _stand_ins().items():
        monkeypatch.setitem(sys.modules, name, module)
    desc = runpy.run_path(str(ROOT / "launch" / LAUNCH_FILES[kind]))["generate_launch_description"]()
    declared = [a for a in desc.args[0] if type(a).__name__ == "DeclareLaunchArgument"]
    opaque = [a for a in desc.args[0] if type(a).__name__ == "OpaqueFunction"]
    assert len(opaque) == 1
    context = {a.args[0]: a.kwargs["default_value"] for a in declared} | arguments
    actions = opaque[0].kwargs["function"](context)
    return declared, actions


def _shutdown(actions: list[_Recorded]) -> None:
    """What launch does at shutdown: the registered OnShutdown handlers run."""
    for action in actions:
        if type(action).__name__ == "RegisterEventHandler":
            action.args[0].kwargs["on_shutdown"]()


@pytest.mark.parametrize("kind", sorted(LAUNCH_FILES))
def test_launch_file_starts_what_the_runner_starts(kind: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    declared, actions = _expand(kind, monkeypatch)
    try:
        assert {a.args[0] for a in declared} == set(LAUNCH_ARGUMENTS)
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
        for action in started:
            argv = runner[action.kwargs["name"]]
            if type(action).__name__ == "ExecuteProcess":  # a simulated arm: the same command line
                assert action.kwargs["cmd"] == argv
                continue
            spec = graph.node(action.kwargs["name"])
            assert action.kwargs["package"] == "teleop_flywheel"
            assert action.kwargs["executable"] == spec.executable == argv[3]
            assert f"__node:={spec.name}" in argv
            assert action.kwargs["remappings"] == list(spec.remappings)
            assert action.kwargs["parameters"] == [spec.parameters]
    finally:
        _shutdown(actions)
    assert list(tmp_path.iterdir()) == [], "the sim directory is removed at shutdown"


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
    from teleop_flywheel.ros.session import exec_node

    for exe, target in EXECUTABLES.items():
        assert callable(getattr(importlib.import_module(target.split(":")[0]), "main", None)), exe
    assert exec_node.main(["nosuch"]) == 2 and "usage: exec_node" in capsys.readouterr().err


def test_launch_files_are_installed_by_setup() -> None:
    setup_text = (ROOT / "setup.py").read_text()
    assert 'glob("launch/*.launch.py")' in setup_text
    assert set(LAUNCH_FILES.values()) <= {p.name for p in (ROOT / "launch").glob("*.launch.py")}


def test_with_real_launch_ros() -> None:
    pytest.importorskip("launch_ros", reason="launch_ros is not installable on this machine (no ROS 2 distro)")
    from launch import LaunchDescription

    for name in LAUNCH_FILES.values():
        desc = runpy.run_path(str(ROOT / "launch" / name))["generate_launch_description"]()
        assert isinstance(desc, LaunchDescription)
