"""The shipped Foxglove layout (`ros/session/foxglove/layout.py`, `config/foxglove_layout.json`): every
panel placed, titles where Foxglove reads them, and every topic it reads published by the session
graph (and recorded) or served beside it by replay/view."""
from __future__ import annotations

import json

from support.paths import ROOT

from teleop_flywheel.ros.session.foxglove.arms3d import DESCRIPTION_TOPIC, TF_TOPIC
from teleop_flywheel.ros.session.foxglove.layout import layout, topics_of
from teleop_flywheel.ros.session.launch.graph import SessionConfig, build_graph

ROOT = ROOT
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
