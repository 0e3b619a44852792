"""Build a `launch` description from `graph.build_graph` — the body of every launch file.

Imported only by `launch/*.launch.py` on a real ROS 2 install; `launch` and `launch_ros`
are imported inside `generate`, so importing this module never needs them.
"""
from __future__ import annotations

import sys
from typing import Any

from teleop_flywheel.ros.session.graph import LAUNCH_ARGUMENTS, build_graph, config_from_arguments

PACKAGE = "teleop_flywheel"


def generate(kind: str) -> Any:
    """A LaunchDescription declaring LAUNCH_ARGUMENTS and starting the `kind` graph."""
    from launch.actions import DeclareLaunchArgument, ExecuteProcess, OpaqueFunction
    from launch.substitutions import LaunchConfiguration
    from launch_ros.actions import Node

    from launch import LaunchDescription

    def setup(context: Any) -> list[Any]:
        values = {name: LaunchConfiguration(name).perform(context) for name in LAUNCH_ARGUMENTS}
        graph = build_graph(kind, config_from_arguments(values))
        actions: list[Any] = [
            ExecuteProcess(cmd=arm.command(sys.executable), name=f"sim_{arm.role}", output="screen")
            for arm in graph.sim_arms
        ]
        actions += [
            Node(
                package=PACKAGE,
                executable=spec.executable,
                name=spec.name,
                parameters=[spec.parameters],
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
