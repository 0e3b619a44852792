"""`teleop-flywheel curate DATASET`: score episodes on four axes, say where to record next, weight them.

The seed's curation rule: look at the joint distribution of four scores, never one number.
1. graded success — `1/attempts` for a success (first try = 1, third try = 1/3), 0 for a failure,
   unknown when the outcome or attempt count was not recorded (never defaulted);
2. smoothness — integrated squared jerk of the action, Σ_t Σ_j (Δ³a/Δt³)² Δt in dataset units²/s⁵,
   high values (Tukey fence on log10) flagged as an operator fighting the rig;
3. duration relative to the task median — both tails flagged (default: more than 1.5× off);
4. coverage contribution — each episode's start state's distance to the nearest other episode's
   (normalised by the joint-range box widened to whole `COVERAGE_GRID` units): 0 for a start
   another episode already has, large for one alone in its region. An append changes only the
   values of the episodes the new start is nearer to, so the converter brings the column up to
   date in one pass (`coverage.nearest_other_added`), equal to computing it again; the box's grid
   keeps it still while episodes reach a little farther than the ones before. `curate` also lists
   the greedy farthest-point order over the same start states (each pick the farthest from those
   before it: the order to look at them in).

"Where to send operators next" runs the same farthest-point selection over candidate start poses
spread through the joint-range box (a Halton sequence), against the start states already recorded
(`data/curation/coverage.py`). Sample weights follow the seed's `sample_weights` and SPEC §5
(`data/curation/weights.py`).

The scores are curation columns (`data/lerobot/episode_table.py`, CURATION_COLUMNS) that the dataset
reader joins onto each episode's row from the dataset's scores file, so `manifest create --filter` can
choose by them: `graded_success`, `jerk`, `jerk_z` (the z-score of
log10(1 + jerk) among the episodes of the same task, population standard deviation; 0 when the task
has one episode or no spread), `duration_ratio`, `coverage_gain` (the coverage contribution over the
visited joint-range box) and `start_state`. The converter writes them for every episode in the same
atomic commit as each append (`stored_scores.py`: they are relative to the dataset, so an append changes
them); `curate --store` writes them into any dataset, through the same commit. `curate --drop-plan
--filter EXPR` says which episodes a filter would drop and why, and how much start-state coverage
that costs (`drop_plan`).

A fifth axis, how hard the operator pressed (`data/reports/mashing.py`, from `observation.effort`
and, where recorded, `complementary_info.feedback`): seconds at the follower gripper's force limit,
the peak and integral of the load beyond contact, approaches to the servos' overload protection and
the share of the contact the leader let the operator feel. An episode whose excess-load integral is
above the Tukey fence of the dataset's (or whose load came near the overload protection) is flagged
`pressed`: a policy trained on it learns to press. Datasets without efforts: not measured (None).

Beside the four axes, each episode's `outrun`: the largest share of it during which some joint's
command outran the follower (episodes-table `tracking_outrun_share`, measured by the validator on
the bag: `data/validate/tracking.py`), with the joint; above validate's `tracking_outrun_max_share`
the episode is listed — a leader pushing the follower past what it can do teaches a policy to
command what the robot then tracks with lag.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from teleop_flywheel.core.so101 import JOINT_NAMES
from teleop_flywheel.data.curation.coverage import (
    CANDIDATES,
    covering_radius,
    farthest_point_order,
    nearest_distance,
    nearest_other,
    nearest_other_added,
    target_start_poses,
)
from teleop_flywheel.data.curation.weights import (
    WEIGHT_RULE,
    WeightRule,
    episode_has_intervention,
    sample_weights,
)
from teleop_flywheel.data.errors import DatasetError
from teleop_flywheel.data.lerobot.dataset import LeRobotDataset
from teleop_flywheel.data.lerobot.episode_table import (
    COLUMNS,
    START_STATE,
    TRACKING_OUTRUN,
    EpisodeRecord,
    episode_records,
    table_records,
)
from teleop_flywheel.data.provenance.filter_expr import Filter, episode_values
from teleop_flywheel.data.provenance.reviews import ReviewTally, tally_lines
from teleop_flywheel.data.reports.audit import available_ranges, load
from teleop_flywheel.data.reports.card import record_validation
from teleop_flywheel.data.reports.mashing import EpisodeMashing, dataset_mashing, thresholds_line
from teleop_flywheel.data.reports.plots import write_curation_plots
from teleop_flywheel.data.validate.dataset_record import has_record
from teleop_flywheel.data.validate.episode_columns import finite_or_none
from teleop_flywheel.data.validate.reasons import ValidateConfig

DURATION_TOLERANCE = 1.5
JERK_BLOCK_ROWS = 1 << 16
TARGETS = 5


# --------------------------------------------------------------------------- the four axes
def graded_success(rec: EpisodeRecord) -> float | None:
    if rec.outcome == "failure":
        return 0.0
    if rec.outcome == "success" and rec.attempts is not None and rec.attempts >= 1:
        return 1.0 / rec.attempts
    return None


def integrated_squared_jerk(action: np.ndarray, start: np.ndarray, stop: np.ndarray, fps: float) -> np.ndarray:
    """Per episode Σ over frames and joints of (third difference · fps³)² / fps; NaN if < 4 frames."""
    a = action if action.ndim == 2 else action[:, None]
    jerk_sq = np.zeros(len(a))
    # Rows in blocks: temporaries of a few MB are reused from the heap; over ten million frames whole-column
    # temporaries (~0.5 GB each) are fresh pages every time, and cost 3x the arithmetic per frame.
    for lo in range(3, len(a), JERK_BLOCK_ROWS):
        hi = min(lo + JERK_BLOCK_ROWS, len(a))
        w = a[lo - 3:hi].astype(np.float64)
        j = (w[3:] - 3 * w[2:-1] + 3 * w[1:-2] - w[:-3]) * fps**3
        jerk_sq[lo:hi] = np.sum(j * j, axis=1) / fps
    for k in range(3):  # windows that reach into the previous episode
        row = start + k
        jerk_sq[row[row < stop]] = 0.0
    sums = np.add.reduceat(jerk_sq, start) if len(start) else np.zeros(0)
    return np.where(stop - start >= 4, sums, np.nan)


def tukey_high(values: np.ndarray, k: float = 1.5) -> float:
    """Upper Tukey fence Q3 + k·IQR over the finite values (inf if none)."""
    finite = values[np.isfinite(values)]
    if not len(finite):
        return float("inf")
    q1, q3 = np.percentile(finite, [25, 75])
    return float(q3 + k * (q3 - q1))


def duration_ratios(lengths: np.ndarray, tasks: list[str]) -> np.ndarray:
    out = np.empty(len(lengths))
    for task in set(tasks):
        idx = np.array([t == task for t in tasks])
        out[idx] = lengths[idx] / np.median(lengths[idx])
    return out


def jerk_z_scores(jerk: np.ndarray, tasks: list[str]) -> np.ndarray:
    """z of log10(1 + jerk) among the same task's episodes (population sd); 0 without spread; NaN for NaN jerk."""
    log = np.log10(np.asarray(jerk, dtype=np.float64) + 1.0)
    out = np.full(len(log), np.nan)
    for task in set(tasks):
        idx = np.array([t == task for t in tasks]) & np.isfinite(log)
        if idx.any():
            sd = float(log[idx].std())
            out[idx] = (log[idx] - log[idx].mean()) / sd if sd > 0 else 0.0
    return out


