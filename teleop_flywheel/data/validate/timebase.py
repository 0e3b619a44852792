"""Which clock an episode's header stamps are on, how they reach the wall clock, and whether the
system clock stepped while it was recorded (no ROS import).

Header stamps (read from the CDR, never MCAP publish_time) are the one time base of alignment and
validation. Receive times (`log_time`) are wall clock. Comparing the two (the CLOCK_OFFSET
latency check) needs both on one clock:

- `stamp_clock: "ros"` in the episode metadata (bags recorded since the ROS-time revision): the
  stamps are ROS time, i.e. the system clock, and compare with log_time directly;
- no `stamp_clock` (our older bags): the stamps are CLOCK_MONOTONIC and reach the wall clock
  through the episode's monotonic→wall samples (`clock_samples`, else `clock_start`/`clock_end`),
  interpolated linearly between samples; without any sample they are unverifiable;
- no episode metadata at all (a foreign `ros2 bag record` bag): ROS time, as every ROS driver
  stamps.

Whatever the metadata says, stamps within a day of their receive times are ROS time (no monotonic
clock of a running machine is within a day of the epoch-based wall clock), so a bag whose recorder
wrote ROS-time stamps but no `stamp_clock` is read correctly too.

Clock steps: the (monotonic, wall) samples of the episode must move together except for what
slewing can do (`core.clock.clock_steps`: 500 ppm of the interval + 1 ms); a step in between is
CLOCK_STEP, because ROS-time stamps taken on both sides of it are on two different timelines.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from teleop_flywheel.core.clock import ClockMapping, ClockStep, clock_steps
from teleop_flywheel.core.episode import STAMP_CLOCK_ROS, EpisodeMeta

ROS = "ros"
MONOTONIC = "monotonic"
UNKNOWN = "unknown"
SAME_CLOCK_WITHIN_NS = 86_400 * 10**9


@dataclass(frozen=True)
class TimeBase:
    clock: str  # ROS | MONOTONIC | UNKNOWN
    why: str
    samples: tuple[ClockMapping, ...] = ()

    @property
    def verifiable(self) -> bool:
        return self.clock == ROS or (self.clock == MONOTONIC and bool(self.samples))

    def to_wall(self, stamps_ns: np.ndarray) -> np.ndarray:
        """Stamps on the wall clock (float64 ns): as they are for ROS time, else through the
        monotonic→wall samples (constant offset with one sample, linear in between and beyond)."""
        s = np.asarray(stamps_ns, dtype=np.float64)
        if self.clock == ROS:
            return s
        if not self.samples:
            raise ValueError("monotonic stamps without a clock mapping cannot be put on the wall clock")
        mono = np.array([m.mono_ns for m in self.samples], dtype=np.float64)
        off = np.array([m.offset_ns for m in self.samples], dtype=np.float64)
        if len(mono) == 1:
            return s + off[0]
        slope_lo = (off[1] - off[0]) / max(mono[1] - mono[0], 1.0)
        slope_hi = (off[-1] - off[-2]) / max(mono[-1] - mono[-2], 1.0)
        inside = np.interp(s, mono, off)
        inside = np.where(s < mono[0], off[0] + (s - mono[0]) * slope_lo, inside)
        inside = np.where(s > mono[-1], off[-1] + (s - mono[-1]) * slope_hi, inside)
        return s + inside


def episode_samples(ep: EpisodeMeta | None) -> list[ClockMapping]:
    """Every (monotonic, wall) sample of the episode: clock_start, clock_samples, clock_end."""
    if ep is None:
        return []
    raw = [ep.clock_start, *ep.clock_samples, ep.clock_end]
    out: dict[int, ClockMapping] = {}
    for d in raw:
        if d:
            m = ClockMapping.from_dict(d)
            out.setdefault(m.mono_ns, m)
    return [out[k] for k in sorted(out)]


def time_base(ep: EpisodeMeta | None, log_ns: np.ndarray, stamps_ns: np.ndarray) -> TimeBase:
    """The clock of an episode's header stamps (see the module docstring); `log_ns`/`stamps_ns`
    are one stamped stream's receive times and header stamps, for the plausibility rule."""
    samples = tuple(episode_samples(ep))
    near = len(stamps_ns) > 0 and abs(float(np.median(np.asarray(log_ns, np.float64)
                                                       - np.asarray(stamps_ns, np.float64)))) < SAME_CLOCK_WITHIN_NS
    if ep is not None and ep.stamp_clock == STAMP_CLOCK_ROS:
        return TimeBase(ROS, "stamp_clock ros", samples)
    if near:
        why = "no episode metadata (foreign bag): ROS time" if ep is None else \
            "stamps within a day of their receive times: ROS time"
        return TimeBase(ROS, why, samples)
    if ep is None:
        return TimeBase(UNKNOWN, "no episode metadata and header stamps far from their receive times "
                                 "(neither ROS time nor mapped to it)")
    if samples:
        return TimeBase(MONOTONIC, "CLOCK_MONOTONIC stamps (recorded before stamp_clock), mapped to the wall "
                                   "clock through the episode's clock samples", samples)
    return TimeBase(UNKNOWN, "CLOCK_MONOTONIC stamps and no monotonic→wall clock mapping recorded")


def steps(ep: EpisodeMeta | None) -> list[ClockStep]:
    """System-clock steps between the episode's (monotonic, wall) samples (`core.clock.clock_steps`)."""
    return clock_steps(episode_samples(ep))
