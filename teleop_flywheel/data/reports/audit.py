"""`teleop-flywheel audit DATASET`: what a dataset actually contains, from numeric columns only.

The seed's data-engine lesson as a report: episode count and frames; episode lengths (min,
median, max, max/min); dead air (share of frames whose action is bit-identical to the previous
frame's in the same episode, and the leading dead frames per episode); per-joint range visited
against the range available; the spread of start states; each episode's distance from the mean
start state with outliers named; what the content says about clocks and force (each camera's lag
behind the joints, the follower's tracking lag, the effort range, dead air trimmed: below).
Video is never decoded, so it runs in seconds on a million frames.

Before any number is computed the episode lengths in the metadata are checked against the data
rows; a mismatch is an error naming the episode (the numbers would otherwise be plausible lies).

The rows on what the episodes' content says about clocks and force, from numeric columns only
(no bag, no video):

- **camera lag**: each episode's estimated lag of each camera behind the follower's joints
  (episodes-table `camera_lag_ms/<camera>`, `camera_lag_stderr_ms/<camera>`, written by `convert`
  from the validator's content check);
- **tracking**: the follower's lag behind the command per joint (`tracking_lag_ms`) and the share
  of each episode its command outran the follower (`tracking_outrun_share`), median and worst over
  episodes — the seed's "leader accelerations the follower cannot achieve";
- **effort**: the range of `observation.effort` per joint (min, 1st and 99th percentile, max; load
  as a signed fraction of max torque) and the share of frames above half of it — a dataset that
  knows when the gripper squeezed;
- **dead air trimmed** by `convert --trim-dead-air` (`dead_air_trimmed_leading_s`/`_trailing_s`);
- **frame contract**: the lag of `observation.state` behind `action` per episode and joint, how
  decisive it is, and whether the actions are the state copied, shifted by a frame either way, or
  lag beyond a bound (`frame_contract.py`).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from teleop_flywheel.core.calibration import parse_calibration
from teleop_flywheel.core.errors import CalibrationError
from teleop_flywheel.data.errors import DatasetError
from teleop_flywheel.data.lerobot.dataset import (
    ACTION,
    STATE,
    EpisodeSpans,
    LeRobotDataset,
    check_lengths,
    episode_spans,
)
from teleop_flywheel.data.lerobot.episode_table import TRACKING_OUTRUN
from teleop_flywheel.data.reports.frame_contract import FrameContract, check_contract, contract_lines
from teleop_flywheel.data.reports.plots import write_audit_html
from teleop_flywheel.data.validate.episode_columns import camera_lag_columns, finite_or_none

EFFORT = "observation.effort"
HIGH_EFFORT = 0.5


@dataclass
class EffortRange:
    joint: str
    min: float
    q01: float
    q99: float
    max: float
    high_share: float  # frames with |effort| > HIGH_EFFORT


@dataclass
class ContentAudit:
    camera_lag_ms: dict[str, list[float | None]] = field(default_factory=dict)  # camera -> per episode
    camera_lag_stderr_ms: dict[str, list[float | None]] = field(default_factory=dict)
    tracking_joints: list[str] = field(default_factory=list)
    tracking_lag_ms: list[list[float | None]] = field(default_factory=list)  # per episode, per joint
    tracking_outrun_share: list[list[float | None]] = field(default_factory=list)  # per episode, per joint
    effort: list[EffortRange] = field(default_factory=list)
    trimmed_leading_s: list[float] = field(default_factory=list)
    trimmed_trailing_s: list[float] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def content_audit(ds: LeRobotDataset, episode_index: list[int], joints: list[str]) -> ContentAudit:
    """Per episode in `episode_index` order (the audit's)."""
    table = ds.episodes.set_index("episode_index", drop=False)
    rows = table.reindex(episode_index)
    out = ContentAudit()
    for cam in camera_lag_columns(list(table.columns)):
        out.camera_lag_ms[cam] = [finite_or_none(v) for v in rows[f"camera_lag_ms/{cam}"]]
        if f"camera_lag_stderr_ms/{cam}" in rows:
            out.camera_lag_stderr_ms[cam] = [finite_or_none(v) for v in rows[f"camera_lag_stderr_ms/{cam}"]]
    for col, into in (("tracking_lag_ms", out.tracking_lag_ms), (TRACKING_OUTRUN, out.tracking_outrun_share)):
        if col in rows:
            out.tracking_joints = [j.removesuffix(".pos") for j in joints]
            for v in rows[col]:
                values = list(v) if isinstance(v, (list, tuple, np.ndarray)) else []
                into.append([finite_or_none(x) for x in values] or [None] * len(joints))
    for side in ("leading", "trailing"):
        col = f"dead_air_trimmed_{side}_s"
        if col in rows:
            getattr(out, f"trimmed_{side}_s").extend(float(finite_or_none(v) or 0.0) for v in rows[col])
    if EFFORT in ds.features and ds.has_column(EFFORT):
        effort = np.asarray(ds.column(EFFORT), dtype=np.float64)
        effort = effort.reshape(len(effort), -1)
        names = ds.joint_names(EFFORT)
        for j, name in enumerate(names):
            v = effort[:, j][np.isfinite(effort[:, j])]
            if len(v):
                q01, q99 = np.quantile(v, [0.01, 0.99])
                out.effort.append(EffortRange(name.removesuffix(".effort"), float(v.min()), float(q01), float(q99),
                                              float(v.max()), float(np.mean(np.abs(v) > HIGH_EFFORT))))
    return out


def _stat(values: list[float | None]) -> str:
    known = [v for v in values if v is not None]
    if not known:
        return "unknown"
    a = np.asarray(known)
    worst = float(a[np.argmax(np.abs(a))])
    return f"median {np.median(a):+.1f} ms, worst {worst:+.1f} ms ({len(known)}/{len(values)} episodes measured)"


@dataclass
class JointTrackingSummary:
    joint: str
    lag_median_ms: float | None
    lag_worst_ms: float | None
    outrun_median: float | None
    outrun_worst: float | None
    outrun_worst_episode: int | None


def tracking_summary(c: ContentAudit, episode_index: list[int]) -> list[JointTrackingSummary]:
    """Per joint over the episodes: the follower's lag behind the command and the share of an episode the
    command outran it (median and worst), as `audit`, `stats` and the data card show them."""
    out = []
    for j, name in enumerate(c.tracking_joints):
        lags = [v for row in c.tracking_lag_ms if j < len(row) and (v := row[j]) is not None]
        shares = [(v, e) for row, e in zip(c.tracking_outrun_share, episode_index, strict=False)
                  if j < len(row) and (v := row[j]) is not None]
        worst = max(shares) if shares else None
        out.append(JointTrackingSummary(
            name, float(np.median(lags)) if lags else None, max(lags) if lags else None,
            float(np.median([v for v, _ in shares])) if shares else None,
            None if worst is None else worst[0], None if worst is None else worst[1]))
    return out


def tracking_lines(rows: list[JointTrackingSummary]) -> list[str]:
    if not rows:
        return []
    lines = ["tracking            the follower against the command, per joint over episodes: lag median / worst; "
             "share of an episode the command outran it, median / worst (episode):"]
    for r in rows:
        lag = "unknown" if r.lag_median_ms is None else f"{r.lag_median_ms:6.1f} / {r.lag_worst_ms:6.1f} ms"
        share = ("" if r.outrun_median is None else
                 f"   {100 * r.outrun_median:5.1f} / {100 * (r.outrun_worst or 0.0):5.1f} % ({r.outrun_worst_episode})")
        lines.append(f"  {r.joint:<18}{lag}{share}")
    return lines


def format_lines(c: ContentAudit, episode_index: list[int]) -> list[str]:
    lines: list[str] = []
    for cam, lags in sorted(c.camera_lag_ms.items()):
        lines.append(f"camera lag {cam:<9}{_stat(lags)} (behind the joints, from the images)")
        per = ", ".join(f"{e}: {'?' if v is None else f'{v:+.1f}'}" for e, v in zip(episode_index, lags, strict=True))
        lines.append(f"  per episode (ms)  {per}")
    lines += tracking_lines(tracking_summary(c, episode_index))
    if c.effort:
        lines.append(
            f"effort              per joint: min / q01 / q99 / max (fraction of max torque), share > {HIGH_EFFORT:g}:"
        )
        lines += [
            f"  {e.joint:<18}{e.min:+.2f} / {e.q01:+.2f} / {e.q99:+.2f} / {e.max:+.2f}   {100 * e.high_share:.1f} %"
            for e in c.effort
        ]
    trimmed = [
        (e, a, b) for e, a, b in zip(episode_index, c.trimmed_leading_s, c.trimmed_trailing_s, strict=False) if a or b
    ]
    if trimmed:
        lines.append(f"dead air trimmed    {len(trimmed)} episodes: " + ", ".join(
            f"{e} (-{a:.1f} s lead, -{b:.1f} s tail)" for e, a, b in trimmed))
    return lines


def card_lines(c: ContentAudit, episode_index: list[int]) -> list[str]:
    """The data card's paragraph on the content checks (what convert measured and trimmed)."""
    lines: list[str] = []
    trimmed = [(a, b) for a, b in zip(c.trimmed_leading_s, c.trimmed_trailing_s, strict=True) if a or b]
    if trimmed:
        lines.append(f"Dead air trimmed (`convert --trim-dead-air`, a judgement call): {len(trimmed)} episodes lost "
                     f"{sum(a for a, _ in trimmed):.1f} s of leading and {sum(b for _, b in trimmed):.1f} s of "
                     "trailing bit-identical commands.")
    for cam, lags in sorted(c.camera_lag_ms.items()):
        lines.append(f"Camera `{cam}` lag behind the joints, found in the images: {_stat(lags)}.")
    if c.tracking_lag_ms:
        known = [v for row in c.tracking_lag_ms for v in row if v is not None]
        if known:
            lines.append(f"The follower lags the command by {np.median(known):.0f} ms (median over joints and "
                         f"episodes; worst {max(known):.0f} ms).")
    shares = [(r.outrun_worst, r.joint, r.outrun_worst_episode) for r in tracking_summary(c, episode_index)
              if r.outrun_worst is not None]
    if shares:
        share, joint, episode = max(shares)
        lines.append(f"The command outran the follower (its speed or acceleration beyond what the follower achieved) "
                     f"on at most {100 * share:.1f} % of an episode ({joint}, episode {episode}).")
    if c.effort:
        lines.append("Effort (`observation.effort`: load as a signed fraction of max torque) recorded; "
                     + ", ".join(f"{e.joint} {e.min:+.2f}…{e.max:+.2f}" for e in c.effort) + ".")
    return ["", *lines] if lines else []


# LeRobot's SO-101 default normalisation (MotorNormMode.RANGE_M100_100 for the body joints,
# RANGE_0_100 for the gripper): the fallback "available" range when the dataset carries no limits.
SO101_FALLBACK = {
    "shoulder_pan": (-100.0, 100.0), "shoulder_lift": (-100.0, 100.0), "elbow_flex": (-100.0, 100.0),
    "wrist_flex": (-100.0, 100.0), "wrist_roll": (-100.0, 100.0), "gripper": (0.0, 100.0),
}
LIMITS_KEYS = ("joint_limits",)  # info.json key: {"<joint>.pos" or "<joint>": [lo, hi]}
CALIBRATION_KEY = "calibration"  # info.json key: the follower's calibration (range_min/max in raw steps)
OUTLIER_IQR = 1.5  # Tukey's fence on distances from the mean start: > Q3 + 1.5 * IQR


@dataclass
class JointRange:
    joint: str
    visited_min: float
    visited_max: float
    available_min: float | None
    available_max: float | None
    available_source: str  # "metadata", "calibration", "so101-default" or "unknown"

    @property
    def visited(self) -> float:
        return self.visited_max - self.visited_min

    @property
    def available(self) -> float | None:
        if self.available_min is None or self.available_max is None:
            return None
        return self.available_max - self.available_min

    @property
    def share(self) -> float | None:
        avail = self.available
        return None if not avail else self.visited / avail

    @property
    def exceeds_available(self) -> bool:
        if self.available_min is None or self.available_max is None:
            return False
        return self.visited_min < self.available_min or self.visited_max > self.available_max

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "visited": self.visited, "available": self.available, "share": self.share,
                "exceeds_available": self.exceeds_available}