def box_width(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """The joint-range box's side per joint (1 where a joint never moved: no division by zero)."""
    return np.where(hi - lo > 0, hi - lo, 1.0)


@dataclass
class Scores:
    """The dataset-relative scores of every episode, in the order given."""

    graded_success: np.ndarray  # NaN: unknown
    jerk: np.ndarray
    jerk_z: np.ndarray
    duration_ratio: np.ndarray
    coverage_gain: np.ndarray

    def columns(self, starts: np.ndarray) -> dict[str, pa.Array]:
        """As episodes-table columns (null for unknown), built from the arrays (no Python value per row)."""
        out: dict[str, pa.Array] = {}
        for name in ("graded_success", "jerk", "jerk_z", "duration_ratio", "coverage_gain"):
            values = np.asarray(getattr(self, name), dtype=np.float64)
            out[name] = pa.array(values, pa.float64(), mask=~np.isfinite(values))
        flat = np.asarray(starts, dtype=np.float64).reshape(len(starts), -1)
        offsets = pa.array(np.arange(len(flat) + 1, dtype=np.int32) * flat.shape[1])
        out[START_STATE] = pa.ListArray.from_arrays(offsets, pa.array(flat.ravel(), pa.float64()))
        return out


def successes(recs: list[EpisodeRecord]) -> np.ndarray:
    """`graded_success` of each record (NaN: unknown)."""
    return np.array([np.nan if (g := graded_success(r)) is None else g for r in recs], dtype=np.float64)


def table_successes(df: pd.DataFrame, tasks: list[list[str]], fps: float) -> np.ndarray:
    """`successes(table_records(df, tasks, fps))` without a record per row: from the outcome and
    attempts columns, which a record takes over its metadata JSON; the rows that need that JSON (an
    empty attempts column, or no outcome or attempts column at all) through their records."""
    pick = {key: next((c for c in COLUMNS[key] if c in df.columns), None) for key in ("outcome", "attempts")}
    if pick["outcome"] is None or pick["attempts"] is None:
        return successes(table_records(df, tasks, fps))
    outcome = df[pick["outcome"]].to_numpy(dtype=object)
    attempts = pd.to_numeric(df[pick["attempts"]], errors="coerce").to_numpy(dtype=np.float64)
    out = np.full(len(df), np.nan)
    out[outcome == "failure"] = 0.0
    won = (outcome == "success") & (attempts >= 1)
    out[won] = 1.0 / np.floor(attempts[won])
    lacking = np.flatnonzero(np.isnan(attempts) & (outcome == "success"))
    if len(lacking):
        out[lacking] = successes(table_records(df.iloc[lacking], [tasks[i] for i in lacking], fps))
    return out


COVERAGE_GRID = 5.0  # dataset units (degrees; the gripper's 0-100)
# info.json: the rule the episodes table's coverage_gain was written with, so an append knows it can
# bring the column up to date instead of computing it again (a dataset without it: computed again)
COVERAGE_KEY = "teleop_flywheel_coverage"
COVERAGE_RULE = f"nearest_other/grid{COVERAGE_GRID:g}"


def coverage_width(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """The side per joint the start states are divided by for `coverage_gain`: the joint-range box
    widened outward to whole multiples of `COVERAGE_GRID` (at least one). The box only weighs the
    joints against each other; on the grid it moves when the states cross a grid line, not with
    every episode that reaches a little farther (each move makes every value change)."""
    lo_g = np.floor(np.asarray(lo, dtype=np.float64) / COVERAGE_GRID) * COVERAGE_GRID
    hi_g = np.ceil(np.asarray(hi, dtype=np.float64) / COVERAGE_GRID) * COVERAGE_GRID
    return np.maximum(hi_g - lo_g, COVERAGE_GRID)


def dataset_scores(success: np.ndarray, tasks: list[str], lengths: np.ndarray, jerk: np.ndarray,
                   starts: np.ndarray, lo: np.ndarray, hi: np.ndarray, known_gain: np.ndarray | None = None
                   ) -> Scores:
    """`success`: each episode's graded success (NaN: unknown); `tasks`: its task text. `known_gain`:
    the coverage gains of the first episodes as they were before the others were added under the
    same `coverage_width` (an append), brought up to date rather than computed again."""
    points = starts / coverage_width(lo, hi)
    gain = nearest_other(points) if known_gain is None else nearest_other_added(points, known_gain)
    return Scores(success, np.asarray(jerk, dtype=np.float64), jerk_z_scores(jerk, tasks),
                  duration_ratios(np.asarray(lengths, dtype=np.float64), tasks), gain)


# --------------------------------------------------------------------------- weights
# --------------------------------------------------------------------------- report
@dataclass
class EpisodeScore:
    episode_index: int
    episode_id: str | None
    task: str
    length: int
    outcome: str | None
    attempts: int | None
    success: float | None
    jerk: float | None
    jerk_z: float | None
    jerky: bool
    duration_ratio: float
    duration_flag: str  # "", "fast" or "slow"
    coverage_rank: int  # place in the farthest-point order
    coverage_gap: float | None  # coverage_gain: distance to the nearest other start (None: the only episode)
    has_intervention: bool
    age_days: float
    weight: float
    # the follower against the command (`data/validate/tracking.py`, episodes-table `tracking_outrun_share`): the
    # largest share of the episode any joint's command outran the follower, and that joint (None: not measured)
    outrun: float | None = None
    outrun_joint: str = ""
    mashing: EpisodeMashing | None = None  # how hard the operator pressed (None: the dataset has no efforts)
    pressed: bool = False  # excess load above the dataset's fence, or the overload protection came near


@dataclass
class CurationReport:
    dataset: str
    joints: list[str]
    episodes: list[EpisodeScore]
    jerk_fence: float
    duration_tolerance: float
    coverage_order: list[int]
    box: str
    box_lo: list[float]
    box_hi: list[float]
    targets: list[list[float]]
    target_gaps: list[float]
    start_states: list[list[float]]
    rule: WeightRule
    intervention_source: str
    notes: list[str] = field(default_factory=list)
    outrun_bound: float = ValidateConfig().tracking_outrun_max_share
    reviews: ReviewTally | None = None  # the rejections on the dataset's record a person reviewed (None: no record)
    mashing_fence: float | None = None  # excess load·s above which an episode is flagged `pressed` (None: no efforts)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["weight_rule"] = WEIGHT_RULE
        return d


def curate(ds: LeRobotDataset, rule: WeightRule = WeightRule(), targets: int = TARGETS, box: str = "visited",
           duration_tolerance: float = DURATION_TOLERANCE, vary: list[str] | None = None) -> CurationReport:
    data = load(ds)
    spans = data.spans
    records = {r.episode_index: r for r in episode_records(ds)}
    recs = [records[int(e)] for e in spans.episode_index]
    lengths = spans.lengths
    joints = ds.joint_names(data.state_feature)
    notes = list(data.notes)

    jerk = integrated_squared_jerk(data.action, spans.start, spans.stop, ds.fps)
    log_jerk = np.log10(jerk + 1.0)
    fence = tukey_high(log_jerk)
    lo, hi = _box(ds, data, box)
    starts = data.start_states
    scored = dataset_scores(successes(recs), [r.task for r in recs], lengths, jerk, starts, lo, hi)
    ratios = scored.duration_ratio
    order, _ = farthest_point_order(starts / coverage_width(lo, hi))
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))

    vary_mask = None
    if vary:
        unknown = [v for v in vary if v not in joints and f"{v}.pos" not in joints]
        if unknown:
            raise ValueError(f"unknown joint(s) {unknown}; joints are {joints}")
        vary_mask = np.array([j in vary or j.removesuffix(".pos") in vary for j in joints])
    poses, pose_gaps = target_start_poses(starts, lo, hi, targets, vary_mask)

    has_int, source = episode_has_intervention(ds, data, recs)
    times = [r.recorded_wall_ns for r in recs]
    if all(t is None for t in times):
        notes.append("no recording times in the metadata: recency not applied (all ages 0)")
    elif any(t is None for t in times):
        notes.append("some episodes have no recording time: treated as newest (age 0)")
    weights, ages = sample_weights(has_int, times, rule)
    if not 2.0 <= rule.intervention_weight <= 3.0:
        notes.append(f"intervention weight {rule.intervention_weight} is outside the 2-3x the seeds recommend")

    outruns = outrun_shares(ds, [int(e) for e in spans.episode_index])
    mashing = dataset_mashing(ds, data)
    excess = np.array([m.excess_integral for m in mashing]) if mashing else np.zeros(0)
    mash_fence = tukey_high(excess) if mashing else None
    scores = []
    for i, rec in enumerate(recs):
        flag = "slow" if ratios[i] > duration_tolerance else "fast" if ratios[i] < 1.0 / duration_tolerance else ""
        scores.append(EpisodeScore(
            rec.episode_index, rec.episode_id, rec.task, int(lengths[i]), rec.outcome, rec.attempts,
            graded_success(rec), None if np.isnan(jerk[i]) else float(jerk[i]),
            None if np.isnan(scored.jerk_z[i]) else float(scored.jerk_z[i]), bool(log_jerk[i] > fence),
            float(ratios[i]), flag, int(rank[i]), finite_or_none(scored.coverage_gain[i]), bool(has_int[i]),
            float(ages[i]), float(weights[i]), *outruns[i], mashing[i] if mashing else None,
            bool(mashing and (excess[i] > (mash_fence or 0.0) or mashing[i].protection_near))))
    if all(s.success is None for s in scores):
        notes.append("no outcome/attempts metadata: graded success unknown for every episode")
    return CurationReport(str(ds.root), joints, scores, float(10**fence - 1.0), duration_tolerance,
                          [int(spans.episode_index[k]) for k in order], box, lo.tolist(), hi.tolist(),
                          poses.tolist(), pose_gaps.tolist(), starts.tolist(), rule, source, notes,
                          ValidateConfig.load().tracking_outrun_max_share, _record_reviews(ds), mash_fence)


