"""CLOCK_DRIFT across a session: a clock offset that trends with time into the session (no ROS import).

The seeds: an offset "that drifts over a session produces a dataset whose alignment error is a
function of how far into the session an episode was recorded". Each episode's own checks bound its
offset (CLOCK_OFFSET) and how far the PTP offset moved inside it (CLOCK_DRIFT, `task_checks`); a
slow drift hides under both, each episode a little worse than the last. So the batch is grouped
into sessions and, per session, a straight line is fitted (ordinary least squares) to each clock
signal against the time into the session:

- the recorded PTP/chrony offset: `ptp_offset_ns` at the episode's start and, where the recorder
  wrote it, `extra["ptp_offset_end_ns"]` at its end (two points per episode);
- each camera's lag behind the joints, estimated from its content (`camera_lag.py`): one point per
  episode whose estimate is trustworthy (standard error within `camera_lag_max_stderr_ms`), one
  line per run of one camera instance (`lag_pool`, signal `camera_lag/<camera>@<run>`): a restart
  that steps the lag is judged by the instances' pools (CLOCK_OFFSET), not as a drift.

**A session** is the episodes of one rig (`rig_id`, and its ROS `namespace`) started on one UTC day
(the recorder writes no session id; bags without episode metadata belong to none). The slope is in
ms per hour with its standard error (from the residuals: the per-episode estimates' own errors are
not trusted, they understate the scatter); the drift is the slope times the session's span. Every
episode of a session is rejected CLOCK_DRIFT, naming the slope, when a signal's slope is beyond
`session_drift_min_t` standard errors and its drift beyond `session_drift_max_ms` (PTP) or
`session_lag_drift_max_ms` (camera lag), with at least `session_drift_min_episodes` episodes: which
of them are still aligned cannot be told from the stamps once the clock is known to walk. Every
fit, flagged or not, is in the validation JSON's summary (`sessions`).
"""
from __future__ import annotations

import math
import time
from collections import defaultdict
from dataclasses import asdict, dataclass
from typing import Any, Protocol

import numpy as np

from teleop_flywheel.core.episode import EpisodeMeta
from teleop_flywheel.data.validate.reasons import CLOCK_DRIFT, Reason, ValidateConfig
from teleop_flywheel.data.validate.task_checks import PTP_END_KEY

NS_PER_H = 3600 * 10**9
PTP = "ptp_offset"
CAMERA_LAG = "camera_lag/"


class Judged(Protocol):
    """What the fit reads of an episode's report (`validator.EpisodeReport`)."""

    session: str
    clock_points: dict[str, list[list[float]]]
    reasons: list[Reason]
    error: str | None


def session_of(ep: EpisodeMeta | None, foreign: bool) -> str:
    """`rig_id[namespace] YYYY-MM-DD` (UTC day of the episode's start); "" for none."""
    if ep is None or foreign:
        return ""
    start = ep.started_ros_ns or ep.clock_start.get("wall_ns", 0)
    if not start:
        return ""
    day = time.strftime("%Y-%m-%d", time.gmtime(start / 1e9))
    return f"{ep.rig_id or '?'}{ep.namespace} {day}"


def clock_points(ep: EpisodeMeta | None, camera_lag: dict[str, dict[str, Any]]) -> dict[str, list[list[float]]]:
    """signal -> [[wall ns, value ms, its standard error ms], ...] of one episode (what the session
    fit reads; the recorded PTP offset's error is taken as 0)."""
    if ep is None or not ep.started_ros_ns:
        return {}
    out: dict[str, list[list[float]]] = {}
    end = ep.extra.get(PTP_END_KEY)
    if ep.ptp_offset_ns is not None:
        out[PTP] = [[float(ep.started_ros_ns), ep.ptp_offset_ns / 1e6, 0.0]]
        if isinstance(end, int) and not isinstance(end, bool) and ep.stopped_ros_ns:
            out[PTP].append([float(ep.stopped_ros_ns), end / 1e6, 0.0])
    for cam, est in sorted(camera_lag.items()):
        lag, err = est.get("lag_ms"), est.get("stderr_ms")
        if lag is not None and err is not None:
            out[CAMERA_LAG + cam] = [[float(ep.started_ros_ns), float(lag), float(err)]]
    return out


