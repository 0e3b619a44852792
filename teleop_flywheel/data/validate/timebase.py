"""Which clock an episode's header stamps are on, and whether the system clock stepped while it was
recorded (no ROS import).

Header stamps (read from the CDR, never MCAP publish_time) are the one time base of alignment and
validation. Receive times (`log_time`) are wall clock. Comparing the two (the CLOCK_OFFSET
latency check) needs both on one clock:

- `stamp_clock: "ros"` in the episode metadata: the stamps are ROS time, i.e. the system clock,
  and compare with log_time directly (bags of ours in an older stamp convention are refused by the
  reader and upgraded by `teleop-flywheel migrate`);
- no episode metadata at all (a foreign `ros2 bag record` bag): ROS time, as every ROS driver
  stamps, if the stamps are within a day of their receive times; else unverifiable.

Clock steps: the (monotonic, wall) samples of the episode must move together except for what
slewing can do (`core.clock.clock_steps`: 500 ppm of the interval + 1 ms); a step in between is
CLOCK_STEP, because ROS-time stamps taken on both sides of it are on two different timelines.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from teleop_flywheel.core.clock import ClockMapping, ClockStep, clock_steps, mappings
from teleop_flywheel.core.episode import STAMP_CLOCK_ROS, EpisodeMeta

ROS = "ros"
UNKNOWN = "unknown"
SAME_CLOCK_WITHIN_NS = 86_400 * 10**9


@dataclass(frozen=True)
class TimeBase:
    clock: str  # ROS | UNKNOWN
    why: str

    @property
    def verifiable(self) -> bool:
        return self.clock == ROS


def episode_samples(ep: EpisodeMeta | None) -> list[ClockMapping]:
    """Every (monotonic, wall) sample of the episode: clock_start, clock_samples, clock_end."""
    return [] if ep is None else mappings([ep.clock_start, *ep.clock_samples, ep.clock_end])


def time_base(ep: EpisodeMeta | None, log_ns: np.ndarray, stamps_ns: np.ndarray) -> TimeBase:
    """The clock of an episode's header stamps (see the module docstring); `log_ns`/`stamps_ns`
    are one stamped stream's receive times and header stamps, for a foreign bag's plausibility rule."""
    if ep is not None and ep.stamp_clock == STAMP_CLOCK_ROS:
        return TimeBase(ROS, "stamp_clock ros")
    near = len(stamps_ns) > 0 and abs(float(np.median(np.asarray(log_ns, np.float64)
                                                       - np.asarray(stamps_ns, np.float64)))) < SAME_CLOCK_WITHIN_NS
    if ep is None and near:
        return TimeBase(ROS, "no episode metadata (foreign bag): ROS time")
    return TimeBase(UNKNOWN, "header stamps far from their receive times (not ROS time)")


def steps(ep: EpisodeMeta | None) -> list[ClockStep]:
    """System-clock steps between the episode's (monotonic, wall) samples (`core.clock.clock_steps`)."""
    return clock_steps(episode_samples(ep))
