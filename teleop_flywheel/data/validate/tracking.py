"""How well the follower did what it was told, per joint, and the lag of one series behind another.

`lag_fit` is the one estimator of a lag between two sampled series (here: the follower behind the
command sent, at the bag's native rates; `data/reports/frame_contract.py`: the state behind the
action in a dataset's frames): the cross-correlation of the two velocities (differenced over
`VELOCITY_WINDOW_S`: servo steps quantise positions, a per-sample difference is noise), its peak
refined by a parabola, with a delete-one-block jackknife over `BLOCKS` stretches of the episode for
its standard error — how decisive the estimate is — or, when larger, the time-delay estimate's own
error (what the best shift leaves unexplained against the slope of the lead's velocity): smooth
motion carries little timing, and blocks that share one bias agree on it. A series that barely
moves, or whose velocities correlate by less than `MIN_CORRELATION` at the peak, has none.

`tracking` measures, per joint: the follower's lag behind the command and the share of the
episode during which the command outran the follower — its speed or its acceleration beyond what
the follower achieved a lag later, by more than `SPEED_MARGIN_RAD_S` / `ACCEL_MARGIN_RAD_S2`: the
seeds' leader "accelerations the follower cannot achieve". A speed-limited follower (an STS3215
turns at most ~4.7 rad/s; the arm driver's speed limit defaults to 2 rad/s) shows it as a share,
not only as a longer lag.

A grasp is not a tracking error: the gripper pressing on an object at its force limit — load at
its cap, the command beyond the position in the direction of the load — is where it should be. The
cap is the median load while the command is beyond the position, and must be a plateau (the loads
within `CAP_FRACTION` of it spread by no more than `PLATEAU_SPREAD` of it): a loop without a force
limit presses harder the farther its goal. Those samples are left out of the gripper's lag and
share; a bag without efforts leaves nothing out.

FOLLOWER_OUTRUN judges the body joints only. A gripper command is an open or a close that the jaws
follow at their own pace by design (a policy or a trigger commands it as a step: in a demo episode
the gripper's share came to 22 % with nothing wrong); the seeds' disease is a trajectory the arm
then tracks with lag. The gripper's share is still measured and reported with the others.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from teleop_flywheel.core.so101 import GRIPPER, JOINT_NAMES
from teleop_flywheel.data.validate.reasons import FOLLOWER_OUTRUN, TRACKING_LAG, Reason, ValidateConfig
from teleop_flywheel.recording.mcap.reader import Stream

RATE_HZ = 200.0
SEARCH_S = 0.5
MIN_SPEED_RAD_S = 0.02  # a joint whose command moves slower than this on average tells nothing
VELOCITY_WINDOW_S = 0.05
MIN_CORRELATION = 0.7  # the two velocities must agree this well at the peak
BLOCKS = 8
SPEED_MARGIN_RAD_S = 0.5
ACCEL_MARGIN_RAD_S2 = 20.0
CAP_FRACTION = 0.85
PLATEAU_SPREAD = 0.1  # interquartile range of the loads at the cap, relative to it
MIN_CAP = 0.05  # a load below this (fraction of max torque) is no force limit
GRASP_MIN_ERROR_RAD = 0.02


@dataclass(frozen=True)
class LagFit:
    lag_s: float
    stderr_s: float
    correlation: float


def _velocity(x: np.ndarray, w: int, rate_hz: float) -> np.ndarray:
    v = np.zeros_like(x)
    v[w // 2:len(x) - (w - w // 2)] = (x[w:] - x[:-w]) * rate_hz / w
    return v


def _peak(score: np.ndarray) -> float | None:
    i = int(np.argmax(score))
    if not 0 < i < len(score) - 1:
        return None
    a, b, c = score[i - 1], score[i], score[i + 1]
    den = a - 2 * b + c
    return float(i) + (0.5 * (a - c) / den if den < 0 else 0.0)


def lag_fit(lead: np.ndarray, follow: np.ndarray, rate_hz: float, search_s: float = SEARCH_S,
            window_s: float = VELOCITY_WINDOW_S, min_speed: float = 0.0,
            mask: np.ndarray | None = None) -> LagFit | None:
    """How far `follow` lags `lead` (both sampled at `rate_hz` on one grid), or None. `mask`: samples
    left out (their velocities count as zero). `min_speed`: the lead's mean |velocity| below which
    the series tells nothing (in its own units per second)."""
    k_max = int(round(search_s * rate_hz))
    w = max(1, int(round(window_s * rate_hz)))
    n = len(lead)
    if n < 4 * k_max + w or n != len(follow):
        return None
    vl, vf = _velocity(lead, w, rate_hz), _velocity(follow, w, rate_hz)
    if mask is not None:
        vl, vf = np.where(mask, 0.0, vl), np.where(mask, 0.0, vf)
    if not (np.isfinite(vl).all() and np.isfinite(vf).all()) or np.mean(np.abs(vl)) <= min_speed:
        return None
    core = vl[k_max:n - k_max]
    shifted = np.lib.stride_tricks.sliding_window_view(vf, len(core))  # row k: vf[k : k + len(core)]
    cross, lead_e, follow_e = _block_products(core, vf)

    def score(keep: np.ndarray) -> np.ndarray:
        return cross[:, keep].sum(1) / np.maximum(np.sqrt(lead_e[keep].sum() * follow_e[:, keep].sum(1)), 1e-12)

    full = score(np.ones(BLOCKS, dtype=bool))
    best = _peak(full)
    if best is None or full.max() < MIN_CORRELATION:
        return None
    jack = []
    for b in range(BLOCKS):
        keep = np.arange(BLOCKS) != b
        p = _peak(score(keep))
        jack.append(best if p is None else p)
    j = np.asarray(jack)
    stderr = float(np.sqrt((BLOCKS - 1) / BLOCKS * np.sum((j - j.mean()) ** 2)))
    return LagFit((best - k_max) / rate_hz, max(stderr, _delay_stderr(core, shifted[int(round(best))], w)) / rate_hz,
                  float(full.max()))


def _block_products(core: np.ndarray, vf: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Over `BLOCKS` equal stretches b of `core` and each shift k of `vf` (row k: vf[k : k + len(core)]):
    cross[k, b] = sum of core * shifted row, lead_e[b] = sum of core², follow_e[k, b] = sum of the
    shifted row². One correlation per block and a running sum of vf², each in one numpy call: a
    Python pass per shift made the audit's frame contract ~0.1 s per joint of a 1,000-frame episode."""
    lags = len(vf) - len(core) + 1
    size = len(core) // BLOCKS
    starts = np.arange(BLOCKS) * size
    cross = np.stack([np.correlate(vf[s:s + size + lags - 1], core[s:s + size], "valid") for s in starts], axis=1)
    lead_e = np.array([float(core[s:s + size] @ core[s:s + size]) for s in starts])
    running = np.concatenate(([0.0], np.cumsum(vf * vf)))
    k = np.arange(lags)[:, None]
    return cross, lead_e, running[k + starts + size] - running[k + starts]


