"""One description of each session's node graph, used by launch files and by the runner.

`ros2 launch teleop_flywheel teleop.launch.py` (real ROS 2 installs) and
`teleop-flywheel run teleop` (the project's supervisor, `supervisor.py`) both call `build_graph`,
so what runs is the same set of processes, parameters and remappings either way: one process
per node, plus the simulated arms of a `sim` session. No ROS imports and no side effects here:
a `sim` graph's pseudo-terminal links and pedal FIFO live in a directory the *session* creates
(`Graph.in_sim_dir`) and removes when it stops.

Session kinds:
- `teleop`: leader + follower arm drivers and the teleop node in `teleop` mode (human only);
- `rollout`: the same with a policy node, the pedal, and the teleop node in `policy` mode;
- `record`: cameras + recorder (teleop and rollout include it unless `record=False`);
- `sim`: rollout + record on simulated hardware: two simulated arms on pseudo-terminals,
  synthetic cameras, a virtual pedal (a FIFO fed with real `input_event` records).

`ingest` (launch argument `ingest:=true`, any kind that records) adds the `ingest` node: it keeps
a dataset current from the session's own episodes (`ros/nodes/ingest.py`), at low priority. Its
dataset (`ingest_dataset`, default `<output_dir>/dataset`) must lie inside `output_dir`: nothing in
the graph names a path outside the session's own folder.

`task` (launch argument `task:=task.yaml`, `core/task_spec.py`) is read and checked here, so a bad
file stops the session before any node starts (one line naming the file and the field); the
recorder gets the spec's canonical content (`task_spec`), not the path.

`namespace` (launch argument `namespace:=rig_a`) puts every node of the graph, and with it every
rig topic and service (`core/topics.py` names are relative), under `/rig_a`: two rigs run in one
ROS domain and record separately. `/diagnostics` stays global.

`metrics` (launch argument `metrics:=127.0.0.1:9464`, the default) adds the `metrics` node to every
kind: the session's Prometheus endpoint (`ros/nodes/metrics.py`, docs/fleet.md), on loopback unless
a LAN address is given; `metrics:=off` (or empty) leaves it out. Two rigs on one machine need a
port each.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from teleop_flywheel.core.calibration import sim_calibration_file
from teleop_flywheel.core.errors import yaml_problem
from teleop_flywheel.core.task_spec import load_task_spec
from teleop_flywheel.core.topics import (
    AUTHORITY,
    DIAGNOSTICS,
    FOLLOWER_COMMAND,
    FOLLOWER_STATE,
    INTERVENTION,
    LEADER_FEEDBACK,
    LEADER_STATE,
    PEDAL_JOY,
    POLICY_COMMAND,
    POLICY_INFERENCE,
    camera_image,
    normalize_namespace,
)
from teleop_flywheel.fleet.endpoint import DEFAULT_ADDRESS, parse_address
from teleop_flywheel.recording.recorder.output_layout import SESSION_DATASET, dataset_in
from teleop_flywheel.ros.errors import ParamFileError

KINDS = ("teleop", "rollout", "record", "sim")

# console script -> "module:Class" of the node it runs (the runner instantiates the class).
EXECUTABLES: dict[str, str] = {
    "arm_driver": "teleop_flywheel.ros.nodes.arm_driver:ArmDriverNode",
    "teleop": "teleop_flywheel.ros.nodes.teleop:TeleopNode",
    "pedal": "teleop_flywheel.ros.nodes.pedal:PedalNode",
    "policy": "teleop_flywheel.ros.nodes.policy:PolicyNode",
    "camera": "teleop_flywheel.ros.nodes.camera:CameraNode",
    "recorder": "teleop_flywheel.ros.nodes.recorder:RecorderNode",
    "ingest": "teleop_flywheel.ros.nodes.ingest:IngestNode",
    "metrics": "teleop_flywheel.ros.nodes.metrics:MetricsNode",
}


@dataclass(frozen=True)
class NodeSpec:
    """One node: which console script, its name, parameters and topic remappings."""

    executable: str
    name: str
    parameters: dict[str, Any] = field(default_factory=dict)
    remappings: tuple[tuple[str, str], ...] = ()
    namespace: str = ""  # "/rig_a" (fully qualified) or "" for the root namespace

    def __post_init__(self) -> None:
        if self.executable not in EXECUTABLES:
            raise ValueError(f"node {self.name}: unknown executable {self.executable!r}")

    @property
    def fully_qualified_name(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def target(self) -> str:
        return EXECUTABLES[self.executable]


@dataclass(frozen=True)
class SimArmSpec:
    """A simulated arm the session must start before its driver: `sim-bus --arm ROLE --link LINK`."""

    role: str
    link: str
    faults: tuple[str, ...] = ()
    grip_object: float | None = None  # shaft steps where an object between the jaws stalls the gripper
    world: str = ""  # the simulated world's file (sim-bus --world): what an evaluation condition varies
    hand: bool = False  # a leader's trigger held by the scripted human's yielding finger (sim-bus --hand)

    def command(self, python: str) -> list[str]:
        cmd = [python, "-m", "teleop_flywheel.cli", "sim-bus", "--arm", self.role, "--link", self.link]
        if self.world:
            cmd += ["--world", self.world]
        for fault in self.faults:
            cmd += ["--fault", fault]
        if self.grip_object is not None:
            cmd += ["--grip-object", f"{self.grip_object:g}"]
        if self.hand:
            cmd.append("--hand")
        return cmd


@dataclass(frozen=True)
class CameraSpec:
    name: str
    source: str = "v4l2"
    device: str = "/dev/video0"
    width: int = 640
    height: int = 480
    fps: float = 30.0


SIM_GRIP_OBJECT = 2750.0
SIM_FOLLOWER_WORLD = "follower_world.json"  # in the sim dir: the follower simulator's world file

# Stands for the directory a session creates for a `sim` graph's pty links and pedal FIFO
# (`Graph.in_sim_dir` puts the real one in): build_graph itself creates nothing.
SIM_DIR = "{session_sim_dir}"


def _in_dir(value: Any, path: str) -> Any:
    if isinstance(value, str):
        return value.replace(SIM_DIR, path)
    if isinstance(value, list):
        return [_in_dir(v, path) for v in value]
    return value


@dataclass(frozen=True)
class Graph:
    kind: str
    nodes: tuple[NodeSpec, ...]
    sim_arms: tuple[SimArmSpec, ...] = ()
    pedal_fifo: str = ""
    params_files: tuple[str, ...] = ()  # the `params_file` launch argument: applied after the graph's own

    def node(self, name: str) -> NodeSpec:
        for spec in self.nodes:
            if spec.name == name:
                return spec
        raise KeyError(f"{self.kind} graph has no node {name!r}")

    @property
    def needs_sim_dir(self) -> bool:
        """True until `in_sim_dir` has placed the simulated hardware's paths in a real directory."""
        return any(SIM_DIR in a.link for a in self.sim_arms) or SIM_DIR in self.pedal_fifo

    def in_sim_dir(self, path: str | os.PathLike[str]) -> Graph:
        """This graph with its simulated hardware's paths (pty links, pedal FIFO) under `path`."""
        where = str(path)
        return replace(
            self,
            nodes=tuple(replace(n, parameters={k: _in_dir(v, where) for k, v in n.parameters.items()})
                        for n in self.nodes),
            sim_arms=tuple(replace(a, link=_in_dir(a.link, where), world=_in_dir(a.world, where))
                           for a in self.sim_arms),
            pedal_fifo=_in_dir(self.pedal_fifo, where),
        )


