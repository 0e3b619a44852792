"""`teleop-flywheel task init DATASET --out task.yaml`: a commented task-spec template from a dataset's audit.

The spec (docs/task_spec.md) says what an episode must be; a team that already has episodes
starts from what they did. The template is filled from `audit` (data/reports/audit.py):
- `instruction`: the dataset's task text (the most common, others named in a comment);
- `start_region.joints`: per joint, the lowest and highest start state over the episodes (the
  audit's start spread), rounded outward to 1 µrad so every recorded start stays inside;
- a commented `success.joints`: the same over the episodes' final states, a hint to narrow to
  what success means (successes and failures ended there alike);
- `duration_s`: the audit's median episode length ÷ and × `DURATION_MARGIN` (curate's duration
  ratio tails);
- `streams.cameras`: each video feature's fps from info.json, less `CAMERA_RATE_SHARE` (the
  validator's minimum mean rate: a 30 fps camera delivers 29.9 over an episode's span);
- dead air and who labelled, as comments from the audit and the episodes table.

Units: datasets hold LeRobot's (degrees for the body joints, 0..100 for the gripper), a spec
radians. The body joints convert exactly (LeRobot's DEGREES rule, drive_mode 0); the gripper
needs the follower's calibration (`--calibration FILE`, ours or LeRobot's JSON): without one it
is left out of the boxes, its range in 0..100 given in a comment. The file is created
exclusively (never overwritten) and must parse with `core.task_spec.load_task_spec`.
Later actions of the `task` verb belong here beside `init`.
"""
from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from teleop_flywheel.core.calibration import ArmCalibration
from teleop_flywheel.core.so101 import GRIPPER, JOINT_NAMES
from teleop_flywheel.core.task_spec import FORMAT
from teleop_flywheel.data.errors import DatasetError
from teleop_flywheel.data.lerobot.dataset import LeRobotDataset
from teleop_flywheel.data.reports.audit import AuditReport, load

DURATION_MARGIN = 1.5
CAMERA_RATE_SHARE = 0.9
IMAGE_PREFIX = "observation.images."
DECIMALS = 6


@dataclass
class Template:
    """The numbers a template is written from (radians; None: a joint left out)."""

    dataset: str
    episodes: int
    instruction: str
    other_tasks: list[str]
    start: dict[str, tuple[float, float]]
    final: dict[str, tuple[float, float]]
    gripper_start_lerobot: tuple[float, float] | None  # when the gripper could not be converted
    median_s: float
    duration_s: tuple[float, float]
    cameras: dict[str, float]  # camera -> info.json fps
    leading_dead_s: tuple[float, float]  # median, max
    operators: list[str]


def _outward(lo: float, hi: float) -> tuple[float, float]:
    q = 10.0 ** DECIMALS
    return math.floor(lo * q) / q, math.ceil(hi * q) / q


def _to_rad(values: np.ndarray, cal: ArmCalibration | None) -> np.ndarray:
    """(..., 6) LeRobot units in JOINT_NAMES order → radians; the gripper NaN without a calibration."""
    if cal is not None:
        return cal.lerobot_to_rad(values)
    out = np.radians(values.astype(np.float64))
    out[..., JOINT_NAMES.index(GRIPPER)] = np.nan
    return out


def _ranges(lows: np.ndarray, highs: np.ndarray, cal: ArmCalibration | None) -> dict[str, tuple[float, float]]:
    a, b = _to_rad(lows, cal), _to_rad(highs, cal)
    return {n: _outward(min(x, y), max(x, y)) for n, x, y in zip(JOINT_NAMES, a, b, strict=True)
            if np.isfinite(x) and np.isfinite(y)}


def _joint_order(ds: LeRobotDataset, feature: str) -> list[int]:
    names = [n.removesuffix(".pos") for n in ds.joint_names(feature)]
    missing = [j for j in JOINT_NAMES if j not in names]
    if missing:
        raise DatasetError(f"{ds.root}: {feature} has no SO-101 joint(s) {missing} (names: {names}); a task spec "
                           "is written for the SO-101")
    return [names.index(j) for j in JOINT_NAMES]


