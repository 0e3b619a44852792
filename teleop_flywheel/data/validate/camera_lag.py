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
4. **Confidence**: the standard error of the least-squares lag: from the fit's curvature and its
   residual variance, or the block jackknife's (the estimate with each eighth of the episode left
   out) when that is larger. The curvature assumes independent residuals, and image-motion errors
   run in stretches: on the demo's speed-limited motion it said 2–5 ms where estimates of clean
   episodes scattered by ±20–30 ms, and the jackknife said 12–24 ms; on synthetic reaches both
   overstate the real error (RMS 2.3 ms) by about 1.7×. No
   estimate can be trusted — too few frames, no cell that follows the arm, joints that explain
   less than 70 % of the image motion (below that, a false peak far from the true lag can win: a
   clean demo episode under load once fitted 179 ms at R² 0.56; real estimates fit at 0.75–0.97), a best fit at the
   edge of the search, a lag 100 ms away that fits almost as well (R² within 0.1: motion too smooth to pin the lag), or
   an estimate that moves by more than 15 ms when one eighth of the episode is left out — and the standard error
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
MIN_R2 = 0.7  # the joints must explain most of the (selected) image motion
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


class _Joints:
    """The follower's positions, interpolated linearly at any instants (all joints at once)."""

    def __init__(self, jt: np.ndarray, q: np.ndarray) -> None:
        self.jt, self.q = jt, q
        self.dq = np.diff(q, axis=0)
        self.dt = np.maximum(np.diff(jt), 1e-12)

    def at(self, t: np.ndarray) -> np.ndarray:
        i = np.clip(np.searchsorted(self.jt, t, side="right") - 1, 0, len(self.jt) - 2)
        w = np.clip((t - self.jt[i]) / self.dt[i], 0.0, 1.0)
        return self.q[i] + w[:, None] * self.dq[i]

    def speeds(self, tp: np.ndarray, tc: np.ndarray, tau: float) -> np.ndarray:
        """|q(t_c − τ) − q(t_p − τ)| per joint: how far each joint moved between the two exposures."""
        return np.abs(self.at(tc - tau) - self.at(tp - tau))


class _Fit:
    """R² of least-squares fits of each column of y (plus a constant) by regressors x, for many x:
    the normal equations of the centred data (a 6×6 solve; y centred once)."""

    def __init__(self, y: np.ndarray) -> None:
        self.yc = y - y.mean(axis=0)
        self.ss = (self.yc * self.yc).sum(axis=0)

    def r2(self, x: np.ndarray) -> np.ndarray:
        xc = x - x.mean(axis=0)
        cross = xc.T @ self.yc
        coef = np.linalg.pinv(xc.T @ xc, hermitian=True) @ cross
        return np.where(self.ss > 1e-9, (cross * coef).sum(axis=0) / np.maximum(self.ss, 1e-12), 0.0)


def _r2_without(y: np.ndarray, x: np.ndarray, blocks: list[np.ndarray]) -> np.ndarray:
    """R² of the single column y by x with each block of samples left out in turn (from per-block
    sums: one pass instead of one fit per block)."""
    xa = np.column_stack([x, y])
    sums = np.array([xa[b].sum(axis=0) for b in blocks])
    prods = np.array([xa[b].T @ xa[b] for b in blocks])
    counts = np.array([len(b) for b in blocks], float)
    out = np.empty(len(blocks))
    for k in range(len(blocks)):
        n = counts.sum() - counts[k]
        s = sums.sum(axis=0) - sums[k]
        c = prods.sum(axis=0) - prods[k] - np.outer(s, s) / n
        gram, cross, ss = c[:-1, :-1], c[:-1, -1], c[-1, -1]
        out[k] = float(cross @ np.linalg.pinv(gram, hermitian=True) @ cross / ss) if ss > 1e-9 else 0.0
    return out


def _peak(lags: np.ndarray, score: np.ndarray) -> float:
    i = int(np.argmax(score))
    if 0 < i < len(score) - 1:
        a, b, c = score[i - 1], score[i], score[i + 1]
        den = a - 2 * b + c
        if den < 0:
            return float(lags[i] + 0.5 * (a - c) / den * (lags[1] - lags[0]))
    return float(lags[i])


