"""The frame contract checked on a dataset's numbers: is `action[t]` the command that carried the
robot from the state at t to the state at t+1 (SPEC §4)?

For any LeRobot v3.0 dataset (numeric columns only, the project's reader), per episode and joint:
the lag of `observation.state` behind `action` in frames (`data/validate/tracking.lag_fit`: the
frames linearly resampled to `UPSAMPLE`× fps, velocities over `VELOCITY_FRAMES` frames, a block-jackknife standard
error saying how decisive it is), pooled over the body joints by inverse variance (the gripper is
left out: a grasp presses at a force limit, which is no lag). An estimate decides when its standard
error is within `DECISIVE_STDERR_FRAMES`, so that a one-frame shift cannot hide in it.

What is flagged, per episode and for the dataset (all episodes pooled):

- **the state copied**: the action equals the state of frame t, t+1 or t-1 on at least
  `COPY_SHARE` of the frames where the state moves — a real follower never lands on its command
  exactly, frame after frame;
- **off by a frame or more**: where the dataset knows the follower's lag behind the command from
  the bags at their native rates (our converter's `tracking_lag_ms` episode column), the lag in
  frames must be 1 + that lag × fps (the action is the command in effect until the next frame, the
  state is read at its frame); a decided estimate more than `OFF_BY_ONE_FRAMES` away is a shift —
  either direction;
- **not causal, or too slow**: for every dataset, a decided lag below `MIN_LAG_FRAMES` (the state
  moves with or before its action: the actions are stored a frame late, or are the state) or above
  `MAX_LAG_MS` (the stated bound: commands the arm followed that late are not what moved it).

Without a reference lag (a foreign dataset), a shift of one frame that keeps the lag inside those
bounds cannot be told from a slower servo; the report says which test applied.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from teleop_flywheel.data.lerobot.dataset import EpisodeSpans, LeRobotDataset
from teleop_flywheel.data.validate.episode_columns import finite_or_none
from teleop_flywheel.data.validate.tracking import lag_fit

UPSAMPLE = 10
# Velocities over this many frames: a command sampled onto the grid carries its staleness (0 to one
# command period) into the action at frame t exactly as into the state at t+1; over two frames that
# shared pattern pulls a smooth episode's estimate to one frame, over six it averages out.
VELOCITY_FRAMES = 6
SEARCH_S = 0.5
DECISIVE_STDERR_FRAMES = 0.15
OFF_BY_ONE_FRAMES = 0.5
MIN_LAG_FRAMES = 0.5
MAX_LAG_MS = 300.0
COPY_SHARE = 0.9
STDERR_FLOOR_FRAMES = 0.02  # no joint weighs more than this precision in a pool
LAG_COLUMN = "tracking_lag_ms"  # our converter: the follower's lag behind the command in the bags, per joint


@dataclass
class JointLag:
    joint: str
    lag_frames: float | None
    stderr_frames: float | None
    expected_frames: float | None  # 1 + the follower's lag in the bag × fps (our datasets)


@dataclass
class EpisodeContract:
    episode_index: int
    joints: list[JointLag]
    lag_frames: float | None  # pooled over the body joints
    stderr_frames: float | None  # of the offset where there is a reference, else of the lag
    offset_frames: float | None  # lag − expected, pooled (None without a reference)
    copy_shift: int | None  # the action is the state of frame t + this (0, +1, -1)
    decided: bool
    problem: str = ""


@dataclass
class FrameContract:
    fps: float
    episodes: list[EpisodeContract]
    lag_frames: float | None
    stderr_frames: float | None  # of the offset where there is a reference, else of the lag
    offset_frames: float | None
    reference: bool  # the follower's lag from the bags was there to compare with
    decided_share: float
    problem: str = ""
    bounds: dict[str, float] = field(default_factory=lambda: {
        "decisive_stderr_frames": DECISIVE_STDERR_FRAMES, "off_by_one_frames": OFF_BY_ONE_FRAMES,
        "min_lag_frames": MIN_LAG_FRAMES, "max_lag_ms": MAX_LAG_MS, "copy_share": COPY_SHARE})

    @property
    def flagged(self) -> list[int]:
        return [e.episode_index for e in self.episodes if e.problem]

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "flagged": self.flagged}


def _pool(values: list[float], stderrs: list[float]) -> tuple[float, float] | None:
    """Inverse-variance mean and its standard error, widened by how much the values scatter beyond their
    own errors (the Birge ratio): joints that disagree do not make a decisive pool."""
    if not values:
        return None
    x = np.asarray(values)
    w = 1.0 / np.maximum(np.asarray(stderrs), STDERR_FLOOR_FRAMES) ** 2
    mean = float(np.sum(w * x) / w.sum())
    birge = float(np.sum(w * (x - mean) ** 2) / (len(x) - 1)) if len(x) > 1 else 1.0
    return mean, float(np.sqrt(max(birge, 1.0) / w.sum()))


def _copy_shift(action: np.ndarray, state: np.ndarray) -> int | None:
    """s where action[t] == state[t + s] on nearly every frame the state moves."""
    n = len(state)
    moving = np.zeros(n, dtype=bool)
    moving[:-1] = np.any(state[1:] != state[:-1], axis=1)
    for s in (0, 1, -1):
        t = np.arange(max(0, -s), n - max(0, s))
        t = t[moving[t]]
        same = np.all(np.isclose(action[t], state[t + s], rtol=1e-6, atol=1e-6), axis=1)
        if len(t) >= 10 and same.mean() >= COPY_SHARE:
            return s
    return None


def _judge(lag: float | None, offset: float | None, decided: bool, copy: int | None, fps: float) -> str:
    if copy is not None:
        return ("the action is the state of the same frame" if copy == 0 else
                f"the action is the state of the {'next' if copy > 0 else 'previous'} frame, copied")
    if not decided or lag is None:
        return ""
    if offset is not None and abs(offset) > OFF_BY_ONE_FRAMES:
        how = "ahead of" if offset > 0 else "behind"
        return (f"the action is {abs(offset):.1f} frames {how} the command that moved the follower (state lags it "
                f"{lag:.2f} frames; the follower's lag in the bags says {lag - offset:.2f})")
    if lag < MIN_LAG_FRAMES:
        return (f"the state lags the action by {lag:.2f} frames (< {MIN_LAG_FRAMES:g}): the state moves with or before "
                "its action — actions stored a frame late, or copied from the state")
    if lag * 1000.0 / fps > MAX_LAG_MS:
        return f"the state lags the action by {lag * 1000.0 / fps:.0f} ms (> {MAX_LAG_MS:g} ms)"
    return ""


def check_contract(ds: LeRobotDataset, spans: EpisodeSpans, state: np.ndarray, action: np.ndarray,
          joints: list[str]) -> FrameContract:
    """`state`, `action`: rows in `spans` order (audit's `Loaded`)."""
    fps = ds.fps
    rate = fps * UPSAMPLE
    table = ds.episodes.set_index("episode_index", drop=False)
    reference = LAG_COLUMN in table.columns
    body = [j for j, name in enumerate(joints) if not name.removesuffix(".pos").startswith("gripper")]
    episodes: list[EpisodeContract] = []
    for e, a, b in zip(spans.episode_index, spans.start, spans.stop, strict=True):
        act, st = action[a:b].astype(np.float64), state[a:b].astype(np.float64)
        expected: list[float | None] = [None] * len(joints)
        if reference and int(e) in table.index:
            raw = table.at[int(e), LAG_COLUMN]
            values = list(raw) if isinstance(raw, (list, tuple, np.ndarray)) else []
            if len(values) == len(joints):
                expected = [None if (v := finite_or_none(x)) is None else 1.0 + v * fps / 1000.0 for x in values]
        t = np.arange(len(act))
        fine = np.arange(0, len(act) - 1, 1.0 / UPSAMPLE)
        per: list[JointLag] = []
        for j, name in enumerate(joints):
            fit = None
            if len(act) >= 4 and np.isfinite(act[:, j]).all() and np.isfinite(st[:, j]).all():
                fit = lag_fit(np.interp(fine, t, act[:, j]), np.interp(fine, t, st[:, j]), rate, SEARCH_S,
                              window_s=VELOCITY_FRAMES / fps)
            per.append(JointLag(name.removesuffix(".pos"), None if fit is None else round(fit.lag_s * fps, 3),
                                None if fit is None else round(fit.stderr_s * fps, 3), expected[j]))
        known = [per[j] for j in body if per[j].lag_frames is not None]
        pooled = _pool([p.lag_frames or 0.0 for p in known], [p.stderr_frames or 0.0 for p in known])
        with_ref = [p for p in known if p.expected_frames is not None]
        off = _pool([(p.lag_frames or 0.0) - (p.expected_frames or 0.0) for p in with_ref],
                    [p.stderr_frames or 0.0 for p in with_ref])
        judged = off if off is not None else pooled  # with a reference, the offsets are what must agree
        decided = judged is not None and judged[1] <= DECISIVE_STDERR_FRAMES
        copy = _copy_shift(act, st) if len(act) > 2 else None
        lag = None if pooled is None else pooled[0]
        episodes.append(EpisodeContract(int(e), per, None if pooled is None else round(pooled[0], 3),
                                        None if judged is None else round(judged[1], 3),
                                        None if off is None else round(off[0], 3), copy, decided,
                                        _judge(lag, None if off is None else off[0], decided, copy, fps)))
    return _dataset(fps, episodes)


def _dataset(fps: float, episodes: list[EpisodeContract]) -> FrameContract:
    lagged = [e for e in episodes if e.lag_frames is not None]
    pooled = _pool([e.lag_frames or 0.0 for e in lagged], [e.stderr_frames or 0.0 for e in lagged])
    refs = [e for e in lagged if e.offset_frames is not None]
    off = _pool([e.offset_frames or 0.0 for e in refs], [e.stderr_frames or 0.0 for e in refs])
    copies = [e.copy_shift for e in episodes if e.copy_shift is not None]
    copy = max(set(copies), key=copies.count) if len(copies) > len(episodes) / 2 else None
    judged = off if off is not None else pooled
    decided = judged is not None and judged[1] <= DECISIVE_STDERR_FRAMES
    problem = _judge(None if pooled is None else pooled[0], None if off is None else off[0], decided, copy, fps)
    share = sum(e.decided for e in episodes) / len(episodes) if episodes else 0.0
    return FrameContract(fps, episodes, None if pooled is None else round(pooled[0], 3),
                         None if judged is None else round(judged[1], 3), None if off is None else round(off[0], 3),
                         bool(refs), round(share, 3), problem)


def contract_lines(c: FrameContract) -> list[str]:
    """Audit's and doctor's text."""
    ms = 1000.0 / c.fps
    if c.lag_frames is None:
        head = "unknown (no episode moved enough to tell)"
    elif c.offset_frames is not None:
        head = (f"the state lags the action by {c.lag_frames:.2f} frames ({c.lag_frames * ms:.0f} ms), "
                f"{c.offset_frames:+.2f} ± {c.stderr_frames:.2f} frames from the follower's lag in the bags")
    else:
        head = (f"the state lags the action by {c.lag_frames:.2f} ± {c.stderr_frames:.2f} frames "
                f"({c.lag_frames * ms:.0f} ms; no bag lag to compare with)")
    head = "frame contract      " + head
    verdict = "PROBLEM: " + c.problem if c.problem else "as the contract says"
    lines = [head, f"  decided on {100 * c.decided_share:.0f} % of episodes (standard error ≤ "
             f"{DECISIVE_STDERR_FRAMES:g} frame); {verdict}"]
    flagged = [e for e in c.episodes if e.problem]
    lines += [f"  episode {e.episode_index}: {e.problem}" for e in flagged[:20]]
    if len(flagged) > 20:
        lines.append(f"  ... and {len(flagged) - 20} more episodes flagged")
    return lines