@dataclass(frozen=True)
class DriftFit:
    """One signal's straight line over one session."""

    session: str
    signal: str  # "ptp_offset" or "camera_lag/<camera>@<run>"
    episodes: int
    points: int
    span_h: float
    slope_ms_per_h: float
    stderr_ms_per_h: float  # inf: too few points to tell
    drift_ms: float  # slope x span
    bound_ms: float
    flagged: bool

    @property
    def t(self) -> float:
        return abs(self.slope_ms_per_h) / self.stderr_ms_per_h if self.stderr_ms_per_h > 0 else (
            math.inf if self.slope_ms_per_h else 0.0)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["stderr_ms_per_h"] = None if math.isinf(self.stderr_ms_per_h) else self.stderr_ms_per_h
        d["t"] = None if math.isinf(self.t) else self.t
        return d

    def __str__(self) -> str:
        what = "PTP offset" if self.signal == PTP else f"camera {self.signal.removeprefix(CAMERA_LAG)} lag"
        return (f"session {self.session}: {what} drifts {self.slope_ms_per_h:+.3g} ± {self.stderr_ms_per_h:.2g} ms/h "
                f"({self.drift_ms:+.2f} ms over {self.span_h * 60:.0f} min, {self.episodes} episodes)")


def fit(session: str, signal: str, points: list[tuple[int, float, float]], cfg: ValidateConfig) -> DriftFit:
    """The least-squares line through (episode index, wall ns, ms) points."""
    x = np.array([p[1] for p in points], dtype=np.float64)
    y = np.array([p[2] for p in points], dtype=np.float64)
    x = (x - x.min()) / NS_PER_H
    episodes = len({p[0] for p in points})
    span = float(x.max()) if len(x) else 0.0
    bound = cfg.session_drift_max_ms if signal == PTP else cfg.session_lag_drift_max_ms
    sxx = float(np.sum((x - x.mean()) ** 2))
    if len(x) < 3 or sxx <= 0:
        return DriftFit(session, signal, episodes, len(x), span, 0.0, math.inf, 0.0, bound, False)
    slope = float(np.sum((x - x.mean()) * (y - y.mean())) / sxx)
    resid = y - (y.mean() + slope * (x - x.mean()))
    stderr = math.sqrt(float(resid @ resid) / (len(x) - 2) / sxx)
    drift = slope * span
    out = DriftFit(session, signal, episodes, len(x), span, slope, stderr, drift, bound, False)
    flagged = (episodes >= cfg.session_drift_min_episodes and out.t > cfg.session_drift_min_t
               and abs(drift) > bound)
    return DriftFit(session, signal, episodes, len(x), span, slope, stderr, drift, bound, flagged)


def _run(r: Any, signal: str) -> str:
    """A camera's lag drifts within one run of one camera instance (`lag_pool`): a restart that
    steps it is a new instance, judged by its own pool, not a drift. "" for PTP and unpooled cameras."""
    if not signal.startswith(CAMERA_LAG):
        return ""
    run = getattr(r, "camera_pool", {}).get(signal.removeprefix(CAMERA_LAG), {}).get("run")
    return "" if run is None else f"@{run}"


def apply_session_drift(reports: list[Any], cfg: ValidateConfig) -> list[DriftFit]:
    """Fit every signal of every session of the batch; CLOCK_DRIFT on each episode of a flagged
    session. Returns every fit (the summary's `sessions`)."""
    sessions: dict[str, list[Judged]] = defaultdict(list)
    for r in reports:
        if r.error is None and r.session:
            sessions[r.session].append(r)
    fits = []
    for key, members in sorted(sessions.items()):
        signals: dict[str, list[tuple[int, float, float]]] = defaultdict(list)
        for i, r in enumerate(members):
            for signal, pts in r.clock_points.items():
                signals[signal + _run(r, signal)] += [(i, p[0], p[1]) for p in pts
                                                      if signal == PTP or p[2] <= cfg.camera_lag_max_stderr_ms]
        session_fits = [fit(key, s, pts, cfg) for s, pts in sorted(signals.items()) if pts]
        fits += session_fits
        for f in (f for f in session_fits if f.flagged):
            for r in members:
                r.reasons.append(Reason(CLOCK_DRIFT, f"{f} beyond {f.bound_ms:g} ms", f.to_dict()))
    return fits