@dataclass
class StartSpread:
    joint: str
    min: float
    max: float
    span: float
    std: float


@dataclass
class AuditReport:
    dataset: str
    fps: float
    episodes: int
    frames: int
    seconds: float
    state_feature: str
    action_feature: str
    length_frames: dict[str, float]
    length_seconds: dict[str, float]
    dead_share: float
    dead_frames: int
    leading_dead_median: float
    leading_dead_max: int
    leading_dead_max_episode: int
    joint_ranges: list[JointRange]
    start_spread: list[StartSpread]
    episode_index: list[int]
    episode_lengths: list[int]
    leading_dead: list[int]
    start_states: list[list[float]]
    start_distance: list[float]
    outlier_fence: float
    outliers: list[int]
    notes: list[str] = field(default_factory=list)
    content: ContentAudit = field(default_factory=ContentAudit)  # camera/tracking lag, effort, trimmed
    frame_contract: FrameContract | None = None  # the lag of the state behind the action (`frame_contract.py`)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["frame_contract"] = None if self.frame_contract is None else self.frame_contract.to_dict()
        d["joint_ranges"] = [j.to_dict() for j in self.joint_ranges]
        d["leading_dead_seconds"] = {"median": self.leading_dead_median / self.fps,
                                     "max": self.leading_dead_max / self.fps}
        return d