@dataclass(frozen=True)
class SessionConfig:
    """Everything a user chooses when starting a session (= the launch arguments)."""

    leader_port: str = "/dev/so101_leader"
    follower_port: str = "/dev/so101_follower"
    leader_calibration: str = ""
    follower_calibration: str = ""
    cameras: tuple[CameraSpec, ...] = (CameraSpec("front", device="/dev/video0"),)
    pedal_device: str = "/dev/input/by-id/usb-foot-pedal-event-kbd"
    policy: str = "scripted"
    scripted_on_real: bool = False  # the scripted policy may drive a real follower (asked for on purpose)
    policy_args: str = ""
    checkpoint_id: str = ""  # empty = the policy's own id (scripted-v0, replay:<episode>, lerobot:<dir>:<hash>)
    output_dir: str = str(Path.home() / "teleop_flywheel" / "bags")
    arm_rate_hz: float = 200.0
    teleop_rate_hz: float = 200.0
    blend_duration_ms: float = 150.0
    task: str = ""  # the episodes' task text (empty: the task spec's instruction, if one is given)
    task_spec: str = ""  # the `task` launch argument: a task spec YAML, loaded and checked by build_graph
    operator: str = ""
    record: bool = True
    sim_dir: str = ""  # empty: the session creates one (SIM_DIR in the graph until then)
    params_file: str = ""
    namespace: str = ""  # the rig's ROS namespace (`rig_a`); empty = the root namespace
    ingest: bool = False  # the `ingest` node keeps a dataset current from the session's episodes
    ingest_dataset: str = ""  # its dataset, inside output_dir (relative to it); empty = <output_dir>/dataset
    metrics: str = DEFAULT_ADDRESS  # HOST:PORT of the session's Prometheus endpoint; empty or off = no metrics node

    def with_sim_calibrations(self) -> SessionConfig:
        """Simulated arms default to the shipped simulator calibrations; a real arm has no default
        (its driver refuses to start without a calibration of its own, saying how to make one)."""
        return replace(
            self,
            leader_calibration=self.leader_calibration or str(sim_calibration_file("leader")),
            follower_calibration=self.follower_calibration or str(sim_calibration_file("follower")),
        )


