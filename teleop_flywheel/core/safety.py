"""Output safety for joint commands: limits clamp, max step per tick, stale-command watchdog.

Pure (no ROS), so the arm driver and the teleop node apply the *same* rules to what they send.

Stable API (other modules import it):

    limits = JointLimits.from_dict({"shoulder_pan": (-1.9, 1.9), ...})   # radians
    guard = CommandGuard(joint_names, limits, max_step=0.05, watchdog_ns=100_000_000)
    guard.command(names, positions, stamp_ns)    # a new target arrives (any joint order/subset)
    out = guard.step(current, now_ns)            # each control tick: the positions to send
    guard.stale(now_ns) / guard.reset(current)   # watchdog state / re-seed after reconnect
    guard.restart_from(current)                  # continue from where the arm is, keeping the target
    guard.hold()                                 # stop where the last sent command is, now

`step()` returns, per joint in `joint_names` order: the latest target clamped to limits, then
moved toward from the last *sent* value by at most `max_step` (rad per tick). When no command has
arrived within `watchdog_ns`, the target becomes the last sent value (hold) — the arm never keeps
chasing an old target and nothing is extrapolated. Before the first command the guard holds the
`current` position given to `step()`/`reset()`. Any feature can be disabled: `max_step=None`,
`watchdog_ns=None`, or `JointLimits.unbounded()`.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class JointLimits:
    """Closed [lower, upper] interval per joint name, in the caller's unit (radians on ROS)."""

    bounds: Mapping[str, tuple[float, float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, (lo, hi) in self.bounds.items():
            if not (lo <= hi):
                raise ValueError(f"joint limit for {name!r}: lower {lo} > upper {hi}")

    @classmethod
    def from_dict(cls, bounds: Mapping[str, Sequence[float]]) -> "JointLimits":
        return cls({name: (float(lo), float(hi)) for name, (lo, hi) in bounds.items()})

    @classmethod
    def unbounded(cls) -> "JointLimits":
        return cls({})

    def clamp(self, name: str, value: float) -> float:
        """value clamped into the joint's interval; joints without limits pass through."""
        if name not in self.bounds:
            return value
        lo, hi = self.bounds[name]
        return min(hi, max(lo, value))


def limit_step(previous: float, target: float, max_step: float | None) -> float:
    """Move from previous toward target by at most max_step (None = no rate limit)."""
    if max_step is None:
        return target
    delta = target - previous
    if abs(delta) <= max_step:
        return target
    return previous + math.copysign(max_step, delta)


@dataclass
class GuardStats:
    """Counters for diagnostics: how often each rule changed the output."""

    commands: int = 0
    clamped: int = 0
    rate_limited: int = 0
    stale_ticks: int = 0


class CommandGuard:
    """Composable limits + max-step + watchdog for one arm's command stream (see module doc)."""

    def __init__(
        self,
        joint_names: Sequence[str],
        limits: JointLimits,
        max_step: float | None = None,
        watchdog_ns: int | None = None,
    ) -> None:
        if max_step is not None and max_step <= 0:
            raise ValueError(f"max_step must be positive or None, got {max_step}")
        if watchdog_ns is not None and watchdog_ns <= 0:
            raise ValueError(f"watchdog_ns must be positive or None, got {watchdog_ns}")
        self.joint_names = list(joint_names)
        self.limits = limits
        self.max_step = max_step
        self.watchdog_ns = watchdog_ns
        self.stats = GuardStats()
        self._target: dict[str, float] = {}
        self._last_command_ns: int | None = None
        self._sent: list[float] | None = None

    def reset(self, current: Sequence[float] | None = None) -> None:
        """Forget targets (e.g. after a reconnect) and hold `current` until a new command."""
        self._target = {}
        self._last_command_ns = None
        self._sent = None if current is None else [float(v) for v in current]

    def restart_from(self, current: Sequence[float]) -> None:
        """Rate-limit from `current` next tick (e.g. torque just came on) but keep target and its time."""
        self._sent = [float(v) for v in current]

    def hold(self) -> None:
        """Make the last *sent* value the target: a hold stops motion at once instead of finishing
        a rate-limited move toward a target that is no longer trusted."""
        if self._sent is not None:
            self._target = dict(zip(self.joint_names, self._sent))

    def command(self, names: Iterable[str], positions: Iterable[float], stamp_ns: int) -> None:
        """Record a new target; unknown names are ignored, missing joints keep their target."""
        known = set(self.joint_names)
        for name, value in zip(names, positions):
            if name in known and math.isfinite(value):
                self._target[name] = float(value)
        self._last_command_ns = stamp_ns
        self.stats.commands += 1

    @property
    def last_command_ns(self) -> int | None:
        return self._last_command_ns

    @property
    def has_command(self) -> bool:
        return self._last_command_ns is not None

    def stale(self, now_ns: int) -> bool:
        """True when commands have been seen but none within the watchdog window."""
        if self.watchdog_ns is None or self._last_command_ns is None:
            return False
        return now_ns - self._last_command_ns > self.watchdog_ns

    def step(self, current: Sequence[float], now_ns: int) -> list[float]:
        """The positions to send this tick (joint_names order); `current` seeds the first hold."""
        if self._sent is None:
            self._sent = [float(v) for v in current]
        stale = self.stale(now_ns)
        if stale:
            self.stats.stale_ticks += 1
        out: list[float] = []
        for i, name in enumerate(self.joint_names):
            previous = self._sent[i]
            if stale or name not in self._target:
                out.append(previous)
                continue
            target = self.limits.clamp(name, self._target[name])
            if target != self._target[name]:
                self.stats.clamped += 1
            value = limit_step(previous, target, self.max_step)
            if value != target:
                self.stats.rate_limited += 1
            out.append(value)
        if stale:
            # Hold means hold: drop the old target so it is not resumed when a late command
            # for another joint arrives.
            self._target = {}
        self._sent = out
        return list(out)
