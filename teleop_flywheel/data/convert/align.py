"""Align on load: zero-order hold of native-rate streams onto the dataset's fps grid, never interpolated.

The recorder keeps every stream at its own rate with its source stamps (SPEC §4); this module is
the one place they meet a frame grid. The rule, exactly:

* Grid: ``t_k = t0 + round(k · 1e9 / fps)`` ns with ``t0`` = the latest first stamp of all
  streams (the span every stream covers) and frames ``k = 0 .. n-1`` for the largest ``n`` with
  ``t_n ≤ t_end``, ``t_end`` = the earliest last stamp (so ``t_{k+1}`` exists for every frame).
* Observations (follower state, leader state, images): ``obs[k]`` = the sample with the latest
  stamp ``≤ t_k`` (zero-order hold: what was true at ``t_k``).
* Actions (the command sent to the follower, the human and policy commands, α, intervention,
  trigger): ``action[k]`` = the sample with the latest stamp ``≤ t_{k+1}`` — the command in
  effect at the end of ``(t_k, t_{k+1}]``, i.e. the one that carried the robot from ``state[k]``
  to ``state[k+1]`` (the frame contract). With a command stream faster than fps it was sent
  inside that interval.
* Staleness: the held sample's age (``t − stamp``) must be ``≤ bound`` (default ``2/fps``) at
  every grid point it is used at; otherwise the stream dropped out and `AlignError`
  (reason `FRAME_GAP`) names the stream, the grid time (s from ``t0``) and the age — nothing is
  filled in.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from teleop_flywheel.core.errors import FlywheelError
from teleop_flywheel.recording.mcap.reader import Stream

FRAME_GAP = "FRAME_GAP"


@dataclass(frozen=True)
class Dropout:
    stream: str
    time_s: float  # grid time of the worst point, seconds after t0
    gap_s: float  # age of the held sample there

    def __str__(self) -> str:
        return f"{self.stream}: {self.gap_s:.3f} s old at t={self.time_s:.3f} s"


class AlignError(FlywheelError, ValueError):
    """A stream is staler than the bound (FRAME_GAP), or the streams share no span."""

    def __init__(self, message: str, dropouts: list[Dropout] | None = None, code: str = FRAME_GAP) -> None:
        super().__init__(message)
        self.dropouts = dropouts or []
        self.code = code


@dataclass
class Grid:
    t0_ns: int
    fps: float
    n: int

    def times(self, shift: int = 0) -> np.ndarray:
        """t_{k+shift} for k = 0..n-1 (int64 ns)."""
        k = np.arange(self.n, dtype=np.int64) + shift
        return self.t0_ns + np.round(k * (1e9 / self.fps)).astype(np.int64)


@dataclass
class Aligned:
    grid: Grid
    values: dict[str, np.ndarray]
    indices: dict[str, np.ndarray]  # sample index held at each frame
    ages_ns: dict[str, np.ndarray] = field(default_factory=dict)


def make_grid(streams: list[Stream], fps: float, start_ns: int | None = None, end_ns: int | None = None) -> Grid:
    """The grid over the span every stream covers, narrowed to [start_ns, end_ns] when given (the
    converter's `--trim-dead-air`)."""
    if fps <= 0:
        raise ValueError(f"fps must be positive, got {fps}")
    empty = [s.name for s in streams if len(s.stamps_ns) == 0]
    if empty:
        raise AlignError(f"stream(s) with no samples: {', '.join(empty)}", code="MISSING_STREAM")
    t0 = max([int(s.stamps_ns[0]) for s in streams] + ([start_ns] if start_ns is not None else []))
    end = min([int(s.stamps_ns[-1]) for s in streams] + ([end_ns] if end_ns is not None else []))
    if end <= t0:
        raise AlignError("the streams share no common time span", code="MISSING_STREAM")
    n = int(np.floor((end - t0) * fps / 1e9))
    while n > 0 and t0 + round(n * 1e9 / fps) > end:
        n -= 1
    return Grid(t0, fps, n)


def hold(stream: Stream, times: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(index of the latest sample with stamp ≤ t, its age in ns) for each t."""
    idx = np.searchsorted(stream.stamps_ns, times, side="right") - 1
    if len(idx) and idx.min() < 0:
        raise AlignError(f"{stream.name}: grid starts before its first sample")
    return idx, times - stream.stamps_ns[idx]


def align(observations: list[Stream], actions: list[Stream], fps: float,
          staleness_s: float | None = None, grid: Grid | None = None) -> Aligned:
    """Sample every stream on the grid (rule in the module docstring); raise on any dropout."""
    limit = 2.0 / fps if staleness_s is None else float(staleness_s)
    bound = int(round(limit * 1e9)) if np.isfinite(limit) else np.iinfo(np.int64).max  # inf: report nothing
    grid = grid or make_grid(observations + actions, fps)
    if grid.n == 0:
        raise AlignError("the common span is shorter than one frame", code="DURATION_OUT_OF_RANGE")
    t_obs, t_act = grid.times(0), grid.times(1)
    out = Aligned(grid, {}, {})
    dropouts: list[Dropout] = []
    for streams, times in ((observations, t_obs), (actions, t_act)):
        for s in streams:
            idx, age = hold(s, times)
            worst = int(np.argmax(age))
            if age[worst] > bound:
                dropouts.append(Dropout(s.name, (times[worst] - grid.t0_ns) / 1e9, age[worst] / 1e9))
            out.values[s.name] = s.values[idx]
            out.indices[s.name] = idx
            out.ages_ns[s.name] = age
    if dropouts:
        raise AlignError(f"{FRAME_GAP}: stale beyond {bound / 1e9:.3f} s: " + "; ".join(map(str, dropouts)), dropouts)
    return out