# Launch arguments: name -> (default as string, description). Launch files declare exactly these.
LAUNCH_ARGUMENTS: dict[str, tuple[str, str]] = {
    "leader_port": (SessionConfig.leader_port, "serial port of the leader arm"),
    "follower_port": (SessionConfig.follower_port, "serial port of the follower arm"),
    "leader_calibration": (
        "",
        "leader calibration YAML: required for a real arm (teleop-flywheel calibrate); "
        "sim: config/calibration/leader_sim.yaml",
    ),
    "follower_calibration": (
        "",
        "follower calibration YAML: required for a real arm (teleop-flywheel calibrate); "
        "sim: config/calibration/follower_sim.yaml",
    ),
    "cameras": ("front:/dev/video0", "comma-separated name:device (or name:synthetic)"),
    "pedal_device": (SessionConfig.pedal_device, "foot pedal evdev device (path, by-id or name)"),
    "policy": (
        SessionConfig.policy,
        "policy: scripted (simulated arms only, unless scripted_on_real), replay or "
        "a teleop_flywheel.policies plugin such as lerobot",
    ),
    "scripted_on_real": ("false", "let the scripted policy (hard-coded waypoints) drive a real follower"),
    "policy_args": ("", "policy arguments (e.g. a bag path for replay, a checkpoint dir)"),
    "checkpoint_id": (
        SessionConfig.checkpoint_id,
        "checkpoint id tagged on every policy command (empty: the policy's own)",
    ),
    "output_dir": (SessionConfig.output_dir, "where episode bags are written"),
    "task": (
        "",
        "task spec YAML (docs/task_spec.md), checked before anything starts: its content and id go "
        "in every episode's metadata, its instruction is the task text, the console shows its start "
        "region and its success predicate judged at stop",
    ),
    "record": ("true", "start cameras + recorder too"),
    "ingest": (
        "false",
        "start ingest too: every episode closed, judged and kept (or 30 s after its verdict "
        "without a discard) is validated, then quarantined (<output_dir>/quarantine) or appended to "
        "ingest_dataset, at low priority",
    ),
    "ingest_dataset": (
        "",
        f"the dataset ingest keeps current: a path inside output_dir (relative to it); empty: "
        f"<output_dir>/{SESSION_DATASET}",
    ),
    "namespace": (
        "",
        "ROS namespace of the whole rig (e.g. rig_a): every node, topic and service under it, so "
        "two rigs share a ROS domain and record separately (/diagnostics stays global)",
    ),
    "metrics": (
        DEFAULT_ADDRESS,
        "HOST:PORT of the session's Prometheus metrics (/metrics, docs/fleet.md); loopback by default, a LAN "
        "address exposes them; each rig on one machine needs its own port; empty or off: no metrics node",
    ),
    "params_file": (
        "",
        "ROS 2 parameter YAML applied to every node after the session's own parameters "
        "(e.g. config/params.yaml; `/**:` or `/<node>:` with `ros__parameters:`)",
    ),
}


