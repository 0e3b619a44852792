"""Build a `launch` description from `graph.build_graph` — the body of every launch file.

Imported only by `launch/*.launch.py` on a real ROS 2 install; `launch` and `launch_ros` are
imported inside `generate`, so importing this module never needs them. What it starts is what
`teleop-flywheel run` starts (`supervisor.Session`), from the same graph:

- a `sim` session's own directory (pty links, pedal FIFO; removed at shutdown) and the FIFO itself;
- the simulated arms (`sim_<role>`, the runner's command line), each through `detach` — its own
  session, as the supervisor starts it: a terminal's Ctrl-C goes to the nodes, not to the
  simulators; each simulator gets SIGTERM once its arm driver has exited (or from launch's own
  escalation timer), so no driver sees its bus vanish while it is still running;
- one `launch_ros` Node per graph node, in the rig's namespace, with the graph's parameters
  followed by the `params_file` argument (later files win, as in the runner); through
  `detach --same-session`: in the terminal's process group, but stopped (SIGTERM) if `ros2 launch`
  itself dies — launch exits on SIGTERM without stopping its processes — as the supervisor's
  children are;
- like the supervisor, a node that fails ends the session (`Shutdown`, with its name and exit).

Only on a ROS install that has them (`robot_state_publisher:=auto`, the default; `true` insists,
`false` never), and so not counted in the runner's process list: one `robot_state_publisher` per
arm (namespace `<rig>/<role>`: it reads `<role>/joint_states`, publishes
`<role>/robot_description`; `frame_prefix` `<role>/`) from the shipped URDF, and a
`static_transform_publisher` per arm placing its base in the `world` frame — the same tree the
Foxglove view computes (`arms3d`).
"""
from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
from typing import Any

from teleop_flywheel.core.kinematics import so101
from teleop_flywheel.ros.session.foxglove.arms3d import BASE_OFFSETS, ROLES, WORLD_FRAME, frame_prefix
from teleop_flywheel.ros.session.launch.graph import LAUNCH_ARGUMENTS, Graph, build_graph, config_from_arguments
from teleop_flywheel.ros.session.launch.supervisor import CLEAN_STOP, describe_exit

PACKAGE = "teleop_flywheel"
DETACH = "teleop_flywheel.ros.session.launch.detach"
STATE_PUBLISHER_ARG = "robot_state_publisher"
# Arguments of the launch files only (the runner has no robot_state_publisher to start).
LAUNCH_ONLY_ARGUMENTS: dict[str, tuple[str, str]] = {
    STATE_PUBLISHER_ARG: ("auto", "start robot_state_publisher (and a static world→base transform) per arm from "
                                  "urdf/so101.urdf: auto = when installed, true, false"),
}
# `sim` replaces these devices with its own: the arguments are accepted and ignored.
SIM_DESCRIPTIONS = {
    "leader_port": "ignored by sim: the simulated leader arm's pseudo-terminal is used",
    "follower_port": "ignored by sim: the simulated follower arm's pseudo-terminal is used",
    "pedal_device": "ignored by sim: the virtual pedal's FIFO in the session directory is used",
    "cameras": "comma-separated camera names (name:device); sim keeps the names and makes every camera synthetic",
    "leader_calibration": "leader calibration YAML; empty (default): the simulator's "
                          "config/calibration/leader_sim.yaml",
    "follower_calibration": "follower calibration YAML; empty (default): the simulator's "
    "config/calibration/follower_sim.yaml",
}
REAL_CALIBRATION = ("{role} calibration YAML, required for a real arm (make one with teleop-flywheel calibrate); "
                    "empty (default): none, so the {role} driver refuses to start and says how to make one")


def launch_arguments(kind: str) -> dict[str, tuple[str, str]]:
    """name -> (default, description) of every argument `kind`'s launch file declares."""
    out = dict(LAUNCH_ARGUMENTS)
    for role in ROLES:
        name = f"{role}_calibration"
        if name in out:
            out[name] = (out[name][0], REAL_CALIBRATION.format(role=role))
    if kind == "sim":
        out.update({name: (out[name][0], text) for name, text in SIM_DESCRIPTIONS.items() if name in out})
    out.update(LAUNCH_ONLY_ARGUMENTS)
    return out


def installed(package: str) -> bool:
    """Is a ROS package in the ament index (AMENT_PREFIX_PATH)?"""
    for prefix in filter(None, os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep)):
        if os.path.isfile(os.path.join(prefix, "share", "ament_index", "resource_index", "packages", package)):
            return True
    return False


def wants_state_publishers(value: str) -> bool:
    choice = value.strip().lower()
    if choice not in ("auto", "true", "false"):
        raise ValueError(f"{STATE_PUBLISHER_ARG}:={value}: expected auto, true or false")
    if choice == "auto":
        return installed("robot_state_publisher") and installed("tf2_ros")
    return choice == "true"