# --------------------------------------------------------------------------- computation
def _bit_identical_to_previous(values: np.ndarray, spans: EpisodeSpans) -> np.ndarray:
    """same[k]: row k equals row k-1 bit for bit and both are in one episode (row 0 never)."""
    v = np.ascontiguousarray(values)
    if v.ndim == 1:
        v = v[:, None]
    width = v.dtype.itemsize
    as_int = v.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[width])
    same = np.zeros(len(v), dtype=bool)
    same[1:] = np.all(as_int[1:] == as_int[:-1], axis=1)
    same[spans.start] = False
    return same


def _leading_dead(same: np.ndarray, spans: EpisodeSpans) -> np.ndarray:
    """Per episode: how many frames after the first carry the first frame's command unchanged."""
    breaks = np.flatnonzero(~same)  # includes every episode start
    nxt = np.searchsorted(breaks, spans.start, side="right")
    first_change = np.where(nxt < len(breaks), breaks[np.minimum(nxt, len(breaks) - 1)], len(same))
    first_change = np.minimum(first_change, spans.stop)
    return (first_change - spans.start - 1).astype(np.int64)


def _calibration_limits(ds: LeRobotDataset) -> dict[str, tuple[float, float]]:
    """The follower's calibrated range in LeRobot units, from info.json `calibration` if present.

    Accepts `ArmCalibration.to_dict()` (or LeRobot's calibration JSON), or {"follower": that}.
    """
    doc = ds.info.get(CALIBRATION_KEY)
    if isinstance(doc, dict) and isinstance(doc.get("follower"), dict):
        doc = doc["follower"]
    if not isinstance(doc, dict):
        return {}
    try:
        arm = parse_calibration(doc, f"{ds.root / 'meta/info.json'}: {CALIBRATION_KEY}", default_arm_id="follower")
    except CalibrationError as exc:
        raise DatasetError(str(exc)) from None
    out = {}
    for j in arm.joints:
        a, b = float(j.raw_to_lerobot(j.range_min)), float(j.raw_to_lerobot(j.range_max))
        out[j.name] = (min(a, b), max(a, b))
    return out