def parse_cameras(text: str) -> tuple[CameraSpec, ...]:
    """`front:/dev/video0,wrist:synthetic` -> camera specs."""
    cams = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, _, device = item.partition(":")
        if not name or not device:
            raise ValueError(f"camera {item!r}: expected name:device or name:synthetic")
        cams.append(CameraSpec(name, source="synthetic" if device == "synthetic" else "v4l2", device=device))
    return tuple(cams)


def config_from_arguments(values: dict[str, str]) -> SessionConfig:
    """A SessionConfig from launch-argument strings (unknown keys are an error)."""
    unknown = set(values) - set(LAUNCH_ARGUMENTS)
    if unknown:
        raise ValueError(f"unknown session arguments: {', '.join(sorted(unknown))}")
    flags = ("record", "scripted_on_real", "ingest")
    kwargs: dict[str, Any] = {k: v for k, v in values.items() if k not in ("cameras", "task", *flags)}
    if values.get("task", "").strip():  # the argument names the spec file; SessionConfig.task is the text
        kwargs["task_spec"] = values["task"].strip()
    if "cameras" in values:
        kwargs["cameras"] = parse_cameras(values["cameras"])
    for flag in flags:
        if flag in values:
            kwargs[flag] = values[flag].strip().lower() in ("1", "true", "yes", "on")
    return SessionConfig(**kwargs)


def _arm(role: str, port: str, calibration: str, rate_hz: float, simulated: bool) -> NodeSpec:
    params: dict[str, Any] = {"port": port, "role": role, "calibration_file": calibration, "rate_hz": rate_hz}
    if simulated:  # the session started this port's simulator: simulator calibrations allowed
        params["simulated"] = True
    return NodeSpec("arm_driver", f"{role}_arm", params)


def _record_nodes(cfg: SessionConfig, kind: str) -> list[NodeSpec]:
    nodes = [
        NodeSpec("camera", f"camera_{cam.name}", {
            "name": cam.name, "source": cam.source, "device": cam.device,
            "width": cam.width, "height": cam.height, "fps": cam.fps,
        })
        for cam in cfg.cameras
    ]
    topics = [
        LEADER_STATE, LEADER_FEEDBACK, FOLLOWER_STATE, FOLLOWER_COMMAND,
        POLICY_COMMAND, POLICY_INFERENCE, AUTHORITY, INTERVENTION, PEDAL_JOY, DIAGNOSTICS,
    ] + [camera_image(cam.name) for cam in cfg.cameras]
    recorder: dict[str, Any] = {
        "output_dir": cfg.output_dir, "topics": topics, "task": cfg.task, "operator": cfg.operator,
        "session_kind": kind,
    }
    # Lists only when not empty (a parameter file cannot hold an empty list; the defaults are empty).
    if cfg.cameras:
        recorder["cameras"] = [cam.name for cam in cfg.cameras]
    if cfg.task_spec:  # its content, not its path: no parameter names a file outside the session's folder
        recorder["task_spec"] = json.dumps(dict(load_task_spec(cfg.task_spec).content), sort_keys=True)
    calibrations = [f"{role}={path}" for role, path in (("leader", cfg.leader_calibration),
                                                          ("follower", cfg.follower_calibration)) if path]
    if calibrations:  # keyed by role in the episode metadata
        recorder["calibration_files"] = calibrations
    nodes.append(NodeSpec("recorder", "recorder", recorder))
    return nodes


