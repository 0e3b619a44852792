"""The columns `convert` writes to the episodes table beside LeRobot's own, one row per episode.

Identity and provenance: `episode_id` (content id v2), `episode_id_v1`, `id_version`, `operator`,
`outcome`, `attempts`, `policy_checkpoint`, `session_kind`, `rig_id`, `recorded_wall_ns` (the grid
start on the wall clock, through the episode's time base), `interventions` and `corrections` (JSON
lists of `{id, start_ns, end_ns, trigger}`), `source_bag`.

What the validator measured, as numbers `audit` reads without opening a bag (NaN: unknown):
- `camera_lag_ms/<camera>`, `camera_lag_stderr_ms/<camera>`: the camera's lag behind the follower's
  joints found in its pixels (`recording.camera_lag`; stderr = the search span when there is no
  trustworthy estimate);
- `tracking_lag_ms`: the follower's lag behind the command, per joint (list of 6, JOINT_NAMES order);
- `tracking_outrun_share`: per joint, the share of the episode whose commanded speed or acceleration
  outran the follower (`data/validate/tracking.py`; the gripper's grasp left out);
- `dead_air_trimmed_leading_s`, `dead_air_trimmed_trailing_s`: what `convert --trim-dead-air` cut
  (0 when nothing was);
- `warnings`: the validator's warning codes (JSON list);
- `review`: a person's latest verdict on the episode on the review page (`confirm`, `overrule`;
  empty: never reviewed), which `manifest create --filter` can select on.

The task spec the episode was recorded under (null without one): `task_spec_id` (its content id) and
`outcome_check` (JSON `{"passed": bool, "detail": str}`: its success predicate judged at stop).
Column names: `data/lerobot/episode_table.py`.
"""
from __future__ import annotations

import json
from typing import Any

import numpy as np

from teleop_flywheel.core.episode import EpisodeMeta
from teleop_flywheel.data.lerobot.episode_table import OUTCOME_CHECK, REVIEW, TASK_SPEC_ID, TRACKING_OUTRUN, WARNINGS
from teleop_flywheel.data.validate.checks import Inspection
from teleop_flywheel.data.validate.validator import display
from teleop_flywheel.recording.mcap.reader import ID_VERSION, Bag


def _num(value: float | None) -> float:
    return float("nan") if value is None else float(value)


def episode_columns(bag: Bag, ep: EpisodeMeta | None, ins: Inspection, recorded_wall_ns: int | None,
                    trimmed: tuple[float, float], review: str | None = None) -> dict[str, Any]:
    cols: dict[str, Any] = {
        "episode_id": bag.episode_id, "episode_id_v1": bag.episode_id_v1, "id_version": ID_VERSION,
        "operator": ep.operator if ep else "", "outcome": ep.outcome if ep else "unset",
        "attempts": ep.attempts if ep else None, "policy_checkpoint": ep.policy_checkpoint if ep else "",
        "session_kind": ep.session_kind if ep else "", "rig_id": ep.rig_id if ep else "",
        "recorded_wall_ns": recorded_wall_ns,
        "interventions": json.dumps([i.__dict__ for i in ep.interventions] if ep else []),
        "corrections": json.dumps([c.__dict__ for c in ep.corrections] if ep else []),
        "source_bag": display(bag.name),
    }
    for cam, est in sorted(ins.camera_lag.items()):
        cols[f"camera_lag_ms/{cam}"] = _num(est.lag_ms)
        cols[f"camera_lag_stderr_ms/{cam}"] = _num(est.stderr_ms)
    cols["tracking_lag_ms"] = [_num(j.lag_ms) for j in ins.tracking] if ins.tracking else [float("nan")] * 6
    cols[TRACKING_OUTRUN] = [_num(j.outrun_share) for j in ins.tracking] if ins.tracking else [float("nan")] * 6
    cols["dead_air_trimmed_leading_s"], cols["dead_air_trimmed_trailing_s"] = (float(trimmed[0]), float(trimmed[1]))
    cols[WARNINGS] = json.dumps(sorted({w.code for w in ins.warnings}))
    cols[REVIEW] = review or ""  # a string column throughout: never reviewed is empty, not null
    cols[TASK_SPEC_ID] = (ep.task_spec_id or None) if ep else None
    cols[OUTCOME_CHECK] = json.dumps(ep.outcome_check, sort_keys=True) if ep and ep.outcome_check else None
    return cols


def camera_lag_columns(columns: list[str]) -> list[str]:
    """The cameras an episodes table has lag columns for."""
    return sorted(c.removeprefix("camera_lag_ms/") for c in columns if c.startswith("camera_lag_ms/"))


def finite_or_none(value: Any) -> float | None:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if np.isfinite(v) else None