def available_ranges(ds: LeRobotDataset, feature: str) -> list[tuple[float | None, float | None, str]]:
    """(lo, hi, source) per joint: limits metadata, else calibration, else the SO-101 default, else unknown."""
    limits: dict[str, Any] = {}
    for key in LIMITS_KEYS:
        if isinstance(ds.info.get(key), dict):
            limits = ds.info[key]
    calibrated = _calibration_limits(ds)
    out: list[tuple[float | None, float | None, str]] = []
    for name in ds.joint_names(feature):
        joint = name.removesuffix(".pos")
        found = limits.get(name, limits.get(joint))
        if found is not None and len(found) == 2:
            out.append((float(found[0]), float(found[1]), "metadata"))
        elif joint in calibrated:
            out.append((*calibrated[joint], "calibration"))
        elif joint in SO101_FALLBACK:
            lo, hi = SO101_FALLBACK[joint]
            out.append((lo, hi, "so101-default"))
        else:
            out.append((None, None, "unknown"))
    return out


def _summary(values: np.ndarray) -> dict[str, float]:
    lo, hi = float(values.min()), float(values.max())
    return {"min": lo, "median": float(np.median(values)), "max": hi, "max_over_min": hi / lo if lo else float("inf")}


def pick_features(ds: LeRobotDataset, state: str | None = None, action: str | None = None) -> tuple[str, str]:
    """The state and action columns: LeRobot's names unless told otherwise (a feature our layout
    renamed, by any of its names), as the dataset names them."""
    found = []
    for name in (state or STATE, action or ACTION):
        stored = ds.feature_name(name)
        if stored is None:
            raise DatasetError(f"{ds.root}: no feature {name!r} (features: {', '.join(ds.features)})")
        found.append(stored)
    return found[0], found[1]


