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
   some τ): a flickering light or a static background follows no joint and is weighed out. A clock
   in the picture (the synthetic camera's timecode strip, a real camera's on-screen time) can slip
   through: where its digits roll over, one frame of its cell changes by far more than any other, and
   that one frame lines up with a fast move at one of the 81 searched lags by chance (R² 0.15–0.25,
   above the chance bound, which counts frames as if each carried its share). Summed with the cells
   of the arm, its one spike was most of the image motion the joints could not explain: two clean
   takes of a demo run at 320×240 could not tell (the joints explained 80 % and 85 %), a bench
   episode said +105.8 ms at 78 %. So a cell must also spread its change over more than one frame:
   its participation ratio (Σy²)²/Σy⁴ (y its centred energy) at least `MIN_CHANGE_FRAMES` — 1.01–1.02
   for 9 of the 11 clock cells kept in the screened episodes, 1.2 and more for the arm's cells but two
   whose energy hardly varies (sd < 0.01 against the clock's 1.1–6.2). At 1.5 a cell the arm enters
   once (1.21) went too: a sinusoidal teleop episode moved 1.3 → 7.5 ms, and a
   25 ms session pool of that operator no longer crossed its bound.
   Weighing the cells instead (by their R², R²/(1 − R²), a matched filter, a cross-validated R²) or
   asking each cell's fit to survive leaving out its largest change moved more clean estimates than
   it mended: the plain sum of every cell that follows the arm is what times it. Their summed energy
   is regressed on the six joint speeds for τ over ±`search_ms` (5 ms steps, then 1 ms, then a
   parabola through the best fit): the lag is the τ of the least squared error.
4. **The timing is in the corners.** A speed-limited move is a trapezoid or a minimum-jerk bell:
   smooth in speed, sharp in time only where it starts, stops, ends its acceleration, reverses, or
   where the gripper opens or closes. How much the image changes per radian varies along a move
   (a link turning toward the camera sweeps more pixels), and a constant gain read that as a lag:
   on the demo's motion the constant fit was off by ±20–30 ms on clean episodes. So each joint's
   gain may drift smoothly across the episode (a quadratic in time, per window of at most
   `WINDOW_S`): the slow parts are absorbed by the gains, and what is left to fix τ is where the
   speed changes fast — the corners, weighted by how sharply they change (the score of the fit at
   frame i is its residual times ∂speed/∂τ, the joint acceleration there). `events` counts those
   corners (local peaks of the follower's summed |acceleration| above `EVENT_ACCEL` rad/s²); an
   episode with fewer than `MIN_EVENTS` cannot tell. Nor is the image motion linear in the joint's:
   a thin link that moves further in one frame than it is wide changes no more pixels, so at speed
   the image motion bends below the speed, and a fit linear in speed read the bend as a lag (the
   rig's motion at 640×480, seed 10, true lag 0: −15.3 ± 7.3 ms). Each joint's speed also enters
   through its cube root (a constant gain per window): the image motion may saturate. On 60 rig
   episodes per frame size at ±35 ms: 640×480 rejected alone 112/120 (108 without the term), 95 %
   intervals holding the truth 96.6 % (93.3 %); 320×240 96/120 (94); the teleop operator at 640×480
   43/120 (36), cannot tell 106/180 (114).
5. **The interval.** The standard error is a sandwich over blocks of `BLOCK_S` (the residuals of
   image motion run in stretches, so frames are not independent but blocks about a second apart
   nearly are): Var(τ) = Σ_blocks (Σ_i score_i)² / H², H the curvature of the squared error. From
   G blocks that sum is biased low by (G − 1)/G and its ratio to the truth is Student-t with G − 1
   degrees of freedom, so it is scaled by √(G/(G − 1)) · t₀.₉₇₅(G − 1) / 1.96 (the interval and the
   verdict stay z-based on the scaled error). With fewer than `MIN_BLOCKS` blocks (a 7 s episode
   has 7) there is no estimate: on short episodes the 19 gains fit τ to noise or to a false peak
   while the few blocks' sandwich stays small. A 3 s episode of the synthetic `smooth` motion (~65
   usable frames) said +52 ± 6 ms, its true lag 0; clean 8 s episodes of the bench's rig motion
   were rejected CLOCK_OFFSET 0 of 30 times, 7 s 0 of 12, 6 s 2 of 12 (+35, −26 ms), 5 s 1 of 12,
   4 s 6 of 12 (±125…172 ms at R² 0.98). Gains held to a line or a constant on short episodes
   were no better: a 4 s episode then fell on +50 ms in 4 of 12. To the scaled
   sandwich is added in quadrature `MODEL_ERROR_MS`, the estimator's own error on clean episodes of the rig's
   motion that no residual shows (the gains' shape; measured by `bench/camera_lag.py`, where the
   95 % interval lag ± 1.96 · stderr holds the true lag in the share the benchmark reports). The
   sandwich sees only the curvature of the minimum it stands in; where the squared error is nearly
   flat across tens of ms with shallow local minima (the sinusoidal teleop operator) that curvature
   is sharp and the error small: a clean episode said −29.4 ± 7.0 ms and was rejected, its profile
   within a few per cent from −90 to 0 ms. So the standard error is at least the profile's own width
   (`_profile_stderr`): the farthest searched lag whose squared error exceeds the least by at most
   χ²₁(0.95) residual variances — the variance inflated by 1 + 2 Σ ρ_k for residuals correlated in
   time — is 1.96 standard errors away (that episode: ± 13.1 ms, "cannot tell"; on a reaching
   operator's motion it changes nothing, on the policy's it widens a few seeds' intervals to 12–15 ms,
   one of which missed the truth by 18.8 ms at ± 7.4). No
   estimate — the standard error set to the search span — when there are too few frames, no cell
   follows the arm, the joints explain less than 85 % of the image motion (right fits explain
   92–98 % on the rig's motion; a false peak 100 ms from the truth won at 74 %), the best fit is
   at the edge of the search, fewer than `MIN_BLOCKS` blocks, or too few events.
6. **Another peak that fits as well.** The sandwich measures how sharp the chosen minimum is, not
   whether it is the right one: where the motion does not pin the lag, the squared error over τ has
   several sharp minima of nearly the same depth and the least one wins by the luck of a second or
   two of the episode — a confident estimate 35–175 ms off. That is the simulator's teleop operator
   (every joint a slow sinusoid, the joints reversing at different times: the gains' drift trades
   against τ) and, now and then, the demo's policy with a takeover. Its mark: leaving out one
   one-second block moves the best fit to another minimum. So the profile is also computed with each
   block left out (the gains refitted without it); when one of them moves the best fit by more than
   `PEAK_JUMP_MS` (about a frame interval: another peak, not the wobble of the same one) the episode
   cannot tell. On 24 clean 8 s teleop episodes, estimates confident but wrong by ≥ 35 ms went from 5
   to 1 (that one sits on the same wrong minimum whichever second is left out); on clean rig-motion
   and demo episodes no rejection either way, and 4 more of 54 cannot tell (`bench/camera_lag.py`).
7. **Joints that turn together.** shoulder_lift, elbow_flex and wrist_flex turn about parallel axes,
   so the links after them sweep the image by their combined turn, not by each joint's alone: where
   they move at once (the policy's takeover, when the follower catches up with the hand) six separate
   gains misread it. On the policy's seed 13 at 640×480 the squared error had two minima of the same
   depth, −20 and 0 ms (0.1 % apart), so the profile's width said ± 12.1 ms: cannot tell, at six of
   its nine skews. The pairs |Δq_a ± Δq_b| (a constant gain each per window) model the combined turn,
   but six more gains also fit noise where the arm is a few pixels wide: in every episode they moved
   clean 320×240 estimates to +28.2 ± 7.7 ms (rejected) and +18.3 ms; chosen on every episode by the
   error below, a clean reaching episode's +2.2 ms to −5.5. So the plain design decides wherever it
   can, and only an estimate that cannot tell (a note, or a standard error over `max_stderr_ms`)
   fits the pairs too; their estimate is taken when their fits without each one-second block predict
   that block better than the plain design's (the left-out fits the jump test, 6., already solves)
   and it can tell. No decided estimate changes. Seed 13: the pairs predicted the left-out seconds
   with 0.45 of the plain error, −0.8 ± 9.8 ms; the 320×240 seed that was rejected (plain: cannot
   tell, ± 12.6 ms) keeps the plain fit, the pairs predicting 4.3 times worse.

Sign: `lag_ms > 0` means the camera lags the joints (each frame shows the arm as it was `lag_ms`
before its stamp: stamped late); `< 0`, it leads them (stamped early).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import cv2
import numpy as np

from teleop_flywheel.data.validate.reasons import ValidateConfig

GRID = 8
MIN_FRAMES = 30
COARSE_STEP_S = 0.005
FINE_STEP_S = 0.001
MIN_R2 = 0.85  # the joints must explain most of the (selected) image motion (right fits: 0.92-0.98)
WINDOW_S = 10.0  # each joint's gain is a quadratic in time over windows at most this long
# The scale of the cube-root term (rad per frame pair): any scale fits the same (the term has its own gain);
# this one keeps the columns of the design near the speeds' size, so the solve stays well conditioned.
SATURATION_RAD = 0.05
BLOCK_S = 1.0  # the sandwich's blocks: residuals farther apart than this are nearly independent
MIN_BLOCKS = 7  # fewer one-second blocks: the episode cannot tell (module doc, 5.)
# The 97.5 % quantile of Student's t with 1..10 degrees of freedom (beyond: the Cornish-Fisher series).
T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228)
# The estimator's error on clean rig-motion episodes that the residuals do not show: 107 clean policy and
# demo estimates were off by 6.5 ms RMS where the sandwich said 1.7 (median); a demo run's clean episode
# said +25.7 ± 6.2 ms (true +1.9) and was rejected at 6 ms, not at 7. At 8 ms, ±35 ms fell to 32/40.
MODEL_ERROR_MS = 7.0
EVENT_ACCEL = 1.0  # rad/s², all joints summed: a corner of the motion (start, stop, end of acceleration, reversal)
EVENT_DT_S, EVENT_GAP_S = 0.1, 0.3
MIN_EVENTS = 2
# A cell whose change is spread over fewer frames than this is one frame's: a clock's digits rolling over,
# which lines up with the arm's motion at one of the searched lags by chance (module doc, 3.).
MIN_CHANGE_FRAMES = 1.1
RCOND = 1e-12  # on the Gram matrix: 1e-6 of the largest singular value of the unit-norm design (`_Stack.fits`)
PEAK_JUMP_MS = 30.0  # a left-out block moving the best fit this far: it sits on another peak (module doc, 6.)
# shoulder_lift, elbow_flex and wrist_flex (`so101.JOINT_NAMES` order) turn about parallel axes: the links after
# them sweep the image by their combined turn (module doc, 7.).
PARALLEL_PAIRS = ((1, 2), (2, 3), (1, 3))
Z95 = 1.96
Z_BEYOND = 1.645  # standard errors a lag must exceed its bound by: beyond it with 95 % confidence (one-sided)


@dataclass(frozen=True)
class LagEstimate:
    """One camera's lag behind the follower's joints, from the content."""

    lag_ms: float | None  # None: no estimate at all
    stderr_ms: float | None  # block-sandwich standard error with the model's own error (module doc, 5.)
    r2: float  # fit of the image motion by the joint speeds at the estimate
    frames: int
    cells: int  # grid cells whose motion follows the arm
    note: str = ""  # why there is no (trustworthy) estimate
    events: int = 0  # corners of the motion that carry timing (module doc, 4.)
    jump_ms: float = 0.0  # how far leaving out one one-second block moves the best fit, at most (module doc, 6.)

    def confident(self, max_stderr_ms: float) -> bool:
        return self.lag_ms is not None and self.stderr_ms is not None and self.stderr_ms <= max_stderr_ms

    def interval(self) -> tuple[float, float] | None:
        """The 95 % interval of the lag (ms), None without an estimate."""
        if self.lag_ms is None or self.stderr_ms is None:
            return None
        return self.lag_ms - Z95 * self.stderr_ms, self.lag_ms + Z95 * self.stderr_ms

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def __str__(self) -> str:
        if self.lag_ms is None:
            return f"unknown ({self.note})"
        return f"{self.lag_ms:+.1f} ± {self.stderr_ms or 0.0:.1f} ms"


def beyond(lag_ms: float | None, stderr_ms: float | None, bound_ms: float) -> bool:
    """A lag beyond ±bound with 95 % confidence (one-sided: a lag of exactly the bound is called
    beyond 5 % of the time)."""
    return lag_ms is not None and stderr_ms is not None and abs(lag_ms) - bound_ms > Z_BEYOND * stderr_ms


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

    def moved(self, tp: np.ndarray, tc: np.ndarray, tau: float) -> np.ndarray:
        """q(t_c − τ) − q(t_p − τ) per joint: how far, and which way, each joint moved between the two exposures."""
        return self.at(tc - tau) - self.at(tp - tau)

    def speeds(self, tp: np.ndarray, tc: np.ndarray, tau: float) -> np.ndarray:
        """|q(t_c − τ) − q(t_p − τ)| per joint: how far each joint moved between the two exposures."""
        return np.abs(self.moved(tp, tc, tau))


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


def _peak(lags: np.ndarray, score: np.ndarray) -> float:
    i = int(np.argmax(score))
    if 0 < i < len(score) - 1:
        a, b, c = score[i - 1], score[i], score[i + 1]
        den = a - 2 * b + c
        if den < 0:
            return float(lags[i] + 0.5 * (a - c) / den * (lags[1] - lags[0]))
    return float(lags[i])


class _Design:
    """The regressors of the image motion at a lag τ: each joint's speed times 1, u and u² (u the
    time into its window, −1…1), its cube root, and a constant, per window (module doc, 4.); with
    `pairs`, also the joint pairs about parallel axes moving together, |Δq_a ± Δq_b| (module doc, 7.)."""

    def __init__(self, joints: _Joints, tp: np.ndarray, tc: np.ndarray, pairs: bool = False) -> None:
        self.joints, self.tp, self.tc = joints, tp, tc
        self.pairs = [p for p in PARALLEL_PAIRS if pairs and max(p) < joints.q.shape[1]]
        span = float(tp[-1] - tp[0]) or 1.0
        windows = max(1, int(np.ceil(span / WINDOW_S)))
        self.window = np.minimum(((tp - tp[0]) / span * windows).astype(int), windows - 1)
        edges = [tp[self.window == w] for w in range(windows)]
        mid = np.array([(e[0] + e[-1]) / 2 if len(e) else 0.0 for e in edges])
        half = np.array([max((e[-1] - e[0]) / 2, 1e-3) if len(e) else 1.0 for e in edges])
        self.u = (tp - mid[self.window]) / half[self.window]
        self.rows = [np.flatnonzero(self.window == w) for w in range(windows)]
        self.position = np.empty(len(tp), int)  # each frame's index within its window's rows
        for rows in self.rows:
            self.position[rows] = np.arange(len(rows))

    def at(self, tau: float) -> _Stack:
        moved = self.joints.moved(self.tp, self.tc, tau)
        x = np.abs(moved)
        together = np.column_stack([np.abs(moved[:, a] + sign * moved[:, b])
                                    for a, b in self.pairs for sign in (1, -1)] or [np.zeros((len(x), 0))])
        mats = []
        for rows in self.rows:
            xw, u = x[rows], self.u[rows, None]
            mats.append(np.column_stack([xw, xw * u, xw * u * u, np.cbrt(xw * SATURATION_RAD), together[rows],
                                         np.ones((len(rows), 1))]))
        return _Stack(self.rows, mats, self.window, self.position)


@dataclass(frozen=True)
class _Fits:
    """Least-squares fits of y by a `_Stack`: of all frames, and with each set of frames `out[k]` left
    out (its gains refitted without it). `sse` is the whole fit's squared error; per left-out set k,
    `without[k]` the squared error of its fit on the frames it kept and `held_out[k]` on the frames
    it left out."""

    coef: np.ndarray
    sse: float
    without: np.ndarray
    held_out: np.ndarray


@dataclass(frozen=True)
class _Stack:
    """The design at one lag, window by window: every regressor is zero outside its window (module
    doc, 4.), so its least squares are one small problem per window, and so is a left-out second,
    which only changes the windows it lies in. Solved as one matrix, the columns grow with the
    episode and so do the left-out seconds, per lag one pseudo-inverse of a (windows · 55)² Gram
    matrix per second: the cost grows as the fourth power of the length (a 60 s episode's estimate
    took 8-10 s, now 0.7 s, the same to the last digit it reports). `rows[w]` are the
    frames of window w, `mats[w]` its regressors there, the same columns in every window (the
    coefficients run window by window); `window` and `position` say per frame which window holds it
    and where in that window's rows."""

    rows: list[np.ndarray]
    mats: list[np.ndarray]
    window: np.ndarray
    position: np.ndarray

    @property
    def columns(self) -> int:
        return sum(m.shape[1] for m in self.mats)

    def predict(self, coef: np.ndarray) -> np.ndarray:
        out = np.zeros(len(self.window))
        k = 0
        for rows, a in zip(self.rows, self.mats, strict=True):
            out[rows] = a @ coef[k:k + a.shape[1]]
            k += a.shape[1]
        return out

    def fit(self, y: np.ndarray) -> np.ndarray:
        return self.fits(y, np.zeros((0, len(y)), bool)).coef

    def fits(self, y: np.ndarray, out: np.ndarray) -> _Fits:
        """The whole fit and each `out[k]` left out, each as one pseudo-inverse of its whole design
        would solve it: on unit-norm columns, the normal equations without their directions below
        `RCOND` of the largest eigenvalue of that fit's Gram matrix — the whole episode's, so every
        window's, those a set leaves frames out of downdated; `lstsq` would keep directions to 1e-13
        of the largest singular value, which the squared condition of the normal equations cannot
        resolve."""
        window, position = self.window, self.position
        unit, norms, grams, rhss, eigs = [], [], [], [], []
        for rows, a in zip(self.rows, self.mats, strict=True):
            norm = np.linalg.norm(a, axis=0)
            norm[norm == 0] = 1.0
            an = a / norm
            unit.append(an)
            norms.append(norm)
            grams.append(an.T @ an)
            rhss.append(an.T @ y[rows])
            eigs.append(np.linalg.eigh(grams[-1]))
        largest = np.array([float(np.abs(e[0]).max(initial=0.0)) for e in eigs])
        full = [_pinv_solve(e, rhs, RCOND * largest.max(initial=0.0)) / n
                for e, rhs, n in zip(eigs, rhss, norms, strict=True)]
        sse_w = np.array([float(((y[rows] - a @ c) ** 2).sum()) for rows, a, c in zip(self.rows, self.mats, full,
                                                                                     strict=True)])
        sse = float(sse_w.sum())
        without, held_out = np.zeros(len(out)), np.zeros(len(out))
        for k, mask in enumerate(out):
            left = np.flatnonzero(mask)
            touched = np.unique(window[left])
            downdated = {}
            for w in touched:
                local = position[left[window[left] == w]]
                a = unit[w][local]
                downdated[w] = (np.linalg.eigh(grams[w] - a.T @ a), rhss[w] - a.T @ y[self.rows[w][local]], local)
            others = np.delete(largest, touched)
            top = max([float(others.max(initial=0.0))] + [float(np.abs(e[0]).max(initial=0.0))
                                                          for e, _, _ in downdated.values()])
            kept = sse - float(sse_w[touched].sum())
            held = 0.0
            for w, (e, rhs, local) in downdated.items():
                r = y[self.rows[w]] - self.mats[w] @ (_pinv_solve(e, rhs, RCOND * top) / norms[w])
                inside = np.zeros(len(r), bool)
                inside[local] = True
                kept += float(r[~inside] @ r[~inside])
                held += float(r[inside] @ r[inside])
            without[k], held_out[k] = kept, held
        return _Fits(np.concatenate(full) if full else np.zeros(0), sse, without, held_out)


def _pinv_solve(eig: tuple[np.ndarray, np.ndarray], rhs: np.ndarray, cutoff: float) -> np.ndarray:
    """The pseudo-inverse of a symmetric matrix, given its eigendecomposition, applied to rhs: the
    directions whose eigenvalue is at most `cutoff` in size dropped."""
    values, vectors = eig
    large = np.abs(values) > cutoff
    return vectors[:, large] @ ((vectors[:, large].T @ rhs) / values[large])


def _sse(design: _Design, y: np.ndarray, tau: float) -> float:
    a = design.at(tau)
    r = y - a.predict(a.fit(y))
    return float(r @ r)


def _stderr(design: _Design, y: np.ndarray, tau: float) -> float:
    """The block sandwich of the least-squares lag (s; module doc, 5.): each frame's score is the
    change of its squared residual with τ, the gains held at their fit (the envelope theorem)."""
    h = 0.002
    coef = design.at(tau).fit(y)
    plus, minus = y - design.at(tau + h).predict(coef), y - design.at(tau - h).predict(coef)
    score = (plus * plus - minus * minus) / (2 * h)
    curvature = (_sse(design, y, tau + h) + _sse(design, y, tau - h) - 2 * _sse(design, y, tau)) / h**2
    if curvature <= 0:
        return float("inf")
    blocks = _blocks(design.tp)
    per_block = np.bincount(blocks, weights=score)[np.unique(blocks)]
    g = len(per_block)
    if g < 2:
        return float("inf")
    return float(np.sqrt((per_block**2).sum() * g / (g - 1)) / curvature * _t975(g - 1) / Z95)


def _profiles(design: _Design, y: np.ndarray, blocks: np.ndarray, lags: np.ndarray
              ) -> tuple[np.ndarray, list[np.ndarray]]:
    """−(squared error) at each lag: of the whole episode, and with each one-second block left out
    (the gains refitted without it; module doc, 6.)."""
    out = np.stack([blocks == b for b in np.unique(blocks)])
    whole, parts = [], []
    for tau in lags:
        fits = design.at(tau).fits(y, out)
        whole.append(-fits.sse)
        parts.append(-fits.without)
    return np.array(whole), list(np.array(parts).T)


@dataclass(frozen=True)
class _Profile:
    """One design's fit over the searched lags: the best lag, −(squared error) per lag, the same with each
    one-second block left out, and the squared error of each block predicted by the fit without it."""

    design: _Design
    lag: float
    score: np.ndarray
    left_out: list[np.ndarray]
    held_out: float


def _fit_profile(design: _Design, y: np.ndarray, blocks: np.ndarray, lags: np.ndarray) -> _Profile:
    score, left_out = _profiles(design, y, blocks, lags)
    rough = _peak(lags, score)
    fine = np.arange(rough - COARSE_STEP_S, rough + COARSE_STEP_S + FINE_STEP_S / 2, FINE_STEP_S)
    lag = _peak(fine, np.array([-_sse(design, y, tau) for tau in fine]))
    out = np.stack([blocks == b for b in np.unique(blocks)])
    held_out = float(design.at(lag).fits(y, out).held_out.sum())
    return _Profile(design, lag, score, left_out, held_out)


def _profile_stderr(design: _Design, y: np.ndarray, tau: float, lags: np.ndarray, sse: np.ndarray) -> float:
    """The lag's standard error from the width of its profile (s; module doc, 5.): every searched lag whose
    squared error exceeds the least by no more than χ²₁(0.95) residual variances, the variance inflated
    for residuals correlated in time (1 + 2 Σ ρ_k over the positive autocorrelations within `BLOCK_S`),
    is a lag the episode cannot tell from the best fit; the farthest of them is 1.96 standard errors away."""
    a = design.at(tau)
    r = y - a.predict(a.fit(y))
    rc = r - r.mean()
    power = float(rc @ rc)
    if power <= 0 or len(y) <= a.columns:
        return 0.0
    inflation = 1.0
    for k in range(1, min(len(rc) - 1, int(BLOCK_S / max(float(np.median(np.diff(design.tp))), 1e-3))) + 1):
        rho = float(rc[:-k] @ rc[k:]) / power
        if rho <= 0:
            break
        inflation += 2 * rho
    variance = float(r @ r) / (len(y) - a.columns)
    near = lags[sse - sse.min() <= Z95**2 * variance * inflation]
    return float(np.abs(near - tau).max()) / Z95 if len(near) else 0.0


def _frames_of_change(e: np.ndarray) -> np.ndarray:
    """Per cell, over how many frames its change is spread: the participation ratio (Σ y²)² / Σ y⁴ of
    its centred energy y (one frame carrying all of it: 1; spread evenly over k frames: k)."""
    y = e - e.mean(axis=0)
    power = (y * y).sum(axis=0)
    return power**2 / np.maximum((y**4).sum(axis=0), np.finfo(float).tiny)


def _blocks(tp: np.ndarray) -> np.ndarray:
    return np.floor((tp - tp[0]) / BLOCK_S).astype(int)


def _t975(dof: int) -> float:
    if dof <= len(T975):
        return T975[dof - 1]
    return Z95 + (Z95**3 + Z95) / (4 * dof) + (5 * Z95**5 + 16 * Z95**3 + 3 * Z95) / (96 * dof**2)


def motion_events(joint_stamps_ns: np.ndarray, joint_positions: np.ndarray) -> int:
    """Corners of the follower's motion (module doc, 4.): local peaks, at least EVENT_GAP_S apart,
    of the joints' summed |acceleration| above EVENT_ACCEL, differentiated over EVENT_DT_S so that
    an encoder step is no corner."""
    t = (np.asarray(joint_stamps_ns, np.int64) - int(joint_stamps_ns[0])) / 1e9
    if len(t) < 10 or t[-1] <= 2 * EVENT_DT_S:
        return 0
    grid = np.arange(0.0, float(t[-1]), EVENT_DT_S)
    q = np.column_stack([np.interp(grid, t, col) for col in np.asarray(joint_positions, np.float64).T])
    accel = np.abs(np.diff(q, n=2, axis=0)).sum(axis=1) / EVENT_DT_S**2
    peaks = [i for i in range(len(accel)) if accel[i] >= EVENT_ACCEL
             and (i == 0 or accel[i] >= accel[i - 1]) and (i == len(accel) - 1 or accel[i] > accel[i + 1])]
    kept: list[int] = []
    for i in sorted(peaks, key=lambda i: -accel[i]):
        if all(abs(i - k) * EVENT_DT_S >= EVENT_GAP_S for k in kept):
            kept.append(i)
    return len(kept)


def estimate_lag(image_stamps_ns: np.ndarray, energy: np.ndarray, joint_stamps_ns: np.ndarray,
                 joint_positions: np.ndarray, search_ms: float = ValidateConfig.camera_lag_search_ms,
                 max_stderr_ms: float = ValidateConfig.camera_lag_max_stderr_ms) -> LagEstimate:
    """The camera's lag behind the joints (module docstring). `energy[i]` belongs to the image pair
    (i, i+1); joint positions are the follower's, in any unit, sorted by stamp. An estimate whose standard
    error is over `max_stderr_ms` cannot tell (the validator's `camera_lag_max_stderr_ms`)."""
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
    cells = (fits.max(axis=0) > chance) & (_frames_of_change(e) >= MIN_CHANGE_FRAMES)
    if not cells.any():
        return LagEstimate(None, None, float(fits.max()), n, 0,
                           "no image motion follows the arm (too little motion to tell)")
    m = e[:, cells].sum(axis=1)
    blocks = _blocks(tp)
    events = motion_events(np.asarray(joint_stamps_ns), q)
    plain = _fit_profile(_Design(joints, tp, tc), m, blocks, coarse)
    est = _judge(plain, m, blocks, coarse, events, n, int(cells.sum()), search_ms)
    # the pairs cannot change a verdict about the motion's corners or the episode's length
    if est.confident(max_stderr_ms) or events < MIN_EVENTS or len(np.unique(blocks)) < MIN_BLOCKS or \
            not any(max(p) < q.shape[1] for p in PARALLEL_PAIRS):
        return est
    # the parallel joints turning together (module doc, 7.): only where the plain fit cannot tell, only if
    # they predict the seconds left out of their fit better, and only for an answer
    paired = _fit_profile(_Design(joints, tp, tc, pairs=True), m, blocks, coarse)
    if paired.held_out >= plain.held_out:
        return est
    alt = _judge(paired, m, blocks, coarse, events, n, int(cells.sum()), search_ms)
    return alt if alt.confident(max_stderr_ms) else est


def _judge(fit: _Profile, m: np.ndarray, blocks: np.ndarray, coarse: np.ndarray, events: int, n: int, cells: int,
           search_ms: float) -> LagEstimate:
    """One design's estimate: its lag, standard error and R², and the note that says why it cannot tell."""
    span = search_ms / 1000.0
    design, lag = fit.design, fit.lag
    total = float(((m - m.mean()) ** 2).sum())
    r2 = 1.0 - _sse(design, m, lag) / total if total > 0 else 0.0
    stderr = max(float(np.hypot(_stderr(design, m, lag), MODEL_ERROR_MS / 1000)),
                 _profile_stderr(design, m, lag, coarse, -fit.score))
    jump = max((abs(_peak(coarse, s) - lag) for s in fit.left_out), default=0.0)
    note = ""
    if abs(lag) > span - 2 * COARSE_STEP_S:
        note = f"best fit at the edge of the ±{search_ms:g} ms search"
    elif r2 < MIN_R2:
        note = f"the joints explain {100 * r2:.0f} % of the image motion (< {100 * MIN_R2:.0f} %)"
    elif events < MIN_EVENTS:
        note = (f"{events} corner{'s' if events != 1 else ''} in the arm's motion (< {MIN_EVENTS}): "
                "too little motion to tell")
    elif (g := len(np.unique(blocks))) < MIN_BLOCKS:
        note = (f"{g} one-second block{'s' * (g != 1)} of comparable frames (< {MIN_BLOCKS}): "
                "too short to tell how sure the fit is")
    elif jump > PEAK_JUMP_MS / 1000:
        note = (f"leaving out one second of the episode moves the best fit by {1000 * jump:.0f} ms "
                f"(> {PEAK_JUMP_MS:g} ms): another lag fits as well, the motion does not pin it")
    if note or not np.isfinite(stderr):
        stderr = max(stderr if np.isfinite(stderr) else span, span)
    return LagEstimate(round(lag * 1000, 2), round(min(stderr, span) * 1000, 2), round(r2, 4), n, cells,
                       note, events, round(jump * 1000, 2))