def state_publishers(graph: Graph) -> list[dict[str, Any]]:
    """launch_ros Node keyword arguments of the per-arm robot_state_publisher and world→base transform."""
    namespace = next((n.namespace for n in graph.nodes), "")
    out: list[dict[str, Any]] = []
    for role in ROLES:
        if not any(n.name == f"{role}_arm" for n in graph.nodes):
            continue
        prefix = frame_prefix(role, namespace)
        out.append({"package": "robot_state_publisher", "executable": "robot_state_publisher",
                    "name": "robot_state_publisher", "namespace": f"{namespace}/{role}",
                    "parameters": [{"robot_description": so101().text, "frame_prefix": prefix}], "output": "screen"})
        x, y, z = BASE_OFFSETS[role]
        out.append({"package": "tf2_ros", "executable": "static_transform_publisher", "name": f"{role}_base_tf",
                    **({"namespace": namespace} if namespace else {}),
                    "arguments": ["--x", str(x), "--y", str(y), "--z", str(z), "--frame-id", WORLD_FRAME,
                                  "--child-frame-id", prefix + so101().root],
                    "output": "screen"})
    return out


def generate(kind: str) -> Any:
    """A LaunchDescription declaring `launch_arguments(kind)` and starting the `kind` graph."""
    from launch.actions import (
        DeclareLaunchArgument,
        EmitEvent,
        ExecuteProcess,
        LogInfo,
        OpaqueFunction,
        RegisterEventHandler,
    )
    from launch.event_handlers import OnProcessExit, OnShutdown
    from launch.events import Shutdown
    from launch.events.process import SignalProcess
    from launch.substitutions import LaunchConfiguration
    from launch_ros.actions import Node

    from launch import LaunchDescription  # type: ignore[attr-defined]

    def setup(context: Any) -> list[Any]:
        values = {name: LaunchConfiguration(name).perform(context) for name in LAUNCH_ARGUMENTS}
        graph = build_graph(kind, config_from_arguments(values))
        with_state_publishers = wants_state_publishers(LaunchConfiguration(STATE_PUBLISHER_ARG).perform(context))
        actions: list[Any] = []
        if graph.needs_sim_dir:  # the session's own directory for pty links and the pedal FIFO
            sim_dir = tempfile.mkdtemp(prefix="teleop_flywheel_session_")
            graph = graph.in_sim_dir(sim_dir)
            actions.append(RegisterEventHandler(OnShutdown(
                on_shutdown=lambda *_args, **_kw: shutil.rmtree(sim_dir, ignore_errors=True))))
        if graph.pedal_fifo and not os.path.exists(graph.pedal_fifo):
            os.mkfifo(graph.pedal_fifo, 0o600)
        sims = {arm.role: ExecuteProcess(cmd=arm.command(sys.executable), name=f"sim_{arm.role}", output="screen",
                                         prefix=f"{sys.executable} -m {DETACH}")
                for arm in graph.sim_arms}
        # exec_name labels each process in the console by its node: started through `detach`, every
        # one would otherwise be `[python3-N]`.
        nodes = [Node(package=PACKAGE, executable=spec.executable, name=spec.name, exec_name=spec.name,
                      parameters=[spec.parameters, *graph.params_files], remappings=list(spec.remappings),
                      **({"namespace": spec.namespace} if spec.namespace else {}), output="screen",
                      prefix=f"{sys.executable} -m {DETACH} --same-session")
                 for spec in graph.nodes]
        actions += [*sims.values(), *nodes]
        for spec, node in zip(graph.nodes, nodes, strict=True):
            sim = sims.get(spec.parameters.get("role", "")) if spec.executable == "arm_driver" else None
            actions.append(RegisterEventHandler(OnProcessExit(target_action=node, on_exit=_on_node_exit(
                spec.name, sim, EmitEvent, Shutdown, SignalProcess))))
        if with_state_publishers:
            actions += [Node(**kwargs) for kwargs in state_publishers(graph)]
        else:
            actions.append(LogInfo(msg="robot_state_publisher not started (robot_state_publisher:="
                                       f"{LaunchConfiguration(STATE_PUBLISHER_ARG).perform(context)}; "
                                       "needs robot_state_publisher and tf2_ros)"))
        return actions

    declared = [DeclareLaunchArgument(name, default_value=default, description=text)
                for name, (default, text) in launch_arguments(kind).items()]
    return LaunchDescription([*declared, OpaqueFunction(function=setup)])


def _on_node_exit(name: str, sim: Any, emit: Any, shutdown: Any, signal_process: Any) -> Any:
    """What launch does when node `name` exits: stop its simulator (an arm driver's); and if the
    node failed (an exit code other than a clean stop's) while the session was running, end the
    session, as the supervisor does. A clean exit is the Ctrl-C every node got from the terminal:
    launch's own SIGINT handling stops the rest (and, being interactive, sends no second SIGINT)."""
    from launch.events import matches_action

    def on_exit(event: Any, context: Any) -> list[Any]:
        actions = []
        if sim is not None:
            actions.append(emit(event=signal_process(signal_number=signal.SIGTERM,
                                                     process_matcher=matches_action(sim))))
        if not context.is_shutdown and event.returncode not in CLEAN_STOP:
            actions.append(emit(event=shutdown(reason=f"{name} exited: {describe_exit(event.returncode)}")))
        return actions

    return on_exit