@dataclass
class Loaded:
    """The columns every report needs, with episodes made contiguous and checked against metadata."""

    ds: LeRobotDataset
    spans: EpisodeSpans
    state: np.ndarray
    action: np.ndarray
    state_feature: str
    action_feature: str
    notes: list[str] = field(default_factory=list)

    @property
    def start_states(self) -> np.ndarray:
        return self.state[self.spans.start].astype(np.float64)


def load(ds: LeRobotDataset, state: str | None = None, action: str | None = None) -> Loaded:
    """Read episode_index/frame_index/index + state + action in one projection and cross-check lengths."""
    state, action = pick_features(ds, state, action)
    wanted = ["episode_index", state, action]
    extra = [c for c in ("frame_index", "index") if ds.has_column(c)]
    cols = ds.columns(wanted + extra)
    spans = episode_spans(cols["episode_index"], cols.get("frame_index"))
    problems = check_lengths(ds, spans, cols.get("index"))
    if problems:
        raise DatasetError(f"{ds.root}: episode lengths disagree with the data:\n  " + "\n  ".join(problems))
    notes = [] if spans.order is None else ["rows were not in episode/frame order; sorted before analysis"]
    return Loaded(ds, spans, spans.take(cols[state]), spans.take(cols[action]), state, action, notes)


def audit(ds: LeRobotDataset, state: str | None = None, action: str | None = None) -> AuditReport:
    data = load(ds, state, action)
    spans, fps = data.spans, ds.fps
    lengths = spans.lengths
    if len(lengths) == 0:
        raise DatasetError(f"{ds.root}: dataset has no frames")
    same = _bit_identical_to_previous(data.action, spans)
    leading = _leading_dead(same, spans)
    vis_min = np.nanmin(data.state, axis=0).astype(np.float64)
    vis_max = np.nanmax(data.state, axis=0).astype(np.float64)
    names = ds.joint_names(data.state_feature)
    ranges = [
        JointRange(n, float(a), float(b), lo, hi, src)
        for n, a, b, (lo, hi, src) in zip(
            names, vis_min, vis_max, available_ranges(ds, data.state_feature), strict=True
        )
    ]
    starts = data.start_states
    spread = [StartSpread(n, float(starts[:, j].min()), float(starts[:, j].max()),
                          float(np.ptp(starts[:, j])), float(starts[:, j].std()))
              for j, n in enumerate(names)]
    distance = np.linalg.norm(starts - starts.mean(axis=0), axis=1)
    q1, q3 = np.percentile(distance, [25, 75])
    fence = float(q3 + OUTLIER_IQR * (q3 - q1))
    outliers = [int(e) for e, d in zip(spans.episode_index, distance, strict=True) if d > fence]
    worst = int(np.argmax(leading))
    notes = data.notes + [
        f"{r.joint}: visited [{r.visited_min:.2f}, {r.visited_max:.2f}] exceeds the {r.available_source} "
        f"available range [{r.available_min}, {r.available_max}]"
        for r in ranges
        if r.exceeds_available
    ]
    return AuditReport(
        dataset=str(ds.root),
        fps=fps,
        episodes=len(lengths),
        frames=int(lengths.sum()),
        seconds=float(lengths.sum() / fps),
        state_feature=data.state_feature,
        action_feature=data.action_feature,
        length_frames=_summary(lengths.astype(np.float64)),
        length_seconds={
            k: (v / fps if k != "max_over_min" else v) for k, v in _summary(lengths.astype(np.float64)).items()
        },
        dead_share=float(same.sum() / len(same)),
        dead_frames=int(same.sum()),
        leading_dead_median=float(np.median(leading)),
        leading_dead_max=int(leading[worst]),
        leading_dead_max_episode=int(spans.episode_index[worst]),
        joint_ranges=ranges,
        start_spread=spread,
        episode_index=[int(e) for e in spans.episode_index],
        episode_lengths=[int(n) for n in lengths],
        leading_dead=[int(n) for n in leading],
        start_states=starts.tolist(),
        start_distance=[float(d) for d in distance],
        outlier_fence=fence,
        outliers=outliers,
        notes=notes,
        content=content_audit(ds, [int(e) for e in spans.episode_index], names),
        frame_contract=check_contract(ds, spans, data.state, data.action, names),
    )