def _record_reviews(ds: LeRobotDataset) -> ReviewTally | None:
    """The review tally of the verdicts convert recorded for this dataset (an unreadable record: a note
    elsewhere, not a failed curation)."""
    if not has_record(ds.root):
        return None
    try:
        return record_validation(ds.root).reviews
    except DatasetError:
        return None


def outrun_shares(ds: LeRobotDataset, episode_index: list[int]) -> list[tuple[float | None, str]]:
    """Per episode: the largest share of it any joint's command outran the follower, and the joint."""
    table = ds.episodes.set_index("episode_index", drop=False)
    if TRACKING_OUTRUN not in table.columns:
        return [(None, "")] * len(episode_index)
    out: list[tuple[float | None, str]] = []
    for e in episode_index:
        raw = table.at[e, TRACKING_OUTRUN] if e in table.index else None
        values = [finite_or_none(v) for v in raw] if isinstance(raw, (list, tuple, np.ndarray)) else []
        known = [(v, JOINT_NAMES[j] if j < len(JOINT_NAMES) else str(j)) for j, v in enumerate(values) if v is not None]
        out.append(max(known) if known else (None, ""))
    return out


def _box(ds: LeRobotDataset, data: Any, box: str) -> tuple[np.ndarray, np.ndarray]:
    """The joint-range box: the range the states visited, or the joints' available limits."""
    if box == "visited":
        return np.nanmin(data.state, axis=0).astype(float), np.nanmax(data.state, axis=0).astype(float)
    if box == "available":
        ranges = available_ranges(ds, data.state_feature)
        if any(r[0] is None for r in ranges):
            raise DatasetError(f"{ds.root}: available joint ranges unknown for some joints; use --box visited")
        return np.array([r[0] for r in ranges]), np.array([r[1] for r in ranges])
    raise ValueError(f"box must be 'visited' or 'available', got {box!r}")