def _delay_stderr(lead: np.ndarray, follow: np.ndarray, w: int) -> float:
    """The time-delay estimate's standard error (samples) from what the best shift leaves unexplained:
    residual variance over the lead's squared slope, the residuals correlated over the velocity window.
    A motion too slow or too smooth to carry timing has almost no slope: its lag is not decided, however
    well the blocks agree (they agree on the same bias)."""
    gain = float(lead @ follow) / max(float(lead @ lead), 1e-12)
    residual = follow - gain * lead
    slope = np.diff(lead) * gain
    return float(np.sqrt(np.mean(residual ** 2) * w / max(float(slope @ slope), 1e-24)))


@dataclass
class JointTracking:
    joint: str
    lag_ms: float | None
    lag_stderr_ms: float | None
    outrun_share: float | None  # of the episode: the command's speed or acceleration beyond the follower's


def _resample(stream: Stream, t: np.ndarray, j: int) -> np.ndarray:
    return np.interp(t, stream.stamps_ns, stream.values[:, j])


def force_limited(command: np.ndarray, follower: np.ndarray, load: np.ndarray) -> np.ndarray:
    """Samples where the joint presses at its force limit: load at the cap, the command beyond the
    position in the load's direction (a grasp, for a gripper)."""
    error = command - follower
    pressing = (np.abs(error) > GRASP_MIN_ERROR_RAD) & (np.sign(error) == np.sign(load))
    if not pressing.any():
        return pressing
    cap = float(np.median(np.abs(load[pressing])))  # a force-limited joint presses at its cap
    at_cap = pressing & (np.abs(load) >= CAP_FRACTION * cap)
    q25, q75 = np.quantile(np.abs(load[at_cap]), [0.25, 0.75])
    # A cap is a plateau: a loop without one presses harder the farther its goal, so its loads spread.
    if cap < MIN_CAP or (q75 - q25) > PLATEAU_SPREAD * cap:
        return np.zeros_like(pressing)
    return at_cap


