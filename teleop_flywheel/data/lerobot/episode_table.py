"""Per-episode facts the reports need (who, what, when, how it went), from any dataset's episodes table.

Our converter stores each episode's recorded metadata (`EpisodeMeta`) as columns of the LeRobot
episodes parquet. Foreign datasets have none of it, so every field here is optional and a report
says "unknown" rather than inventing a value. This is the one place that knows the column names.

Besides the metadata, the table carries the validator's warning codes (`warnings`, a JSON list), the
task spec's content id (`task_spec_id`) and its predicate's verdict at stop (`outcome_check`, JSON
`{"passed": bool, "detail": str}`), and the curation columns (`CURATION_COLUMNS`, written by
`data/curation/curate.py` at every commit of the converter and by `curate --store`): per episode its
integrated squared jerk (`jerk`) and first state (`start_state`), and, relative to the whole dataset,
`graded_success`, `jerk_z`, `duration_ratio` and `coverage_gain`. They are derived from the data
rows and the rest of the dataset, so they are rewritten when the dataset grows: the manifest's row
hash leaves them out and checks the ones a filter used by value instead.
"""
from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from teleop_flywheel.core.episode import EpisodeMeta
from teleop_flywheel.data.lerobot.dataset import LeRobotDataset

ID_COLUMNS = ("episode_id",)
# Flat columns the converter writes (first match wins).
COLUMNS: dict[str, tuple[str, ...]] = {
    "operator": ("operator",),
    "outcome": ("outcome",),
    "attempts": ("attempts",),
    "checkpoint": ("policy_checkpoint", "checkpoint"),
    "session_kind": ("session_kind",),
    "rig_id": ("rig_id",),
    "recorded_wall_ns": ("recorded_wall_ns", "start_wall_ns"),
    "interventions": ("interventions",),
    "triggers": ("intervention_triggers", "triggers"),
}
# What `convert --trim-dead-air` cut from an episode's ends (seconds): counted back into its duration.
TRIMMED_COLUMNS = ("dead_air_trimmed_leading_s", "dead_air_trimmed_trailing_s")
# Columns derived from the data rows and the dataset around them (data/curation/curate.py).
SCORE_COLUMNS = ("graded_success", "jerk", "jerk_z", "duration_ratio", "coverage_gain")
START_STATE = "start_state"
CURATION_COLUMNS = (*SCORE_COLUMNS, START_STATE)
# JSON columns the converter writes from the validator's verdict and the task spec.
WARNINGS, TASK_SPEC_ID, OUTCOME_CHECK = "warnings", "task_spec_id", "outcome_check"
REVIEW = "review"  # a person's latest verdict on the review page: confirm | overrule | null
# Per joint, the share of the episode the command outran the follower (data/validate/tracking.py).
TRACKING_OUTRUN = "tracking_outrun_share"
# A column holding the whole `EpisodeMeta.to_strings()` map as JSON, if a writer chose that form.
META_JSON_COLUMNS = ("episode_meta", "teleop_flywheel.episode")


@dataclass
class EpisodeRecord:
    episode_index: int
    length: int
    tasks: list[str]
    episode_id: str | None = None
    operator: str | None = None
    outcome: str | None = None
    attempts: int | None = None
    checkpoint: str | None = None
    session_kind: str | None = None
    rig_id: str | None = None
    recorded_wall_ns: int | None = None
    triggers: list[str | None] | None = None  # one entry per intervention (None = unlabelled)
    warnings: list[str] | None = None  # the validator's warning codes (None: not recorded)
    review: str | None = None  # a person's latest verdict on the review page (None: never reviewed)
    task_spec_id: str | None = None
    outcome_check: dict[str, Any] | None = None  # {"passed": bool, "detail": str} of the spec's predicate
    graded_success: float | None = None
    jerk: float | None = None
    jerk_z: float | None = None
    duration_ratio: float | None = None
    coverage_gain: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    started_wall_ns: int | None = None  # when recording began (before any dead air `convert` trimmed)
    duration_s: float | None = None  # start to stop as recorded (dead air trimmed by convert counted back in)
    takeover_s: float | None = None  # seconds under a human's takeover (a takeover never handed back: to the stop)

    @property
    def task(self) -> str:
        return self.tasks[0] if self.tasks else ""

    @property
    def num_interventions(self) -> int | None:
        return None if self.triggers is None else len(self.triggers)

    @property
    def check_passed(self) -> bool | None:
        """The spec predicate's verdict at stop (None: recorded without a spec)."""
        passed = (self.outcome_check or {}).get("passed")
        return passed if isinstance(passed, bool) else None

    @property
    def mismatch(self) -> bool | None:
        """The operator's success/failure flag disagrees with the spec's predicate (None: cannot tell)."""
        if self.check_passed is None or self.outcome not in ("success", "failure"):
            return None
        return self.check_passed != (self.outcome == "success")


