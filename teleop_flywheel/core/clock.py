"""The one clock: every stamp in teleop_flywheel is CLOCK_MONOTONIC nanoseconds.

Drivers stamp as close to the physical event as they can know it (bytes arrived on the bus,
the V4L2 buffer time, the kernel input-event time) and pass that integer along; ROS headers
carry it verbatim as `builtin_interfaces/Time`. Wall time appears only in the sampled
monotonic→wall mapping stored with each recording, so a bag's drift can be checked later.
No code path stamps with callback time or the ROS clock.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any, Protocol

NS_PER_S = 1_000_000_000


def now_ns() -> int:
    """CLOCK_MONOTONIC now, in integer nanoseconds."""
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


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
    """Write a monotonic ns value into a `builtin_interfaces/Time` in place and return it."""
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
    def from_dict(cls, data: dict[str, Any]) -> "ClockMapping":
        return cls(int(data["mono_ns"]), int(data["wall_ns"]), int(data["uncertainty_ns"]))


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