def tracking(command: Stream, follower: Stream, effort: Stream | None = None) -> list[JointTracking]:
    """Per joint (JOINT_NAMES order)."""
    none = [JointTracking(name, None, None, None) for name in JOINT_NAMES]
    if len(command.stamps_ns) < 4 or len(follower.stamps_ns) < 4:
        return none
    lo = max(int(command.stamps_ns[0]), int(follower.stamps_ns[0]))
    hi = min(int(command.stamps_ns[-1]), int(follower.stamps_ns[-1]))
    t = np.arange(lo, hi, 1e9 / RATE_HZ)
    w = int(VELOCITY_WINDOW_S * RATE_HZ)
    if len(t) < 4 * SEARCH_S * RATE_HZ + w:
        return none
    out = []
    for j, name in enumerate(JOINT_NAMES):
        pc, pf = _resample(command, t, j), _resample(follower, t, j)
        held = np.zeros(len(t), dtype=bool)
        if name == GRIPPER and effort is not None and len(effort.stamps_ns) >= 2:
            held = force_limited(pc, pf, _resample(effort, t, j))
            # a velocity window that touches a held sample is not the follower's free motion
            held = np.convolve(held, np.ones(2 * w + 1), mode="same") > 0
        fit = lag_fit(pc, pf, RATE_HZ, min_speed=MIN_SPEED_RAD_S, mask=held)
        out.append(JointTracking(name, None if fit is None else round(fit.lag_s * 1000.0, 2),
                                 None if fit is None else round(fit.stderr_s * 1000.0, 2),
                                 _outrun_share(pc, pf, held, 0.0 if fit is None else max(fit.lag_s, 0.0), w)))
    return out


def _outrun_share(pc: np.ndarray, pf: np.ndarray, held: np.ndarray, lag_s: float, w: int) -> float | None:
    """The share of samples where the command's speed or acceleration exceeds the follower's, a lag later."""
    if not (np.isfinite(pc).all() and np.isfinite(pf).all()):
        return None
    k = int(round(lag_s * RATE_HZ))
    vc, vf = _velocity(pc, w, RATE_HZ), _velocity(pf, w, RATE_HZ)
    ac, af = _velocity(vc, w, RATE_HZ), _velocity(vf, w, RATE_HZ)
    n = len(pc) - k
    if n <= 0:
        return None
    over = ((np.abs(vc[:n]) - np.abs(vf[k:]) > SPEED_MARGIN_RAD_S)
            | (np.abs(ac[:n]) - np.abs(af[k:]) > ACCEL_MARGIN_RAD_S2)) & ~held[:n] & ~held[k:]
    return round(float(over.mean()), 4)


def tracking_reasons(joints: list[JointTracking], cfg: ValidateConfig) -> tuple[list[Reason], list[Reason]]:
    """(rejections: FOLLOWER_OUTRUN, warnings: TRACKING_LAG)."""
    reasons: list[Reason] = []
    outrun = {j.joint: j.outrun_share for j in joints if j.joint != GRIPPER
              and j.outrun_share is not None and j.outrun_share > cfg.tracking_outrun_max_share}
    if outrun:
        worst = max(outrun, key=lambda k: outrun[k])
        lag = next(j.lag_ms for j in joints if j.joint == worst)
        reasons.append(Reason(
            FOLLOWER_OUTRUN,
            f"the command outran the follower on {worst} for {100 * outrun[worst]:.1f} % of the episode "
            f"(its speed or acceleration beyond the follower's; lag {'?' if lag is None else f'{lag:.0f}'} ms)"
            + (f" ({len(outrun)} joints over)" if len(outrun) > 1 else "")
            + f" > {100 * cfg.tracking_outrun_max_share:g} %",
            {"joints": outrun, "bound_share": cfg.tracking_outrun_max_share}))
    over = {j.joint: j.lag_ms for j in joints if j.lag_ms is not None and j.lag_ms > cfg.tracking_lag_max_ms}
    if not over:
        return reasons, []
    worst = max(over, key=lambda k: over[k])
    text = (f"the follower lags the command by {over[worst]:.0f} ms on {worst}"
            + (f" ({len(over)} joints over)" if len(over) > 1 else "") + f" > {cfg.tracking_lag_max_ms:g} ms")
    return reasons, [Reason(TRACKING_LAG, text, {"joints": over, "bound_ms": cfg.tracking_lag_max_ms})]