def _ingest_node(cfg: SessionConfig) -> NodeSpec:
    """The `ingest` node on the session's output_dir; ValueError for a dataset outside it."""
    if not cfg.record:
        raise ValueError("ingest:=true needs the recorder (record:=true): it ingests the session's own episodes")
    dataset = cfg.ingest_dataset.strip() or SESSION_DATASET
    dataset_in(cfg.output_dir, dataset)
    return NodeSpec("ingest", "ingest", {"watch_dir": cfg.output_dir, "dataset": dataset})


def _metrics_node(cfg: SessionConfig) -> list[NodeSpec]:
    """The session's metrics exporter, unless `metrics` is off; ValueError for an address that is not HOST:PORT."""
    if parse_address(cfg.metrics) is None:
        return []
    return [NodeSpec("metrics", "metrics", {"address": cfg.metrics.strip(), "output_dir": cfg.output_dir})]


def build_graph(kind: str, cfg: SessionConfig | None = None) -> Graph:
    """The node graph of a session kind."""
    if kind not in KINDS:
        raise ValueError(f"unknown session kind {kind!r}; expected one of {', '.join(KINDS)}")
    cfg = cfg or SessionConfig()
    namespace = normalize_namespace(cfg.namespace)  # ValueError naming a bad one
    sim_arms: tuple[SimArmSpec, ...] = ()
    pedal_fifo = ""
    params_files = (cfg.params_file,) if cfg.params_file else ()
    if kind == "sim":
        sim_dir = cfg.sim_dir or SIM_DIR
        # The follower's gripper closes on an object at its lowest scripted waypoint: the effort
        # stream shows the squeeze.
        sim_arms = (SimArmSpec("leader", f"{sim_dir}/leader"),
                    SimArmSpec("follower", f"{sim_dir}/follower", grip_object=SIM_GRIP_OBJECT,
                               world=f"{sim_dir}/{SIM_FOLLOWER_WORLD}"))
        pedal_fifo = f"{sim_dir}/pedal"
        cfg = replace(
            cfg.with_sim_calibrations(),
            leader_port=sim_arms[0].link,
            follower_port=sim_arms[1].link,
            pedal_device=pedal_fifo,
            cameras=tuple(replace(cam, source="synthetic", device="synthetic") for cam in cfg.cameras),
        )
    extra = ([_ingest_node(cfg)] if cfg.ingest else []) + _metrics_node(cfg)
    if kind == "record":
        return Graph(kind, _in_namespace(_record_nodes(cfg, kind) + extra, namespace), params_files=params_files)

    human_only = kind == "teleop"
    teleop: dict[str, Any] = {
        "mode": "teleop" if human_only else "policy",
        "blend_duration_ms": cfg.blend_duration_ms,
        "rate_hz": cfg.teleop_rate_hz,
        # the drivers' calibrations: the follower's range limits commands, the grippers map 0-100
        "leader_calibration_file": cfg.leader_calibration,
        "follower_calibration_file": cfg.follower_calibration,
    }
    probe = load_task_spec(cfg.task_spec).clock_probe if cfg.task_spec else None
    if probe is not None:  # played in teleop mode when an episode starts (a policy plays its own)
        teleop["clock_probe"] = json.dumps(asdict(probe), sort_keys=True)
    nodes = [
        _arm("leader", cfg.leader_port, cfg.leader_calibration, cfg.arm_rate_hz, kind == "sim"),
        _arm("follower", cfg.follower_port, cfg.follower_calibration, cfg.arm_rate_hz, kind == "sim"),
        NodeSpec("teleop", "teleop", teleop),
    ]
    if not human_only:
        policy: dict[str, Any] = {"policy": cfg.policy, "policy_args": cfg.policy_args,
                                   "checkpoint_id": cfg.checkpoint_id}
        if kind == "sim":  # the follower is a simulator this session started (the scripted policy may drive it)
            policy["simulated"] = True
        if cfg.scripted_on_real:
            policy["scripted_on_real"] = True
        nodes.append(NodeSpec("policy", "policy", policy))
        nodes.append(NodeSpec("pedal", "pedal", {"device": cfg.pedal_device}))
    if cfg.record:
        nodes += _record_nodes(cfg, kind)
    nodes += extra
    return Graph(kind, _in_namespace(nodes, namespace), sim_arms, pedal_fifo, params_files)


