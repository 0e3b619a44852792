"""The Foxglove layout, one per camera set: `config/foxglove_layout.json` is `layout(("front",))`.

Every panel shows data from what a session records and what `replay --foxglove` / `view` serve:
six joint plots (leader, follower, command sent, policy; by header stamp, which is ROS time, so on
the recording's timeline), the authority plot, one image panel per camera, the intervention
events, the diagnostics, and a 3D panel with both arms (two URDF layers on `/robot_description`,
framed `leader/` and `follower/`, moved by the `/tf` transforms of `arms3d`). Titles are in
`foxglovePanelTitle`, the key Foxglove and Lichtblick read for a panel's title.

The shipped file is for the default camera set (`front`); `replay --layout FILE` and
`view --layout FILE` write the layout for the cameras a bag or a live session really has.
`test/ros/session/foxglove/test_foxglove_layout.py` keeps the shipped file equal to `layout(("front",))`.
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from teleop_flywheel.core.so101 import JOINT_NAMES
from teleop_flywheel.ros.session.foxglove.arms3d import (
    BASE_OFFSETS,
    DESCRIPTION_TOPIC,
    ROLES,
    TF_TOPIC,
    WORLD_FRAME,
    frame_prefix,
)

DEFAULT_CAMERAS = ("front",)
PLOT_SERIES = (("/leader/joint_states", "leader"), ("/follower/joint_states", "follower"),
               ("/follower/joint_command", "command sent"), ("/policy/joint_command", "policy"))
AUTHORITY_SERIES = ("alpha", "mode (0 teleop, 1 policy)", "intervention id", "trigger code")


def _plot(title: str, series: Sequence[tuple[str, str]]) -> dict[str, Any]:
    return {
        "paths": [{"value": value, "enabled": True, "timestampMethod": "headerStamp", "label": label}
                  for value, label in series],
        "showXAxisLabels": True, "showYAxisLabels": True, "showLegend": True, "legendDisplay": "floating",
        "isSynced": True, "xAxisVal": "timestamp", "followingViewWidth": 10,
        "foxglovePanelTitle": title,
    }


def _urdf_layer(role: str, order: int) -> dict[str, Any]:
    return {"layerId": "foxglove.Urdf", "instanceId": f"{role}_arm", "label": f"{role} arm", "visible": True,
            "order": order, "sourceType": "topic", "topic": DESCRIPTION_TOPIC, "framePrefix": frame_prefix(role),
            "displayMode": "auto", "fallbackColor": "#ffffff"}


def _three_d() -> dict[str, Any]:
    return {
        "cameraState": {"distance": 1.4, "perspective": True, "phi": 55, "thetaOffset": 35,
                        "target": [0.15, 0.0, 0.15], "targetOffset": [0, 0, 0], "targetOrientation": [0, 0, 0, 1],
                        "fovy": 45, "near": 0.01, "far": 100},
        "followMode": "follow-pose",
        "followTf": WORLD_FRAME,
        "scene": {},
        "transforms": {},
        # The plain /robot_description entry would draw a third, unprefixed arm at the origin.
        "topics": {DESCRIPTION_TOPIC: {"visible": False}},
        "layers": {
            "grid": {"layerId": "foxglove.Grid", "instanceId": "grid", "label": "grid", "visible": True, "order": 1,
                     "frameId": WORLD_FRAME, "size": 2, "divisions": 20, "lineWidth": 1, "color": "#248eff",
                     "position": [0, 0, 0], "rotation": [0, 0, 0]},
            **{f"{role}_arm": _urdf_layer(role, i + 2) for i, role in enumerate(ROLES)},
        },
        "foxglovePanelTitle": "both arms, 3D (leader +y, follower −y: "
                              f"{BASE_OFFSETS['leader'][1]:+.2f} / {BASE_OFFSETS['follower'][1]:+.2f} m)",
    }


def _split(direction: str, items: Sequence[Any], split: float | None = None) -> Any:
    """A mosaic tree with `items` side by side along `direction` (equal shares unless `split`)."""
    if len(items) == 1:
        return items[0]
    first = 100 / len(items) if split is None else split
    return {"direction": direction, "first": items[0], "second": _split(direction, items[1:]),
            "splitPercentage": round(first, 1)}


def layout(cameras: Sequence[str] = DEFAULT_CAMERAS) -> dict[str, Any]:
    """The layout for a session recording `cameras`."""
    config: dict[str, Any] = {}
    for j, joint in enumerate(JOINT_NAMES):
        config[f"Plot!joint{j}"] = _plot(f"{joint} (rad): leader, follower, command, policy",
                                         [(f"{topic}.position[{j}]", label) for topic, label in PLOT_SERIES])
    config["Plot!authority"] = _plot("authority: alpha (human weight), mode, intervention, trigger",
                                     [(f"/teleop/authority.position[{i}]", label)
                                      for i, label in enumerate(AUTHORITY_SERIES)])
    for cam in cameras:
        config[f"Image!{cam}"] = {"imageMode": {"imageTopic": f"/cameras/{cam}/image/compressed"},
                                  "cameraState": {}, "foxglovePanelTitle": f"{cam} camera"}
    config["3D!arms"] = _three_d()
    config["RawMessages!interventions"] = {"topicPath": "/teleop/intervention", "diffEnabled": False,
                                           "expansion": "all", "foxglovePanelTitle": "intervention events"}
    config["DiagnosticSummary!diag"] = {"minLevel": 0, "pinnedIds": [], "hardwareIdFilter": "",
                                        "topicToRender": "/diagnostics", "sortByLevel": True,
                                        "foxglovePanelTitle": "diagnostics"}
    joints = _split("column", [f"Plot!joint{j}" for j in range(len(JOINT_NAMES))])
    views = _split("row", ["3D!arms", *(f"Image!{cam}" for cam in cameras)])
    right = _split("column", [views, "Plot!authority",
                              _split("row", ["RawMessages!interventions", "DiagnosticSummary!diag"])], 45)
    return {"configById": config, "globalVariables": {}, "userNodes": {}, "playbackConfig": {"speed": 1.0},
            "layout": _split("row", [joints, right], 40)}


def layout_text(cameras: Sequence[str] = DEFAULT_CAMERAS) -> str:
    return json.dumps(layout(cameras), indent=2, ensure_ascii=False) + "\n"


def write_layout(path: Path, cameras: Sequence[str]) -> Path:
    path.write_text(layout_text(cameras), encoding="utf-8")
    return path


def topics_of(config: dict[str, Any]) -> dict[str, set[str]]:
    """Every topic a layout reads, with the message paths (field paths after the topic) it reads there."""
    out: dict[str, set[str]] = {}
    for panel, body in config["configById"].items():
        kind = panel.split("!", 1)[0]
        if kind == "Plot":
            for path in body["paths"]:
                topic, _, field = path["value"].partition(".")
                out.setdefault(topic, set()).add(field)
        elif kind == "Image":
            out.setdefault(body["imageMode"]["imageTopic"], set())
        elif kind == "RawMessages":
            out.setdefault(body["topicPath"], set())
        elif kind == "DiagnosticSummary":
            out.setdefault(body["topicToRender"], set())
        elif kind == "3D":
            out.setdefault(TF_TOPIC, set())  # the 3D panel reads every transform topic
            for layer in body["layers"].values():
                if layer.get("sourceType") == "topic":
                    out.setdefault(layer["topic"], set())
    return out