# --------------------------------------------------------------------------- drop plan
@dataclass
class Dropped:
    episode_index: int
    episode_id: str | None
    why: list[str]
    coverage_gain: float | None


@dataclass
class DropPlan:
    dataset: str
    filter: list[str]
    episodes: int
    frames: int
    dropped: list[Dropped]
    dropped_frames: int
    radius_before: float
    radius_after: float | None  # None: nothing kept
    gain_total: float
    gain_lost: float
    candidates: int
    hole: float | None  # the farthest dropped start state from its nearest kept one (None: none dropped/kept)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def drop_plan(ds: LeRobotDataset, filters: list[str]) -> DropPlan:
    """Which episodes the filters would drop (with the failing comparisons' values) and the start-state
    coverage lost: the covering radius (the largest distance from any of `CANDIDATES` Halton points
    filling the visited joint-range box to its nearest kept start state, box-normalised) before and
    after, the sum of the dropped episodes' `coverage_gain` against the total, and the hole the drop
    opens: the largest distance from a dropped start state to its nearest kept one."""
    known, values = episode_values(ds)
    flt = Filter.compile(filters, known)
    report = curate(ds)
    lo, hi = np.array(report.box_lo), np.array(report.box_hi)
    starts = np.array(report.start_states) / box_width(lo, hi)
    dropped, keep = [], np.ones(len(report.episodes), dtype=bool)
    for k, s in enumerate(report.episodes):
        v = values[s.episode_index]
        if not flt.keeps(v):
            keep[k] = False
            dropped.append(Dropped(s.episode_index, s.episode_id, flt.reasons(v), s.coverage_gap))
    before = covering_radius(starts, lo / box_width(lo, hi))
    after = covering_radius(starts[keep], lo / box_width(lo, hi)) if keep.any() else None
    hole = float(nearest_distance(starts[~keep], starts[keep]).max()) if keep.any() and not keep.all() else None
    gains = np.array([s.coverage_gap or 0.0 for s in report.episodes])
    lengths = np.array([s.length for s in report.episodes])
    return DropPlan(str(ds.root), list(filters), len(keep), int(lengths.sum()), dropped, int(lengths[~keep].sum()),
                    before, after, float(gains.sum()), float(gains[~keep].sum()), CANDIDATES, hole)