def _in_namespace(nodes: list[NodeSpec], namespace: str) -> tuple[NodeSpec, ...]:
    return tuple(replace(n, namespace=namespace) for n in nodes)


def load_param_file(path: str | os.PathLike[str]) -> dict[str, dict[str, Any]]:
    """A ROS 2 parameter YAML (`node: {ros__parameters: {...}}`) as {node_name: params}."""
    import yaml

    p = Path(path)
    try:
        data = yaml.safe_load(p.read_text()) or {}
    except OSError as exc:
        raise ParamFileError(f"{p}: cannot read parameter file ({exc.strerror})") from exc
    except yaml.YAMLError as exc:
        raise ParamFileError(f"{p}: not valid YAML ({yaml_problem(exc)})") from exc
    if not isinstance(data, dict):
        raise ParamFileError(f"{p}: expected a mapping of node names to ros__parameters")
    out: dict[str, dict[str, Any]] = {}
    for node, body in data.items():
        params = (body or {}).get("ros__parameters") if isinstance(body, dict) else None
        if not isinstance(params, dict):
            raise ParamFileError(f"{p}: node {node!r} has no ros__parameters mapping")
        out[str(node).lstrip("/")] = params
    return out


def _known_anywhere(name: str) -> bool:
    """A node of some session kind's graph (a parameter file shared between kinds may name it)."""
    if name.startswith("camera_"):
        return True
    return any(name == n.name for kind in KINDS for n in build_graph(kind, SessionConfig(ingest=True)).nodes)


def with_parameters(graph: Graph, overrides: dict[str, dict[str, Any]]) -> Graph:
    """The graph with per-node parameter overrides applied. A node of another session kind is
    ignored (as ROS ignores parameters of absent nodes); a name no graph has is an error."""
    names = {n.name for n in graph.nodes}
    unknown = {name for name in set(overrides) - names - {"**"} if not _known_anywhere(name)}
    if unknown:
        raise ValueError(f"parameters given for nodes not in the {graph.kind} graph: {', '.join(sorted(unknown))}")
    everyone = overrides.get("**", {})
    nodes = tuple(
        replace(n, parameters={**n.parameters, **everyone, **overrides.get(n.name, {})}) for n in graph.nodes
    )
    return replace(graph, nodes=nodes)


def with_params_files(graph: Graph, extra: tuple[str | os.PathLike[str], ...] = ()) -> Graph:
    """The graph with its `params_file` launch argument and then `extra` files merged into the
    nodes' parameters, later files winning — the order rcl applies `--params-file` arguments."""
    for path in [*graph.params_files, *extra]:
        graph = with_parameters(graph, load_param_file(path))
    return replace(graph, params_files=())
