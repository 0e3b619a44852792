"""Build a `launch` description from `graph.build_graph` — the body of every launch file.

Imported only by `launch/*.launch.py` on a real ROS 2 install; `launch` and `launch_ros`
are imported inside `generate`, so importing this module never needs them. What it starts is
what `teleop-flywheel run` starts (`supervisor.Session`), from the same graph: the simulated arms
and the pedal FIFO of a `sim` session (in a directory created here, removed at shutdown), then
one `launch_ros` Node per graph node with the graph's parameters, followed by the
`params_file` launch argument if given (later files win, as in the runner).
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
from typing import Any

from teleop_flywheel.ros.session.graph import LAUNCH_ARGUMENTS, build_graph, config_from_arguments

PACKAGE = "teleop_flywheel"


def generate(kind: str) -> Any:
    """A LaunchDescription declaring LAUNCH_ARGUMENTS and starting the `kind` graph."""
    from launch.actions import DeclareLaunchArgument, ExecuteProcess, OpaqueFunction, RegisterEventHandler
    from launch.event_handlers import OnShutdown
    from launch.substitutions import LaunchConfiguration
    from launch_ros.actions import Node

    from launch import LaunchDescription  # type: ignore[attr-defined]

    def setup(context: Any) -> list[Any]:
        values = {name: LaunchConfiguration(name).perform(context) for name in LAUNCH_ARGUMENTS}
        graph = build_graph(kind, config_from_arguments(values))
        actions: list[Any] = []
        if graph.needs_sim_dir:  # the session's own directory for pty links and the pedal FIFO
            sim_dir = tempfile.mkdtemp(prefix="teleop_flywheel_session_")
            graph = graph.in_sim_dir(sim_dir)
            actions.append(RegisterEventHandler(OnShutdown(
                on_shutdown=lambda *_args, **_kw: shutil.rmtree(sim_dir, ignore_errors=True))))
        if graph.pedal_fifo and not os.path.exists(graph.pedal_fifo):
            os.mkfifo(graph.pedal_fifo, 0o600)
        actions += [
            ExecuteProcess(cmd=arm.command(sys.executable), name=f"sim_{arm.role}", output="screen")
            for arm in graph.sim_arms
        ]
        actions += [
            Node(
                package=PACKAGE,
                executable=spec.executable,
                name=spec.name,
                parameters=[spec.parameters, *graph.params_files],
                remappings=list(spec.remappings),
                output="screen",
            )
            for spec in graph.nodes
        ]
        return actions

    declared = [
        DeclareLaunchArgument(name, default_value=default, description=text)
        for name, (default, text) in LAUNCH_ARGUMENTS.items()
    ]
    return LaunchDescription([*declared, OpaqueFunction(function=setup)])