def format_drop_plan(p: DropPlan) -> str:
    lines = [f"drop plan for {p.dataset}, filter: " + " and ".join(f"({f})" if len(p.filter) > 1 else f
                                                                    for f in p.filter),
             f"would drop {len(p.dropped)} of {p.episodes} episodes ({p.dropped_frames} of {p.frames} frames)"]
    if p.dropped:
        lines.append(f"{'ep':>5} {'id':<12} why")
        lines += [f"{d.episode_index:>5} {(d.episode_id or '-')[:12]:<12} {'; '.join(d.why)}" for d in p.dropped]
    after = "nothing kept" if p.radius_after is None else f"{p.radius_after:.4f}"
    change = "" if p.radius_after is None or not p.radius_before else \
        f" ({100 * (p.radius_after - p.radius_before) / p.radius_before:+.1f} %)"
    lines += ["", f"start-state coverage (covering radius: farthest of {p.candidates} points filling the visited "
                  "joint-range box from its nearest kept start, box-normalised; lower is better):",
              f"  before {p.radius_before:.4f}, after {after}{change}",
              f"  coverage_gain lost: {p.gain_lost:.4f} of {p.gain_total:.4f}"
              + (f" ({100 * p.gain_lost / p.gain_total:.1f} %)" if p.gain_total else "")]
    if p.hole is not None:
        lines.append(f"  farthest dropped start from a kept one: {p.hole:.4f} (the hole this drop opens)")
    return "\n".join(lines)