def _clean(value: Any) -> Any:
    """pandas/arrow nulls and empty strings → None; numpy scalars → Python."""
    if value is None:
        return None
    if isinstance(value, float) and np.isnan(value):
        return None
    if value is pd.NA or value is pd.NaT:
        return None
    if isinstance(value, str) and value.strip() in ("", "None", "null"):
        return None
    if isinstance(value, np.generic):
        return value.item()
    return value


def _cleaned(column: pd.Series) -> list[Any]:
    """`_clean` of every value of a column: of a string or integer column as a column (a dataset of
    10,000 episodes: 10,000 Python calls saved per column an append reads), else value by value."""
    try:
        arr = pa.Array.from_pandas(column)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        arr = None
    if arr is not None and (pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type)):
        blank = pc.is_in(pc.utf8_trim_whitespace(arr), value_set=pa.array(["", "None", "null"]))
        return list(pc.if_else(pc.fill_null(blank, True), pa.scalar(None, arr.type), arr).to_pylist())
    if arr is not None and pa.types.is_integer(arr.type):
        return list(arr.to_pylist())
    return [_clean(x) for x in column.tolist()]


def _json_list(value: Any) -> list[Any] | None:
    value = _clean(value)
    if value is None:
        return None
    if isinstance(value, str):
        value = json.loads(value)
    return list(value)


def _from_meta(meta: EpisodeMeta) -> dict[str, Any]:
    wall = None
    if meta.clock_start and meta.started_mono_ns:
        wall = int(meta.started_mono_ns + meta.clock_start["wall_ns"] - meta.clock_start["mono_ns"])
    duration = None
    if meta.stopped_mono_ns > meta.started_mono_ns > 0:
        duration = (meta.stopped_mono_ns - meta.started_mono_ns) / 1e9
    start_ros = meta.started_ros_ns or None
    return {
        "operator": meta.operator or None, "outcome": meta.outcome, "attempts": meta.attempts,
        "checkpoint": meta.policy_checkpoint or None, "session_kind": meta.session_kind or None,
        "rig_id": meta.rig_id or None, "recorded_wall_ns": wall,
        "triggers": [i.trigger for i in meta.interventions],
        "started_wall_ns": wall, "duration_s": duration,
        "takeover_s": takeover_seconds([i.__dict__ for i in meta.interventions], start_ros, duration),
        "task_spec_id": meta.task_spec_id or None, "outcome_check": dict(meta.outcome_check) or None,
    }


def takeover_seconds(interventions: list[dict[str, Any]], start_ns: int | None, duration_s: float | None
                     ) -> float | None:
    """Seconds of the episode under takeovers (`{start_ns, end_ns}` on the episode's ROS clock); a
    takeover never handed back lasts to the stop, which needs the episode's start and duration."""
    total = 0.0
    for i in interventions:
        if i.get("start_ns") is None:
            return None  # a table that lists takeovers without their times
        if i.get("end_ns") is not None:
            total += (int(i["end_ns"]) - int(i["start_ns"])) / 1e9
        elif start_ns is None or duration_s is None:
            return None
        else:
            total += max(0.0, start_ns / 1e9 + duration_s - int(i["start_ns"]) / 1e9)
    return total


def record_from_meta(meta: EpisodeMeta, episode_index: int = -1, length: int = 0,
                     episode_id: str | None = None) -> EpisodeRecord:
    """An EpisodeRecord straight from a bag's metadata (for reports that read bags)."""
    return EpisodeRecord(episode_index, length, [meta.task] if meta.task else [], episode_id, **_from_meta(meta))


def columns_for(names: Iterable[str], *fields: str) -> list[str]:
    """Of the columns `names`, those `table_records` reads for the record fields `fields` (keys of
    COLUMNS), with a row's identity and the metadata JSON a writer may keep them in: records of the
    narrower table hold those fields as the whole table's do, for less work per row."""
    wanted = {"episode_index", "length", "tasks", *ID_COLUMNS, *META_JSON_COLUMNS,
              *(c for f in fields for c in COLUMNS[f])}
    return [n for n in names if n in wanted]


def episode_records(ds: LeRobotDataset) -> list[EpisodeRecord]:
    return table_records(ds.episodes, ds.episode_tasks(), ds.fps)


