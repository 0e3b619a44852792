"""Checks that read the episode's content rather than its stamps (no ROS import).

- **Camera lag** (`recording.camera_lag`): each camera's frames against the follower's joint motion.
  A camera that lags or leads the joints by more than `camera_lag_max_ms` (default 15 ms) with a
  standard error within `camera_lag_max_stderr_ms` is CLOCK_OFFSET, the estimate in the detail;
  an estimate less certain than that is the warning CAMERA_LAG_UNKNOWN (too little motion to
  tell) — a third outcome, never a pass by default and never a rejection.
- **Tracking lag**: the follower's lag behind the command sent, per joint: the cross-correlation
  of the two velocities (positions linearly resampled at 200 Hz, differenced over 50 ms), peak
  refined by a parabola, searched over ±500 ms. A joint that barely moves, or whose velocities
  correlate by less than 0.7 at the peak, has none. Above `tracking_lag_max_ms` (default 150 ms)
  it is the warning TRACKING_LAG — the seeds' "leader accelerations the follower cannot achieve".
"""
from __future__ import annotations

import numpy as np

from teleop_flywheel.core.so101 import JOINT_NAMES
from teleop_flywheel.data.validate.camera_lag import LagEstimate, estimate_lag
from teleop_flywheel.data.validate.reasons import CAMERA_LAG_UNKNOWN, CLOCK_OFFSET, TRACKING_LAG, Reason, ValidateConfig
from teleop_flywheel.recording.mcap.reader import ImageStream, Stream

TRACKING_RATE_HZ = 200.0
TRACKING_SEARCH_S = 0.5
MIN_SPEED_RAD_S = 0.02  # a joint whose command moves slower than this on average tells nothing
VELOCITY_WINDOW_S = 0.05
MIN_CORRELATION = 0.7  # the command's and the follower's velocities must agree this well at the peak


LAG_SIGNIFICANCE = 2.0  # standard errors a camera's lag must exceed its bound by to reject the episode


def camera_lags(images: dict[str, ImageStream], energies: dict[str, np.ndarray], follower: Stream,
                cfg: ValidateConfig) -> tuple[dict[str, LagEstimate], list[Reason], list[Reason]]:
    """(estimate per camera, rejections, warnings)."""
    lags: dict[str, LagEstimate] = {}
    reasons: list[Reason] = []
    warnings: list[Reason] = []
    for cam, energy in sorted(energies.items()):
        est = estimate_lag(images[cam].stamps_ns, energy, follower.stamps_ns, follower.values,
                           cfg.camera_lag_search_ms)
        lags[cam] = est
        numbers = {"camera": cam, **est.to_dict(), "bound_ms": cfg.camera_lag_max_ms}
        if not est.confident(cfg.camera_lag_max_stderr_ms):
            why = est.note or f"standard error {est.stderr_ms:.1f} ms > {cfg.camera_lag_max_stderr_ms:g} ms"
            warnings.append(Reason(CAMERA_LAG_UNKNOWN, f"camera {cam}: lag behind the joints not measurable "
                                   f"from the content ({why}; estimate {est})", numbers))
        elif est.lag_ms is not None and abs(est.lag_ms) > cfg.camera_lag_max_ms:
            how = "lags" if est.lag_ms > 0 else "leads"
            text = (f"camera {cam} {how} the joints by {abs(est.lag_ms):.1f} ± {est.stderr_ms:.1f} ms (from its "
                    f"content)")
            # Rejected only when beyond the bound by more than LAG_SIGNIFICANCE standard errors: motion
            # that is mostly at one speed (a speed-limited arm) leaves estimates that scatter past the
            # bound now and then although the stamps are right; that is a doubt, not a finding.
            if abs(est.lag_ms) - LAG_SIGNIFICANCE * (est.stderr_ms or 0.0) > cfg.camera_lag_max_ms:
                reasons.append(Reason(CLOCK_OFFSET, f"{text} > {cfg.camera_lag_max_ms:g} ms", numbers))
            else:
                warnings.append(Reason(CAMERA_LAG_UNKNOWN, f"{text}: beyond {cfg.camera_lag_max_ms:g} ms but "
                                       f"within {LAG_SIGNIFICANCE:g} standard errors of it", numbers))
    return lags, reasons, warnings


def _resample(stream: Stream, t: np.ndarray, j: int) -> np.ndarray:
    return np.interp(t, stream.stamps_ns, stream.values[:, j])


def tracking_lag(command: Stream, follower: Stream) -> list[float | None]:
    """Per joint (JOINT_NAMES order), the follower's lag behind the command in ms (None: too little
    motion, too short, or no clear peak)."""
    if len(command.stamps_ns) < 4 or len(follower.stamps_ns) < 4:
        return [None] * len(JOINT_NAMES)
    lo = max(int(command.stamps_ns[0]), int(follower.stamps_ns[0]))
    hi = min(int(command.stamps_ns[-1]), int(follower.stamps_ns[-1]))
    t = np.arange(lo, hi, 1e9 / TRACKING_RATE_HZ)
    k_max = int(TRACKING_SEARCH_S * TRACKING_RATE_HZ)
    w = int(VELOCITY_WINDOW_S * TRACKING_RATE_HZ)
    if len(t) < 4 * k_max:
        return [None] * len(JOINT_NAMES)
    out: list[float | None] = []
    for j in range(len(JOINT_NAMES)):
        pc, pf = _resample(command, t, j), _resample(follower, t, j)
        # velocities over a window (servo steps quantise positions: a per-sample difference is noise)
        vc, vf = (pc[w:] - pc[:-w]) / VELOCITY_WINDOW_S, (pf[w:] - pf[:-w]) / VELOCITY_WINDOW_S
        if not (np.isfinite(vc).all() and np.isfinite(vf).all()) or np.mean(np.abs(vc)) < MIN_SPEED_RAD_S:
            out.append(None)
            continue
        vc, vf = vc - vc.mean(), vf - vf.mean()
        n = len(vc) - k_max
        core = vc[k_max:n]
        score = np.array([float(core @ vf[k_max + k:n + k]) / max(float(np.linalg.norm(core) *
                          np.linalg.norm(vf[k_max + k:n + k])), 1e-12) for k in range(-k_max, k_max + 1)])
        i = int(np.argmax(score))
        if not 0 < i < len(score) - 1 or score[i] < MIN_CORRELATION:
            out.append(None)  # no clear peak inside the search: the follower does not follow the command
            continue
        a, b, c = score[i - 1], score[i], score[i + 1]
        den = a - 2 * b + c
        shift = float(i - k_max) + (0.5 * (a - c) / den if den < 0 else 0.0)
        out.append(round(float(shift) * 1000.0 / TRACKING_RATE_HZ, 2))
    return out


def tracking_warnings(lags: list[float | None], cfg: ValidateConfig) -> list[Reason]:
    over = {
        name: lag
        for name, lag in zip(JOINT_NAMES, lags, strict=True)
        if lag is not None and lag > cfg.tracking_lag_max_ms
    }
    if not over:
        return []
    worst = max(over, key=lambda k: over[k])
    return [Reason(TRACKING_LAG, f"the follower lags the command by {over[worst]:.0f} ms on {worst}"
                   + (f" ({len(over)} joints over)" if len(over) > 1 else "") + f" > {cfg.tracking_lag_max_ms:g} ms",
                   {"joints": over, "bound_ms": cfg.tracking_lag_max_ms})]