def _stderr(m: np.ndarray, fit: Any, lag: float) -> float:
    """Standard error of a least-squares lag: sqrt(2σ² / (d²SSE/dτ²)), σ² the residual variance (s)."""
    h = 0.004
    ss = float(((m - m.mean(axis=0)) ** 2).sum())
    s0, sp, sm = (ss * (1.0 - fit(lag + d)) for d in (0.0, h, -h))
    curvature = (sp + sm - 2 * s0) / h**2
    if curvature <= 0:
        return float("inf")
    return float(np.sqrt(2 * s0 / max(len(m) - 7, 1) / curvature))


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
    joints = _Joints((np.asarray(joint_stamps_ns, np.int64) - t0) / 1e9, q)
    dt = tc - tp
    # A pair across a stall (a 4 s hole) compares two unrelated poses: it says nothing about the lag.
    ok = np.all(np.isfinite(e), axis=1) & (dt > 0) & (dt <= 2.5 * np.median(dt))
    e, tp, tc = e[ok], tp[ok], tc[ok]
    if len(e) < MIN_FRAMES:
        return LagEstimate(None, None, 0.0, n, 0, "too few comparable frames")
    span = search_ms / 1000.0
    coarse = np.arange(-span, span + COARSE_STEP_S / 2, COARSE_STEP_S)
    speeds = [joints.speeds(tp, tc, tau) for tau in coarse]
    by_cell = _Fit(e)
    fits = np.array([by_cell.r2(x) for x in speeds])  # (lags, cells)
    chance = max(0.1, 4.0 * (q.shape[1] + 1) / len(e))
    cells = fits.max(axis=0) > chance
    if not cells.any():
        return LagEstimate(None, None, float(fits.max()), n, 0,
                           "no image motion follows the arm (too little motion to tell)")
    m = e[:, cells].sum(axis=1, keepdims=True)
    total = _Fit(m)

    def fit(tau: float) -> float:
        return float(total.r2(joints.speeds(tp, tc, tau))[0])

    score = np.array([float(total.r2(x)[0]) for x in speeds])
    rough = _peak(coarse, score)
    fine = np.arange(rough - COARSE_STEP_S, rough + COARSE_STEP_S + FINE_STEP_S / 2, FINE_STEP_S)
    fine_score = np.array([fit(tau) for tau in fine])
    lag, r2 = _peak(fine, fine_score), float(fine_score.max())
    stderr = _stderr(m, fit, lag)
    note = ""
    if abs(lag) > span - 2 * COARSE_STEP_S:
        note = f"best fit at the edge of the ±{search_ms:g} ms search"
    elif r2 < MIN_R2:
        note = f"the joints explain {100 * r2:.0f} % of the image motion (< {100 * MIN_R2:.0f} %)"
    elif (far := score[np.abs(coarse - lag) >= PROMINENCE_AT_S]).size and r2 - far.max() < MIN_PROMINENCE:
        note = (f"a lag {PROMINENCE_AT_S * 1000:.0f} ms away fits almost as well (R² {far.max():.2f} vs {r2:.2f}): "
                "the motion is too smooth to tell")
    else:
        left_out = _jackknife(m, joints, tp, tc, lag)
        spread = float(np.abs(left_out - lag).max())
        if spread > max(JACKKNIFE_MS / 1000, 5 * stderr):
            note = f"leaving out 1/{BLOCKS} of the episode moves the estimate by {spread * 1000:.0f} ms"
        # The curvature's error assumes independent residuals; image motion errors run in stretches
        # (a slow phase, a blurred reach), so the block jackknife's error is the honest one when larger.
        stderr = max(stderr, float(np.sqrt((BLOCKS - 1) / BLOCKS * ((left_out - left_out.mean()) ** 2).sum())))
    if note:
        stderr = max(stderr, span)
    return LagEstimate(round(lag * 1000, 2), round(min(stderr, span) * 1000, 2), round(r2, 4), n, int(cells.sum()),
                       note)


def _jackknife(m: np.ndarray, joints: _Joints, tp: np.ndarray, tc: np.ndarray, lag: float) -> np.ndarray:
    """The estimate with each of BLOCKS stretches of the episode left out in turn (s): a lag that
    only one part of the episode supports is no estimate, and their spread is its standard error."""
    lags = np.arange(lag - 0.03, lag + 0.0301, 0.002)
    blocks = np.array_split(np.arange(len(m)), BLOCKS)
    scores = np.array([_r2_without(m[:, 0], joints.speeds(tp, tc, tau), blocks) for tau in lags])  # (lags, blocks)
    return np.array([_peak(lags, scores[:, k]) for k in range(BLOCKS)])