def format_text(r: CurationReport) -> str:
    lines = [f"curation of {r.dataset}: {len(r.episodes)} episodes",
             f"{'ep':>4} {'id':<10} {'task':<16} {'len':>5} {'success':>9} {'jerk':>10} {'':1} "
             f"{'dur×':>5} {'':4} {'cov#':>4} {'gap':>6} {'int':>3} {'weight':>8} {'outrun':>7} {'grip s':>6} "
             f"{'excess':>6} {'near':>4}"]
    for s in r.episodes:
        succ = "?" if s.success is None else f"{s.success:.2f}"
        if s.outcome == "success" and s.attempts:
            succ = f"{succ}/{s.attempts}x"
        jerk = "-" if s.jerk is None else f"{s.jerk:.3g}"
        cov = "-" if s.coverage_gap is None else f"{s.coverage_gap:.3f}"
        lines.append(f"{s.episode_index:>4} {(s.episode_id or '-')[:10]:<10} {s.task[:16]:<16} {s.length:>5} "
                     f"{succ:>9} {jerk:>10} {'!' if s.jerky else ' '} {s.duration_ratio:>5.2f} "
                     f"{s.duration_flag:<4} {s.coverage_rank:>4} {cov:>6} "
                     f"{'yes' if s.has_intervention else '':>3} {s.weight:>8.5f} "
                     f"{'-' if s.outrun is None else f'{100 * s.outrun:.1f}%':>7} " + _mash_cells(s))
    flagged_j = [s.episode_index for s in r.episodes if s.jerky]
    fast = [s.episode_index for s in r.episodes if s.duration_flag == "fast"]
    slow = [s.episode_index for s in r.episodes if s.duration_flag == "slow"]
    outran = [f"{s.episode_index} ({s.outrun_joint} {100 * (s.outrun or 0.0):.1f} %)" for s in r.episodes
              if s.outrun is not None and s.outrun > r.outrun_bound]
    lines += ["", f"jerky (above {r.jerk_fence:.3g}, Tukey fence on log10): {flagged_j or 'none'}",
              f"the command outran the follower (share of the episode > {100 * r.outrun_bound:g} %, "
              f"validate's FOLLOWER_OUTRUN): {', '.join(outran) or 'none'}",
              _pressed_line(r),
              f"fast (< 1/{r.duration_tolerance:g} of task median): {fast or 'none'};"
              f" slow (> {r.duration_tolerance:g}x): {slow or 'none'}",
              f"coverage order (farthest-point over start states): {r.coverage_order[:20]}"
              + (" ..." if len(r.coverage_order) > 20 else ""),
              "", f"where to send operators next (start poses, dataset units; box = {r.box} joint ranges):",
              "  " + "  ".join(f"{j:>14}" for j in r.joints) + "     gap"]
    for pose, gap in zip(r.targets, r.target_gaps, strict=True):
        lines.append("  " + "  ".join(f"{v:>14.2f}" for v in pose) + f"  {gap:6.3f}")
    lines += [
        "",
        f"sample weights: intervention x{r.rule.intervention_weight:g}, half-life {r.rule.half_life_days:g} days,"
        f" interventions from {r.intervention_source}",
        f"  rule: {WEIGHT_RULE}",
    ]
    if r.reviews is not None:
        lines += ["", *tally_lines(r.reviews)]
    lines += [f"note: {n}" for n in r.notes]
    return "\n".join(lines)


def _mash_cells(s: EpisodeScore) -> str:
    """grip s (at the grip limit), excess (load·s beyond contact), near (approaches to overload protection)."""
    m = s.mashing
    if m is None:
        return f"{'-':>6} {'-':>6} {'-':>4}"
    return f"{m.grip_limit_s:>6.2f} {m.excess_integral:>6.2f} {m.protection_near:>4}" + (" !" if s.pressed else "")


def _pressed_line(r: CurationReport) -> str:
    if r.mashing_fence is None:
        return "pressed hard: not measured (no observation.effort in the dataset)"
    pressed = [s.episode_index for s in r.episodes if s.pressed]
    return (f"pressed hard (excess load above {r.mashing_fence:.3g} load·s, Tukey fence, or the overload protection "
            f"came near; {thresholds_line()}): {pressed or 'none'}")


def write_plot(r: CurationReport, out: Path) -> list[Path]:
    """Scatter matrix of the four scores (flagged episodes in red), and start states with targets
    (`<out>_starts.png`); `data/reports/plots.py`."""
    return write_curation_plots(r, out)