def template_of(ds: LeRobotDataset, report: AuditReport, cal: ArmCalibration | None) -> Template:
    order = _joint_order(ds, report.state_feature)
    starts = np.asarray(report.start_states, dtype=np.float64)[:, order]
    data = load(ds, report.state_feature, report.action_feature)
    finals = data.state[data.spans.stop - 1].astype(np.float64)[:, order]
    tasks = Counter(t for ts in ds.episode_tasks() for t in ts) or Counter(ds.tasks.values())
    if not tasks:
        raise DatasetError(f"{ds.root}: no task text in meta/tasks.parquet or the episodes table")
    ranked = [t for t, _ in tasks.most_common()]
    median = float(report.length_seconds["median"])
    cameras = {}
    for name, feat in ds.info["features"].items():
        if name.startswith(IMAGE_PREFIX) and feat.get("dtype") in ("video", "image"):
            fps = (feat.get("info") or {}).get("video.fps", ds.fps)
            cameras[name.removeprefix(IMAGE_PREFIX)] = float(fps)
    g = JOINT_NAMES.index(GRIPPER)
    operators = (sorted({str(o) for o in ds.episodes["operator"] if o}) if "operator" in ds.episodes.columns
                 else [])
    return Template(
        dataset=str(ds.root), episodes=report.episodes, instruction=ranked[0], other_tasks=ranked[1:],
        start=_ranges(starts.min(axis=0), starts.max(axis=0), cal),
        final=_ranges(finals.min(axis=0), finals.max(axis=0), cal),
        gripper_start_lerobot=None if cal is not None else (float(starts[:, g].min()), float(starts[:, g].max())),
        median_s=median, duration_s=(round(median / DURATION_MARGIN, 3), round(median * DURATION_MARGIN, 3)),
        cameras=cameras,
        leading_dead_s=(report.leading_dead_median / report.fps, report.leading_dead_max / report.fps),
        operators=operators,
    )


def _boxes(ranges: dict[str, tuple[float, float]], indent: str) -> list[str]:
    return [f"{indent}{n}: [{lo:.{DECIMALS}f}, {hi:.{DECIMALS}f}]" for n, (lo, hi) in ranges.items()]


def render(t: Template) -> str:
    """The template's text: YAML with comments saying where each number came from."""
    name = Path(t.dataset).name
    lines = [
        f"# Task spec template written by `teleop-flywheel task init` from the audit of {t.dataset}",
        f"# ({t.episodes} episodes). Every number is what the recorded episodes did: edit each to what an",
        "# episode of the task MUST be. Fields: docs/task_spec.md. Positions in radians, joint order of the SO-101.",
        f"format: {FORMAT}",
        f"name: {json.dumps(name, ensure_ascii=False)}",  # a JSON string is a YAML double-quoted scalar
        f"instruction: {json.dumps(t.instruction, ensure_ascii=False)}",
    ]
    lines += [f"# other task text in the dataset: {o!r}" for o in t.other_tasks]
    if t.cameras:
        lines += ["streams:", "  cameras:   # minimum mean frames/s over an episode"]
        lines += [f"    {cam}: {fps * CAMERA_RATE_SHARE:g}   # info.json: {fps:g} fps, less "
                  f"{100 * (1 - CAMERA_RATE_SHARE):.0f} %" for cam, fps in sorted(t.cameras.items())]
    lines += ["start_region:",
              f"  # each joint's lowest and highest start state over the {t.episodes} episodes (audit: start spread)",
              "  joints:"]
    lines += _boxes(t.start, "    ")
    if t.gripper_start_lerobot is not None:
        lo, hi = t.gripper_start_lerobot
        lines.append(f"    # gripper: started within [{lo:.2f}, {hi:.2f}] of LeRobot's 0..100; rerun with "
                     "--calibration FOLLOWER_FILE to have it in radians")
    lines += [f"duration_s: [{t.duration_s[0]:g}, {t.duration_s[1]:g}]   # the audit's median episode, "
              f"{t.median_s:.2f} s, ÷ and × {DURATION_MARGIN:g}",
              "# success: the predicate on the final follower state. The episodes ended within these ranges",
              "# (successes and failures alike): narrow them to what success means, or give a gripper state",
              "# or a link target (docs/task_spec.md).",
              "# success:",
              "#   joints:"]
    lines += _boxes(t.final, "#     ")
    lines += ["#   gripper: closed", "#   gripper_closed_below_rad: 0.2",
              f"# dead air at the start of the episodes: median {t.leading_dead_s[0]:.2f} s, longest "
              f"{t.leading_dead_s[1]:.2f} s (audit); the validator's defaults apply unless given:",
              "# dead_air: {leading_s: 2, trailing_s: 2, internal_s: 5}"]
    if t.operators:
        lines += [f"# outcome_labellers: [{', '.join(t.operators)}]   # who labelled outcomes in this dataset"]
    return "\n".join(lines) + "\n"

