"""The Foxglove layout shows topics the graph really has; `run` shuts down cleanly on SIGTERM; sessions
stay on this machine unless asked; node parameter files keep their types."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from teleop_flywheel.ros.session.graph import SessionConfig, build_graph

ROOT = Path(__file__).resolve().parent.parent
PUBLISHED = {"/leader/joint_states", "/follower/joint_states", "/follower/joint_command", "/policy/joint_command",
             "/teleop/authority", "/teleop/intervention", "/diagnostics", "/pedal/joy"}


def _panels(node: object) -> list[str]:
    if isinstance(node, str):
        return [node]
    return _panels(node["first"]) + _panels(node["second"])  # type: ignore[index]


def test_foxglove_layout_panels_and_topics() -> None:
    """The shipped layout is the generated one for the default camera set; every panel is placed;
    titles are where Foxglove reads them; every topic it reads is published by the graph (and
    recorded) or served beside it by replay/view (URDF, transforms)."""
    from teleop_flywheel.ros.session.arms3d import DESCRIPTION_TOPIC, TF_TOPIC
    from teleop_flywheel.ros.session.layout import layout, topics_of

    shipped = json.loads((ROOT / "config" / "foxglove_layout.json").read_text())
    assert shipped == layout(("front",))
    assert sorted(_panels(shipped["layout"])) == sorted(shipped["configById"])
    assert all(body.get("foxglovePanelTitle") for body in shipped["configById"].values())
    assert not any("title" in body for body in shipped["configById"].values())
    topics = set(topics_of(shipped))
    recorded = {"/" + t.lstrip("/") for t in
                build_graph("sim", SessionConfig(sim_dir="/tmp/tf_layout_probe")).node("recorder").parameters["topics"]}
    assert topics - {DESCRIPTION_TOPIC, TF_TOPIC} <= recorded & (PUBLISHED | {"/cameras/front/image/compressed"})
    # Another camera set: one image panel per camera, nothing else changes.
    two = layout(("front", "wrist"))
    assert {k for k in two["configById"] if k.startswith("Image!")} == {"Image!front", "Image!wrist"}
    assert sorted(_panels(two["layout"])) == sorted(two["configById"])
    three_d = shipped["configById"]["3D!arms"]
    assert {(la["topic"], la["framePrefix"]) for la in three_d["layers"].values() if la.get("sourceType") == "topic"} \
        == {(DESCRIPTION_TOPIC, "leader/"), (DESCRIPTION_TOPIC, "follower/")}


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


def test_sessions_stay_on_this_machine_unless_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    """`run` and `demo` children (and the supervisor's helpers) default to LOCALHOST discovery;
    a range the user set on purpose is kept."""
    from teleop_flywheel.ros.session.supervisor import child_env

    monkeypatch.delenv("ROS_AUTOMATIC_DISCOVERY_RANGE", raising=False)
    assert child_env()["ROS_AUTOMATIC_DISCOVERY_RANGE"] == "LOCALHOST"
    monkeypatch.setenv("ROS_AUTOMATIC_DISCOVERY_RANGE", "SUBNET")
    assert child_env()["ROS_AUTOMATIC_DISCOVERY_RANGE"] == "SUBNET"


def test_parameter_files_hold_strings_as_strings() -> None:
    """Every string is quoted in a node's parameter file: rcl would read `y`, `on` or `1.5` as a
    bool or a number; an empty list (which rcl cannot type) is refused with the node's name."""
    import yaml

    from teleop_flywheel.ros.session.graph import NodeSpec
    from teleop_flywheel.ros.session.supervisor import SessionError, params_yaml

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
    from teleop_flywheel.ros.session.graph import KINDS, config_from_arguments, with_params_files

    shipped = config_path("params.yaml")
    body = {k.lstrip("/"): v["ros__parameters"] for k, v in yaml.safe_load(shipped.read_text()).items()}
    for kind in KINDS:
        graph = with_params_files(build_graph(kind, config_from_arguments({"params_file": str(shipped)})))
        assert graph.params_files == ()
        for spec in graph.nodes:
            for key, value in {**body.get("**", {}), **body.get(spec.name, {})}.items():
                assert spec.parameters[key] == value, (kind, spec.name, key)
