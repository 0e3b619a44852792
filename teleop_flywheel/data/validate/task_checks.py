"""What the validator checks against an episode's task spec (`core/task_spec.py`, docs/task_spec.md).

Which spec: the one the episode was recorded under (`EpisodeMeta.task_spec`, parsed back and its
id checked against `task_spec_id`), else the one the user supplies (`validate --task FILE`) for a
bag recorded without one. A bag recorded under another spec than `--task` is not judged at all
(`validator.validate_bag`: an error line naming both ids, exit 1). Without a spec nothing here
applies and the episode is judged exactly as before.

- **Thresholds** (`spec_config`): the spec's duration range, dead-air allowances and required
  streams and cameras with their minimum mean rates replace the config's defaults; the checks are
  the usual ones (DURATION_OUT_OF_RANGE, DEAD_AIR, MISSING_STREAM).
- **Who labelled** (`outcome_reasons`): an outcome set by an operator (`EpisodeMeta.operator`) who
  is not among the spec's `outcome_labellers` is not a label: OUTCOME_UNSET, naming the operator.
- **OUTCOME_MISMATCH**: the operator's success/failure against the spec's success predicate judged
  on the bag's final follower state, recomputed from the bag (the rig's `outcome_check` is not
  trusted: the validator judges what was recorded). A rejection; a warning under `trust_operator`.
- **START_OUT_OF_REGION** (a warning): the first follower pose outside the spec's start region.
- **CLOCK_DRIFT** (`ptp_drift`, any episode, spec or not): the PTP/chrony offset moved by more than
  `max_ptp_drift_ms` between the episode's start (`ptp_offset_ns`) and end
  (`extra["ptp_offset_end_ns"]`).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from teleop_flywheel.core.bag_topics import FOLLOWER_STATE, camera_image
from teleop_flywheel.core.episode import EpisodeMeta
from teleop_flywheel.core.errors import TaskSpecError
from teleop_flywheel.core.task_spec import TaskSpec, parse_task_spec
from teleop_flywheel.data.validate.reasons import (
    CLOCK_DRIFT,
    OUTCOME_MISMATCH,
    OUTCOME_UNSET,
    SCHEMA_MISMATCH,
    START_OUT_OF_REGION,
    Reason,
    Supplied,
    ValidateConfig,
)

PTP_END_KEY = "ptp_offset_end_ns"  # where the recorder writes the end-of-episode offset (EpisodeMeta.extra)


def recorded_spec(ep: EpisodeMeta, where: str) -> TaskSpec | None:
    """The spec an episode was recorded under (None: none); TaskSpecError when its content does not
    parse or does not hash to its recorded id."""
    if not ep.task_spec:
        return None
    spec = parse_task_spec(ep.task_spec, f"{where}: episode metadata task_spec")
    if ep.task_spec_id and spec.id != ep.task_spec_id:
        raise TaskSpecError(f"{where}: episode metadata task_spec hashes to {spec.id}, not its recorded "
                            f"task_spec_id {ep.task_spec_id}")
    return spec


def spec_of(ep: EpisodeMeta, supplied: Supplied | None, where: str) -> tuple[TaskSpec | None, list[Reason]]:
    """(the spec that judges the episode, SCHEMA_MISMATCH when the recorded one is unusable)."""
    try:
        spec = recorded_spec(ep, where)
    except TaskSpecError as exc:
        return None, [Reason(SCHEMA_MISMATCH, str(exc), {"field": "task_spec"})]
    if spec is None and supplied is not None:
        spec = supplied.task_spec
    return spec, []


def spec_config(cfg: ValidateConfig, spec: TaskSpec | None) -> ValidateConfig:
    """The thresholds an episode is judged by: the spec's where it states them, else `cfg`'s. The
    follower's joint states stay the first required stream whatever the spec lists: the episode's
    span, its start and its final state are read from them."""
    if spec is None:
        return cfg
    changes: dict[str, object] = {}
    if spec.duration_s is not None:
        changes["min_duration_s"], changes["max_duration_s"] = spec.duration_s
    for key, value in (("max_leading_dead_s", spec.dead_air.leading_s), ("max_trailing_dead_s",
                       spec.dead_air.trailing_s), ("max_internal_dead_s", spec.dead_air.internal_s)):
        if value is not None:
            changes[key] = value
    rates = dict(spec.topics) | {camera_image(cam): fps for cam, fps in spec.cameras.items()}
    if rates:
        state = cfg.required_topics[0] if cfg.required_topics else FOLLOWER_STATE
        changes["required_topics"] = [state, *(t for t in rates if t != state)]
        changes["min_rate_hz"] = {**cfg.min_rate_hz, **{t: r for t, r in rates.items() if r > 0}}
    return replace(cfg, **changes)  # type: ignore[arg-type]


def outcome_reasons(ep: EpisodeMeta, spec: TaskSpec, final_pose: Sequence[float] | None,
                    cfg: ValidateConfig, foreign: bool = False) -> tuple[list[Reason], list[Reason]]:
    """(rejections, warnings) of the operator's outcome under the spec; a foreign bag's outcome is
    the user's `--outcome`, not an operator's label, so who labelled is not asked."""
    if ep.outcome == "unset":
        return [], []  # OUTCOME_UNSET says so already
    if not foreign and not spec.may_label(ep.operator):
        return [Reason(OUTCOME_UNSET, f"outcome {ep.outcome!r} set by operator {ep.operator!r}, who may not label "
                       f"outcomes of task spec {spec.name} ({spec.id}; labellers: "
                       f"{', '.join(spec.outcome_labellers)})",
                       {"operator": ep.operator, "labellers": list(spec.outcome_labellers)})], []
    if spec.success is None:
        return [], []
    holds, why = spec.success.judge(final_pose)
    if holds == (ep.outcome == "success"):
        return [], []
    reason = Reason(OUTCOME_MISMATCH, f"operator says {ep.outcome}, the success predicate of task spec {spec.name} "
                    f"({spec.id}) on the final follower state says {'success' if holds else 'failure'}: {why}",
                    {"operator_outcome": ep.outcome, "predicate": holds, "detail": why, "task_spec_id": spec.id,
                     "final_pose": None if final_pose is None else [float(q) for q in final_pose]})
    return ([], [reason]) if cfg.trust_operator else ([reason], [])


def start_warnings(spec: TaskSpec, first_pose: Sequence[float] | None) -> list[Reason]:
    if spec.start_region is None or first_pose is None:
        return []
    inside, why = spec.start_region.judge(first_pose)
    if inside:
        return []
    return [Reason(START_OUT_OF_REGION, f"first follower pose outside the start region of task spec {spec.name}: "
                   f"{why}", {"first_pose": [float(q) for q in first_pose], "detail": why})]


def ptp_drift(ep: EpisodeMeta, cfg: ValidateConfig) -> list[Reason]:
    end = ep.extra.get(PTP_END_KEY)
    if ep.ptp_offset_ns is None or isinstance(end, bool) or not isinstance(end, int):
        return []
    moved_ms = (end - ep.ptp_offset_ns) / 1e6
    if abs(moved_ms) <= cfg.max_ptp_drift_ms:
        return []
    return [Reason(CLOCK_DRIFT, f"PTP offset moved {moved_ms:+.3f}ms during the episode "
                   f"({ep.ptp_offset_ns / 1e6:+.3f} -> {end / 1e6:+.3f}ms) beyond ±{cfg.max_ptp_drift_ms:g}ms",
                   {"ptp_offset_ns": ep.ptp_offset_ns, PTP_END_KEY: end, "moved_ms": moved_ms,
                    "bound_ms": cfg.max_ptp_drift_ms})]