def table_records(table: pd.DataFrame, episode_tasks: list[list[str]], fps: float) -> list[EpisodeRecord]:
    """The records of an episodes table (rows in table order; `episode_tasks`: each row's task texts)."""
    cols = set(table.columns)
    pick = {key: next((c for c in names if c in cols), None) for key, names in COLUMNS.items()}
    id_col = next((c for c in ID_COLUMNS if c in cols), None)
    meta_col = next((c for c in META_JSON_COLUMNS if c in cols), None)
    out = []
    for row, tasks in zip(table.to_dict("records"), episode_tasks, strict=True):
        rec = EpisodeRecord(int(row["episode_index"]), int(row["length"]), tasks,
                            _clean(row[id_col]) if id_col else None)
        if meta_col and _clean(row[meta_col]) is not None:
            for key, value in _from_meta(EpisodeMeta.from_strings(json.loads(row[meta_col]))).items():
                setattr(rec, key, value)
        for key in ("operator", "outcome", "checkpoint", "session_kind", "rig_id"):
            if pick[key]:
                setattr(rec, key, _clean(row[pick[key]]))
        for key in ("attempts", "recorded_wall_ns"):
            if pick[key] and _clean(row[pick[key]]) is not None:
                setattr(rec, key, int(_clean(row[pick[key]])))
        rec.triggers = _triggers(row, pick, rec.triggers)
        if rec.duration_s is None:
            leading, trailing = (float(_clean(row.get(c)) or 0.0) for c in TRIMMED_COLUMNS)
            rec.duration_s = rec.length / fps + leading + trailing
            if rec.recorded_wall_ns is not None:
                rec.started_wall_ns = rec.recorded_wall_ns - round(leading * 1e9)
        if rec.takeover_s is None and pick["interventions"] and (items := _json_list(row[pick["interventions"]])):
            rec.takeover_s = takeover_seconds([i for i in items if isinstance(i, dict)], rec.started_wall_ns,
                                              rec.duration_s)
        elif rec.takeover_s is None and rec.triggers == []:
            rec.takeover_s = 0.0
        _curation(rec, row, cols)
        out.append(rec)
    return out


def table_ids(table: pd.DataFrame) -> list[str | None]:
    """`episode_id` of each row's record (`table_records`), without a record per row."""
    id_col = next((c for c in ID_COLUMNS if c in table.columns), None)
    return _cleaned(table[id_col]) if id_col else [None] * len(table)


def table_times(table: pd.DataFrame, episode_tasks: list[list[str]] | Callable[[], list[list[str]]], fps: float
                ) -> list[int | None]:
    """`recorded_wall_ns` of each row's record (`table_records`) without a record per row: the column's
    value where it holds one (a record takes it over its metadata JSON); the rows where it is empty, or
    every row of a table without the column, through their records. `episode_tasks`: each row's task
    texts, or what gives them (called only when some row needs its record: a list per row costs)."""
    def tasks() -> list[list[str]]:
        return episode_tasks() if callable(episode_tasks) else episode_tasks

    col = next((c for c in COLUMNS["recorded_wall_ns"] if c in table.columns), None)
    if col is None:
        return [r.recorded_wall_ns for r in table_records(table, tasks(), fps)]
    out: list[int | None] = [None if v is None else int(v) for v in _cleaned(table[col])]
    lacking = [i for i, v in enumerate(out) if v is None]
    if lacking and any(c in table.columns for c in META_JSON_COLUMNS):
        every = tasks()
        recs = table_records(table.iloc[lacking], [every[i] for i in lacking], fps)
        for i, rec in zip(lacking, recs, strict=True):
            out[i] = rec.recorded_wall_ns
    return out


def _curation(rec: EpisodeRecord, row: dict[str, Any], cols: set[str]) -> None:
    """The warning codes, the spec columns and the scores, where the table has them."""
    for key in SCORE_COLUMNS:
        if key in cols and (value := _clean(row[key])) is not None:
            setattr(rec, key, float(value))
    if WARNINGS in cols and (codes := _json_list(row[WARNINGS])) is not None:
        rec.warnings = [str(c) for c in codes]
    if REVIEW in cols and _clean(row[REVIEW]) is not None:
        rec.review = str(row[REVIEW])
    if TASK_SPEC_ID in cols and _clean(row[TASK_SPEC_ID]) is not None:
        rec.task_spec_id = str(row[TASK_SPEC_ID])
    if OUTCOME_CHECK in cols and (check := _clean(row[OUTCOME_CHECK])) is not None:
        rec.outcome_check = json.loads(check) if isinstance(check, str) else dict(check)


def _triggers(row: dict[str, Any], pick: dict[str, str | None], current: list[str | None] | None
              ) -> list[str | None] | None:
    if pick["interventions"] and (items := _json_list(row[pick["interventions"]])) is not None:
        return [(i.get("trigger") if isinstance(i, dict) else i) or None for i in items]
    if pick["triggers"] and (labels := _json_list(row[pick["triggers"]])) is not None:
        return [_clean(x) for x in labels]
    return current
