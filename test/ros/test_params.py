"""Parameters declared once (ros/params.py) and the shipped config/params.yaml.

The helper on a real rclpy node: descriptors (description, range, read-only, choices), one start
error naming node/parameter/value/range, integers accepted for doubles, run-time changes applied
or refused with a reason. The shipped file: one section per session node listing every parameter
of that node's dataclass with its default, loadable through the session graph's parameter-file
path, `/**` included.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import pytest
import yaml
from rcl_interfaces.msg import ParameterType
from rclpy.context import Context
from rclpy.node import Node
from rclpy.parameter import Parameter

from teleop_flywheel.core.resources import config_path
from teleop_flywheel.ros.errors import ParameterError
from teleop_flywheel.ros.nodes.arm_driver import ArmDriverParams
from teleop_flywheel.ros.nodes.camera import CameraParams
from teleop_flywheel.ros.nodes.ingest import IngestParams
from teleop_flywheel.ros.nodes.metrics import MetricsParams
from teleop_flywheel.ros.nodes.pedal import PedalParams
from teleop_flywheel.ros.nodes.policy import PolicyParams
from teleop_flywheel.ros.nodes.recorder import RecorderParams
from teleop_flywheel.ros.nodes.teleop import TeleopParams
from teleop_flywheel.ros.params import NodeParameters, NodeParams, spec
from teleop_flywheel.ros.session.launch.graph import (
    SessionConfig,
    build_graph,
    config_from_arguments,
    load_param_file,
    with_parameters,
)

PARAMS: dict[str, type[NodeParams]] = {
    "arm_driver": ArmDriverParams, "teleop": TeleopParams, "policy": PolicyParams, "pedal": PedalParams,
    "camera": CameraParams, "recorder": RecorderParams, "ingest": IngestParams, "metrics": MetricsParams,
}


@dataclass
class DemoParams(NodeParams):
    rate_hz: float = spec(50.0, "loop rate (Hz)", range=(1.0, 100.0))
    mode: str = spec("a", "which mode", choices=("a", "b"), read_only=False)
    gain: float = spec(1.0, "output gain", range=(0.0, 2.0), read_only=False)
    names: list[str] = spec([], "some names")


def demo(context: Context, refuse: str = "", **overrides: Any) -> tuple[Node, NodeParameters[DemoParams], list[Any]]:
    node = Node("demo", context=context, parameter_overrides=[Parameter(k, value=v) for k, v in overrides.items()])
    applied: list[Any] = []

    def on_change(old: DemoParams, new: DemoParams, names: set[str]) -> str | None:
        if refuse and refuse in names:
            return f"{refuse}: not now"
        applied.append((sorted(names), new.as_dict()))
        return None

    return node, NodeParameters(node, DemoParams, on_change), applied


def test_declared_with_descriptors_and_start_values_typed(context: Context) -> None:
    node, params, _ = demo(context, rate_hz=20)  # an integer, as YAML and `-p rate_hz:=20` spell it
    assert params.values == DemoParams(rate_hz=20.0, mode="a", gain=1.0, names=[])
    assert node.get_parameter("rate_hz").value == 20.0 and node.get_parameter("names").value == [""]
    d = node.describe_parameter("rate_hz")
    assert (d.description, d.read_only, d.type) == ("loop rate (Hz)", True, ParameterType.PARAMETER_DOUBLE)
    assert (d.floating_point_range[0].from_value, d.floating_point_range[0].to_value) == (1.0, 100.0)
    m = node.describe_parameter("mode")
    assert not m.read_only and m.additional_constraints == "one of: 'a', 'b'"
    node.destroy_node()


@pytest.mark.parametrize("name,value,allowed", [
    ("rate_hz", 0, "within [1, 100]"),
    ("rate_hz", "fast", "of type float"),
    ("mode", "c", "one of: 'a', 'b'"),
    ("gain", float("nan"), "a finite number within [0, 2]"),
])
def test_a_bad_start_value_is_one_error_naming_node_parameter_value_and_range(
        context: Context, name: str, value: Any, allowed: str) -> None:
    with pytest.raises(ParameterError) as info:
        demo(context, **{name: value})
    assert str(info.value) == f"/demo: parameter {name} = {value!r} is not allowed: {allowed}"


def test_run_time_changes_apply_or_are_refused_with_a_reason(context: Context) -> None:
    node, params, applied = demo(context, refuse="gain")
    (ok,) = node.set_parameters([Parameter("mode", value="b")])
    assert ok.successful and params.values.mode == "b" and applied == [(["mode"], params.values.as_dict())]
    (read_only,) = node.set_parameters([Parameter("rate_hz", value=10.0)])
    assert not read_only.successful and "read-only" in read_only.reason and params.values.rate_hz == 50.0
    (choice,) = node.set_parameters([Parameter("mode", value="z")])
    assert not choice.successful and choice.reason == "mode = 'z' is not allowed: one of: 'a', 'b'"
    (refused,) = node.set_parameters([Parameter("gain", value=1)])  # an int for a double: converted, then refused
    assert not refused.successful and refused.reason == "gain: not now"
    assert params.values.gain == 1.0 and node.get_parameter("gain").value == 1.0  # unchanged either way
    node.destroy_node()


def _sections(text: str) -> dict[str, tuple[dict[str, Any], set[str]]]:
    """node → (active parameters, parameters listed commented out as set by the session)."""
    data = yaml.safe_load(text)
    commented: dict[str, set[str]] = {}
    node = ""
    for line in text.splitlines():
        if m := re.match(r"^/(\S+):", line):
            node = m.group(1)
        elif m := re.match(r"^\s+# (\w+): .*# set by", line):
            commented.setdefault(node, set()).add(m.group(1))
    return {k.lstrip("/"): (v["ros__parameters"], commented.get(k.lstrip("/"), set())) for k, v in data.items()}


def test_the_shipped_params_yaml_lists_every_parameter_with_its_default() -> None:
    path = config_path("params.yaml")
    sections = _sections(path.read_text())
    graph = build_graph("sim", SessionConfig(ingest=True))  # every node a session can have
    assert set(sections) == {"**"} | {n.name for n in graph.nodes}
    assert sections["**"][0] == {"use_sim_time": False}
    for spec_ in graph.nodes:
        active, commented = sections[spec_.name]
        cls = PARAMS[spec_.executable]
        fields = {f.name: f for f in cls.fields_()}
        assert set(active) | commented == set(fields), spec_.name
        assert not set(active) & commented
        # a session's own parameters are never overridden by the file (it is applied after them)
        assert not set(active) & set(spec_.parameters), (spec_.name, set(active) & set(spec_.parameters))
        for name, value in active.items():
            assert fields[name].coerce(value) == fields[name].default, (spec_.name, name)


@pytest.mark.parametrize("kind", ["rollout", "sim"])
def test_the_shipped_params_yaml_loads_into_a_session_graph(kind: str) -> None:
    # A real rollout names its policy (the scripted one refuses a real follower).
    graph = build_graph(kind, config_from_arguments({"policy": "lerobot", "policy_args": "/ckpt"}) if kind == "rollout"
                        else None)
    loaded = with_parameters(graph, load_param_file(config_path("params.yaml")))
    for before, after in zip(graph.nodes, loaded.nodes, strict=True):
        assert after.parameters["use_sim_time"] is False  # `/**` reached every node
        assert {k: v for k, v in after.parameters.items() if k in before.parameters} == before.parameters
        # every node starts with the merged values: they validate through its dataclass
        cls = PARAMS[after.executable]
        cls.from_values({k: v for k, v in after.parameters.items() if k != "use_sim_time"}, f"/{after.name}")


def test_parameter_files_hold_strings_as_strings() -> None:
    """Every string is quoted in a node's parameter file: rcl would read `y`, `on` or `1.5` as a
    bool or a number; an empty list (which rcl cannot type) is refused with the node's name."""
    import yaml

    from teleop_flywheel.ros.errors import SessionError
    from teleop_flywheel.ros.session.launch.graph import NodeSpec
    from teleop_flywheel.ros.session.launch.supervisor import params_yaml

    text = params_yaml(NodeSpec("policy", "policy", {"policy_args": "y", "checkpoint_id": "1.5", "rate_hz": 50.0}))
    assert '"policy_args": "y"' in text and '"checkpoint_id": "1.5"' in text and '"rate_hz": 50.0' in text
    assert yaml.safe_load(text) == {"/**": {"ros__parameters": {"policy_args": "y", "checkpoint_id": "1.5",
                                                                "rate_hz": 50.0}}}
    with pytest.raises(SessionError, match="node recorder: parameter topics is an empty list"):
        params_yaml(NodeSpec("recorder", "recorder", {"topics": []}))


def test_the_shipped_params_file_applies_to_every_session_kind() -> None:
    """`--arg params_file=config/params.yaml` (or `--param-file`) works for each kind: sections of
    nodes another kind has are ignored, as ROS ignores them; what it sets reaches the nodes."""
    import yaml

    from teleop_flywheel.core.resources import config_path
    from teleop_flywheel.ros.session.launch.graph import KINDS, config_from_arguments, with_params_files

    shipped = config_path("params.yaml")
    body = {k.lstrip("/"): v["ros__parameters"] for k, v in yaml.safe_load(shipped.read_text()).items()}
    for kind in KINDS:
        graph = with_params_files(build_graph(kind, config_from_arguments({"params_file": str(shipped)})))
        assert graph.params_files == ()
        for node in graph.nodes:
            for key, value in {**body.get("**", {}), **body.get(node.name, {})}.items():
                assert node.parameters[key] == value, (kind, node.name, key)
