"""A camera's clock offset found in its pixels: how far each frame's stamp is from the instant it
shows, estimated against the follower's joint motion (no ROS import).

Stamps can be plausible and still wrong: a camera stamped when the driver got the frame instead of
when it was exposed is 30–40 ms late on every frame, and its receive − stamp latency looks normal
(the seeds' episodes 31–34). The content cannot lie that way: when the arm moves, the image changes.

Method (all on the episode's own header stamps):

1. **Motion energy**: every image decoded small (grey, ≤ ~80 px wide: the validator's 1/8-scale
   JPEG decode), the absolute difference of consecutive images averaged over an 8×8 grid of cells:
   `E[i, c]` is how much cell c changed between frames i and i+1, stamped (t_i, t_i+1).
2. **Joint speed** for a candidate lag τ: `|q_j(t_i+1 − τ) − q_j(t_i − τ)|` per joint j, the
   follower's positions linearly interpolated (its samples come at 100–500 Hz, so τ is continuous).
3. The cells that follow the arm are kept (regressed on the six joint speeds, R² above chance at
   some τ): a burned-in clock, a flickering light or a static background follows no joint and is
   weighed out. Their summed energy is regressed on the six joint speeds (a joint the camera cannot
   see gets no weight) for τ over ±`search_ms`: the lag is the τ of the best fit (5 ms steps, then
   0.5 ms, then a parabola through the peak).
4. **Confidence**: the standard error of the least-squares lag (from the fit's curvature and its
   residual variance; on synthetic episodes it overstates the real error by about 1.5×). No
   estimate can be trusted — too few frames, no cell that follows the arm, joints that explain
   less than half of the image motion, a best fit at the edge of the search, a lag 100 ms away
   that fits almost as well (R² within 0.1: motion too smooth to pin the lag), or an estimate that
   moves by more than 15 ms when one eighth of the episode is left out — and the standard error
   is set to the search span. A standard error above the caller's bound means the episode has too
   little motion to tell (the validator warns; it never passes or rejects on it).

Sign: `lag_ms > 0` means the camera lags the joints (each frame shows the arm as it was `lag_ms`
before its stamp: stamped late); `< 0`, it leads them (stamped early).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import cv2
import numpy as np

GRID = 8
BLOCKS = 8
MIN_FRAMES = 30
COARSE_STEP_S = 0.005
FINE_STEP_S = 0.0005
MIN_R2 = 0.5  # the joints must explain at least half of the (selected) image motion
PROMINENCE_AT_S, MIN_PROMINENCE = 0.1, 0.1  # 100 ms away the fit must explain >= 10 % less
JACKKNIFE_MS = 15.0


@dataclass(frozen=True)
class LagEstimate:
    """One camera's lag behind the follower's joints, from the content."""

    lag_ms: float | None  # None: no estimate at all
    stderr_ms: float | None  # jackknife standard error
    r2: float  # fit of the image motion by the joint speeds at the estimate
    frames: int
    cells: int  # grid cells whose motion follows the arm
    note: str = ""  # why there is no (trustworthy) estimate

    def confident(self, max_stderr_ms: float) -> bool:
        return self.lag_ms is not None and self.stderr_ms is not None and self.stderr_ms <= max_stderr_ms

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def __str__(self) -> str:
        if self.lag_ms is None:
            return f"unknown ({self.note})"
        return f"{self.lag_ms:+.1f} ± {self.stderr_ms or 0.0:.1f} ms"


def small_grey(jpeg: bytes) -> np.ndarray | None:
    """The 1/8-scale grey decode the validator already makes of every JPEG (None: undecodable)."""
    buf = np.frombuffer(jpeg, np.uint8)
    return cv2.imdecode(buf, cv2.IMREAD_REDUCED_GRAYSCALE_8) if buf.size else None


class MotionEnergy:
    """Accumulates the per-cell absolute difference of consecutive small images."""

    def __init__(self) -> None:
        self._prev: np.ndarray | None = None
        self.rows: list[np.ndarray] = []

    def add(self, image: np.ndarray) -> None:
        img = image.astype(np.float32)
        if self._prev is not None and self._prev.shape == img.shape:
            self.rows.append(_cells(np.abs(img - self._prev)))
        elif self._prev is not None:
            self.rows.append(np.full(GRID * GRID, np.nan, np.float32))  # a size change: no difference
        self._prev = img

    def energy(self) -> np.ndarray:
        return np.array(self.rows, np.float64).reshape(len(self.rows), GRID * GRID)


def _cells(diff: np.ndarray) -> np.ndarray:
    h, w = diff.shape[:2]
    rows = np.linspace(0, h, GRID + 1).astype(int)[:-1]
    cols = np.linspace(0, w, GRID + 1).astype(int)[:-1]
    sums = np.add.reduceat(np.add.reduceat(diff, rows, axis=0), cols, axis=1)
    counts = np.outer(np.diff(np.append(rows, h)), np.diff(np.append(cols, w)))
    return (sums / np.maximum(counts, 1)).reshape(-1).astype(np.float32)


def _speeds(jt: np.ndarray, q: np.ndarray, tp: np.ndarray, tc: np.ndarray, tau: float) -> np.ndarray:
    return np.abs(np.stack([np.interp(tc - tau, jt, q[:, j]) - np.interp(tp - tau, jt, q[:, j])
                            for j in range(q.shape[1])], axis=1))


def _r2(y: np.ndarray, x: np.ndarray) -> np.ndarray:
    """R² of a least-squares fit of each column of y by x (plus a constant); 0 for a constant column."""
    design = np.column_stack([np.ones(len(x)), x])
    coef, *_ = np.linalg.lstsq(design, y, rcond=None)
    ss = ((y - y.mean(0)) ** 2).sum(0)
    res = ((y - design @ coef) ** 2).sum(0)
    return np.where(ss > 1e-9, 1.0 - res / np.maximum(ss, 1e-12), 0.0)


def _peak(lags: np.ndarray, score: np.ndarray) -> float:
    i = int(np.argmax(score))
    if 0 < i < len(score) - 1:
        a, b, c = score[i - 1], score[i], score[i + 1]
        den = a - 2 * b + c
        if den < 0:
            return float(lags[i] + 0.5 * (a - c) / den * (lags[1] - lags[0]))
    return float(lags[i])


def _best(m: np.ndarray, jt: np.ndarray, q: np.ndarray, tp: np.ndarray, tc: np.ndarray, lo: float, hi: float,
          step: float) -> tuple[float, float]:
    lags = np.arange(lo, hi + step / 2, step)
    score = np.array([_r2(m, _speeds(jt, q, tp, tc, tau))[0] for tau in lags])
    return _peak(lags, score), float(score.max())


def _sse(m: np.ndarray, jt: np.ndarray, q: np.ndarray, tp: np.ndarray, tc: np.ndarray, tau: float) -> float:
    x = _speeds(jt, q, tp, tc, tau)
    design = np.column_stack([np.ones(len(x)), x])
    coef, *_ = np.linalg.lstsq(design, m, rcond=None)
    return float(((m - design @ coef) ** 2).sum())


def _stderr(m: np.ndarray, jt: np.ndarray, q: np.ndarray, tp: np.ndarray, tc: np.ndarray, lag: float) -> float:
    """Standard error of a least-squares lag: σ²·2 / (d²SSE/dτ²), σ² the residual variance (s)."""
    h = 0.004
    s0 = _sse(m, jt, q, tp, tc, lag)
    curvature = (_sse(m, jt, q, tp, tc, lag + h) + _sse(m, jt, q, tp, tc, lag - h) - 2 * s0) / h**2
    if curvature <= 0:
        return float("inf")
    return float(np.sqrt(2 * s0 / max(len(m) - q.shape[1] - 1, 1) / curvature))


def estimate_lag(image_stamps_ns: np.ndarray, energy: np.ndarray, joint_stamps_ns: np.ndarray,
                 joint_positions: np.ndarray, search_ms: float = 200.0) -> LagEstimate:
    """The camera's lag behind the joints (module docstring). `energy[i]` belongs to the image pair
    (i, i+1); joint positions are the follower's, in any unit, sorted by stamp."""
    stamps = np.asarray(image_stamps_ns, np.int64)
    e = np.asarray(energy, np.float64)
    q = np.nan_to_num(np.asarray(joint_positions, np.float64))
    n = len(e)
    if n < MIN_FRAMES or len(stamps) != n + 1 or len(joint_stamps_ns) < 2 or q.ndim != 2:
        return LagEstimate(None, None, 0.0, n, 0, f"too few frames ({n} image pairs; {MIN_FRAMES} needed)")
    t0 = int(stamps[0])
    tp, tc = (stamps[:-1] - t0) / 1e9, (stamps[1:] - t0) / 1e9
    jt = (np.asarray(joint_stamps_ns, np.int64) - t0) / 1e9
    dt = tc - tp
    # A pair across a stall (a 4 s hole) compares two unrelated poses: it says nothing about the lag.
    ok = np.all(np.isfinite(e), axis=1) & (dt > 0) & (dt <= 2.5 * np.median(dt))
    e, tp, tc = e[ok], tp[ok], tc[ok]
    if len(e) < MIN_FRAMES:
        return LagEstimate(None, None, 0.0, n, 0, "too few comparable frames")
    span = search_ms / 1000.0
    coarse = np.arange(-span, span + COARSE_STEP_S / 2, COARSE_STEP_S)
    fits = np.array([_r2(e, _speeds(jt, q, tp, tc, tau)) for tau in coarse])  # (lags, cells)
    chance = max(0.1, 4.0 * (q.shape[1] + 1) / len(e))
    cells = fits.max(axis=0) > chance
    if not cells.any():
        return LagEstimate(None, None, float(fits.max()), n, 0,
                           "no image motion follows the arm (too little motion to tell)")
    m = e[:, cells].sum(axis=1, keepdims=True)
    score = np.array([_r2(m, _speeds(jt, q, tp, tc, tau))[0] for tau in coarse])
    rough = _peak(coarse, score)
    lag, r2 = _best(m, jt, q, tp, tc, rough - 2 * COARSE_STEP_S, rough + 2 * COARSE_STEP_S, FINE_STEP_S)
    stderr = _stderr(m, jt, q, tp, tc, lag)
    note = ""
    if abs(lag) > span - 2 * COARSE_STEP_S:
        note = f"best fit at the edge of the ±{search_ms:g} ms search"
    elif r2 < MIN_R2:
        note = f"the joints explain {100 * r2:.0f} % of the image motion (< {100 * MIN_R2:.0f} %)"
    elif (far := score[np.abs(coarse - lag) >= PROMINENCE_AT_S]).size and r2 - far.max() < MIN_PROMINENCE:
        note = (f"a lag {PROMINENCE_AT_S * 1000:.0f} ms away fits almost as well (R² {far.max():.2f} vs {r2:.2f}): "
                "the motion is too smooth to tell")
    else:
        spread = _jackknife_spread(m, jt, q, tp, tc, lag)
        if spread > max(JACKKNIFE_MS / 1000, 5 * stderr):
            note = f"leaving out 1/{BLOCKS} of the episode moves the estimate by {spread * 1000:.0f} ms"
    if note:
        stderr = max(stderr, span)
    return LagEstimate(round(lag * 1000, 2), round(min(stderr, span) * 1000, 2), round(r2, 4), n, int(cells.sum()),
                       note)


def _jackknife_spread(m: np.ndarray, jt: np.ndarray, q: np.ndarray, tp: np.ndarray, tc: np.ndarray,
                      lag: float) -> float:
    """The largest move of the estimate when one of BLOCKS stretches of the episode is left out:
    a lag that only one part of the episode supports is no estimate."""
    worst = 0.0
    idx = np.arange(len(m))
    for block in np.array_split(idx, BLOCKS):
        keep = np.setdiff1d(idx, block)
        tau, _ = _best(m[keep], jt, q, tp[keep], tc[keep], lag - 0.03, lag + 0.03, 0.002)
        worst = max(worst, abs(tau - lag))
    return worst