# --------------------------------------------------------------------------- output
def format_text(r: AuditReport) -> str:
    lf, ls = r.length_frames, r.length_seconds
    lines = [
        f"dataset {r.dataset}  ({r.fps:g} fps; state={r.state_feature}, action={r.action_feature})",
        f"episodes            {r.episodes}",
        f"frames              {r.frames}  ({r.seconds:.1f} s)",
        f"episode length      min {lf['min']:.0f}  median {lf['median']:.1f}  max {lf['max']:.0f} frames"
        f"  ({ls['min']:.2f} / {ls['median']:.2f} / {ls['max']:.2f} s), max/min {lf['max_over_min']:.2f}",
        f"dead air            {100 * r.dead_share:.1f} % of frames ({r.dead_frames}) repeat the previous action "
        "bit for bit",
        f"leading dead        median {r.leading_dead_median:g} frames ({r.leading_dead_median / r.fps:.2f} s), "
        f"max {r.leading_dead_max} ({r.leading_dead_max / r.fps:.2f} s) in episode {r.leading_dead_max_episode}",
        "",
        f"{'joint':<18}{'visited':>20}{'span':>9}{'available':>20}{'share':>8}   source",
    ]
    for j in r.joint_ranges:
        avail = "?" if j.available is None else f"[{j.available_min:g}, {j.available_max:g}]"
        share = "?" if j.share is None else f"{100 * j.share:.0f} %"
        lines.append(f"{j.joint:<18}{f'[{j.visited_min:.2f}, {j.visited_max:.2f}]':>20}{j.visited:>9.2f}"
                     f"{avail:>20}{share:>8}   {j.available_source}")
    lines += ["", f"{'start state':<18}{'min':>10}{'max':>10}{'span':>9}{'std':>9}"]
    lines += [f"{s.joint:<18}{s.min:>10.2f}{s.max:>10.2f}{s.span:>9.2f}{s.std:>9.2f}" for s in r.start_spread]
    d = np.asarray(r.start_distance)
    lines += ["", f"distance from mean start: median {np.median(d):.2f}, max {d.max():.2f}, "
              f"outlier fence (Q3 + {OUTLIER_IQR} IQR) {r.outlier_fence:.2f}"]
    if r.outliers:
        by_ep = dict(zip(r.episode_index, r.start_distance, strict=True))
        lines.append("outliers: " + ", ".join(f"episode {e} ({by_ep[e]:.2f})" for e in r.outliers))
    else:
        lines.append("outliers: none")
    extra = format_lines(r.content, r.episode_index)
    if r.frame_contract is not None:
        extra += contract_lines(r.frame_contract)
    lines += [""] + extra if extra else []
    lines += [f"note: {n}" for n in r.notes]
    return "\n".join(lines)


def write_html(r: AuditReport, out: Path) -> Path:
    """An HTML page beside its PNGs (`<stem>_files/`): the text report and the three plots, each
    explained in a sentence."""
    return write_audit_html(r, format_text(r), out)

