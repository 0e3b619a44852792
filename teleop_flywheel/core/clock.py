"""The one clock: instants are measured on CLOCK_MONOTONIC; headers carry ROS time.

Drivers stamp as close to the physical event as they can know it (bytes arrived on the bus,
the V4L2 buffer time, the kernel input-event time), on CLOCK_MONOTONIC, which no clock step can
disturb: control timing inside a node (staleness, ramps, watchdogs, rates) stays there. Every
ROS consumer reads `header.stamp` as ROS time (the system clock, which PTP/chrony discipline
across machines), so at a node's edge the monotonic instant is converted with the wall−monotonic
offset sampled at conversion time (`to_ros_ns`), and an incoming header stamp is converted back
before it is compared with the node's own clock (`from_ros_ns`). No code path stamps with
callback time. Recordings sample (monotonic, wall) pairs through each episode; `clock_steps`
finds a system-clock step between two samples that slewing cannot explain.
"""
from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from itertools import pairwise
from typing import Any, Protocol

NS_PER_S = 1_000_000_000


# CLOCK_MONOTONIC now, in integer nanoseconds (Python's monotonic clock is CLOCK_MONOTONIC on Linux).
# The builtin itself, not a wrapper: the control loops read it a dozen times a tick.
now_ns = time.monotonic_ns


TIGHT_BRACKET_NS = 2_000


def wall_offset_ns(tries: int = 4) -> int:
    """System clock minus CLOCK_MONOTONIC now: a wall reading bracketed by two monotonic ones,
    the tightest of up to `tries` brackets (one when it is tighter than 2 µs, as it nearly always
    is). A thread preempted between the reads would otherwise skew the offset by up to half the
    preemption — milliseconds on a loaded machine, which two stamps 5 ms apart cannot afford."""
    best_span, best = -1, 0
    for _ in range(max(1, tries)):
        before = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        wall = time.time_ns()
        after = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        if best_span < 0 or after - before < best_span:
            best_span, best = after - before, wall - (before + after) // 2
        if best_span <= TIGHT_BRACKET_NS:
            break
    return best


def to_ros_ns(mono_ns: int) -> int:
    """A monotonic instant as ROS time (system clock), with the offset sampled now."""
    return mono_ns + wall_offset_ns()


def from_ros_ns(ros_ns: int) -> int:
    """A ROS-time stamp (e.g. an incoming header) on this host's monotonic clock."""
    return ros_ns - wall_offset_ns()


def split_ns(ns: int) -> tuple[int, int]:
    """(sec, nanosec) for a `builtin_interfaces/Time`; ns must be non-negative."""
    if ns < 0:
        raise ValueError(f"stamp must be non-negative, got {ns} ns")
    return ns // NS_PER_S, ns % NS_PER_S


class _TimeLike(Protocol):
    sec: int
    nanosec: int


def stamp_to_ns(stamp: _TimeLike) -> int:
    """Nanoseconds from a `builtin_interfaces/Time` (or anything with sec/nanosec)."""
    return int(stamp.sec) * NS_PER_S + int(stamp.nanosec)


def fill_stamp(stamp: Any, ns: int) -> Any:
    """Write an ns value (ROS time, see `to_ros_ns`) into a `builtin_interfaces/Time` in place."""
    stamp.sec, stamp.nanosec = split_ns(ns)
    return stamp


@dataclass(frozen=True)
class ClockMapping:
    """One sample of monotonic→wall: wall_ns ≈ mono_ns + offset_ns, ± uncertainty_ns.

    Taken by bracketing a wall reading between two monotonic readings and keeping the
    tightest bracket, so the uncertainty is the read latency, not a guess.
    """

    mono_ns: int
    wall_ns: int
    uncertainty_ns: int

    @property
    def offset_ns(self) -> int:
        return self.wall_ns - self.mono_ns

    def to_dict(self) -> dict[str, int]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ClockMapping:
        return cls(int(data["mono_ns"]), int(data["wall_ns"]), int(data["uncertainty_ns"]))


def mappings(dicts: Iterable[dict[str, Any]]) -> list[ClockMapping]:
    """The mappings stored as dicts (empty ones skipped), one per monotonic instant, in its order."""
    out: dict[int, ClockMapping] = {}
    for d in dicts:
        if d:
            m = ClockMapping.from_dict(d)
            out.setdefault(m.mono_ns, m)
    return [out[k] for k in sorted(out)]


def sample_mapping(samples: int = 16) -> ClockMapping:
    """Measure monotonic→wall now, keeping the tightest of `samples` brackets."""
    best: ClockMapping | None = None
    for _ in range(max(1, samples)):
        before = now_ns()
        wall = time.time_ns()
        after = now_ns()
        candidate = ClockMapping((before + after) // 2, wall, after - before)
        if best is None or candidate.uncertainty_ns < best.uncertainty_ns:
            best = candidate
    assert best is not None
    return best


def drift_ns(start: ClockMapping, end: ClockMapping) -> int:
    """How far the wall clock moved against the monotonic clock between two samples."""
    return end.offset_ns - start.offset_ns


# A disciplined clock is slewed at most 500 ppm (Linux adjtimex's limit); anything faster is a step.
MAX_SLEW_PPM = 500
STEP_TOLERANCE_NS = 1_000_000


def step_bound_ns(interval_ns: int) -> int:
    """The largest wall−monotonic offset change slewing can make over `interval_ns` (+ 1 ms)."""
    return abs(interval_ns) * MAX_SLEW_PPM // 1_000_000 + STEP_TOLERANCE_NS


@dataclass(frozen=True)
class ClockStep:
    """The system clock moved `drift_ns` between two samples, more than slewing allows."""

    at_mono_ns: int
    drift_ns: int
    bound_ns: int


def clock_steps(samples: list[ClockMapping]) -> list[ClockStep]:
    """Steps of the system clock between consecutive (monotonic, wall) samples."""
    ordered = sorted(samples, key=lambda m: m.mono_ns)
    steps = []
    for a, b in pairwise(ordered):
        drift = drift_ns(a, b)
        bound = step_bound_ns(b.mono_ns - a.mono_ns) + a.uncertainty_ns + b.uncertainty_ns
        if abs(drift) > bound:
            steps.append(ClockStep(b.mono_ns, drift, bound))
    return steps
