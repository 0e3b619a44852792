"""Output safety for joint commands: limits, a speed limit in rad/s, a bound on goal minus present,
and a stale-command watchdog.

Pure (no ROS), so the arm driver and the teleop node apply the *same* rules to what they send.

Stable API (other modules import it):

    limits = JointLimits.from_dict({"shoulder_pan": (-1.9, 1.9), ...})   # radians
    guard = CommandGuard(joint_names, limits, max_speed=2.0, max_relative=0.35, watchdog_ns=100_000_000)
    guard.command(names, positions, stamp_ns)    # a new target arrives (any joint order/subset)
    out = guard.step(present, now_ns)            # each control tick: the positions to send
    guard.stale(now_ns) / guard.reset(present)   # watchdog state / re-seed after reconnect
    guard.restart_from(present)                  # continue from where the arm is, keeping the target
    guard.hold()                                 # stop where the last sent command is, now
    nearest_turn(angle, reference)               # the angle ± whole turns nearest the reference

`step()` returns, per joint in `joint_names` order: the latest target clamped to limits, then
moved toward from the last *sent* value at no more than `max_speed` (rad/s, over the monotonic time
since the previous step, counted at most `max_dt_ns`: a loop that stalled does not earn a jump),
then kept within `max_relative` of the `present` position (LeRobot's `max_relative_target`: a joint
that is blocked or lagging is never asked for more than that). So every far target — the first
command after start, a replugged leader, a policy's first command, an authority change — is a move
at bounded speed, never a snap. A joint that turns fully (`so101.FULL_TURN_JOINTS`: wrist_roll)
takes its target modulo a turn, the representative nearest its last sent value, before the limits:
two arms 1° apart on either side of the encoder's seam read a turn apart, and the follower must
take the short way (stopping at the end of its range if that way leaves it), never the long one.
When no command has arrived within `watchdog_ns`, the target becomes the last sent value (hold):
the arm never keeps chasing an old target and nothing is extrapolated. Before the first command the
guard holds the `present` position given to `step()`/`reset()`. Any feature can be disabled:
`max_speed=None`, `max_relative=None`, `watchdog_ns=None`, `turning=()`, or
`JointLimits.unbounded()`.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from teleop_flywheel.core.so101 import FULL_TURN_JOINTS, RAD_PER_STEP, STEPS_PER_TURN

TURN_RAD = STEPS_PER_TURN * RAD_PER_STEP  # one shaft turn in joint radians (LeRobot's 4095 divisor: not 2π)


def nearest_turn(angle: float, reference: float) -> float:
    """`angle` plus or minus whole turns: the one nearest `reference`."""
    return reference + math.remainder(angle - reference, TURN_RAD)


@dataclass(frozen=True)
class JointLimits:
    """Closed [lower, upper] interval per joint name, in the caller's unit (radians on ROS)."""

    bounds: Mapping[str, tuple[float, float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, (lo, hi) in self.bounds.items():
            if not (lo <= hi):
                raise ValueError(f"joint limit for {name!r}: lower {lo} > upper {hi}")

    @classmethod
    def from_dict(cls, bounds: Mapping[str, Sequence[float]]) -> JointLimits:
        return cls({name: (float(lo), float(hi)) for name, (lo, hi) in bounds.items()})

    @classmethod
    def unbounded(cls) -> JointLimits:
        return cls({})



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
    """Counters for diagnostics: how often each rule changed the output (joint-ticks)."""

    commands: int = 0
    clamped: int = 0
    rate_limited: int = 0
    relative_limited: int = 0
    stale_ticks: int = 0
    rejected: int = 0  # commands dropped whole for a value that is not a finite number


class CommandGuard:
    """Limits + speed limit + goal-minus-present bound + watchdog for one arm's commands (module doc)."""

    def __init__(
        self,
        joint_names: Sequence[str],
        limits: JointLimits,
        max_speed: float | None = None,
        max_relative: float | None = None,
        watchdog_ns: int | None = None,
        max_dt_ns: int = 50_000_000,
        turning: Iterable[str] = FULL_TURN_JOINTS,
    ) -> None:
        for name, value in (("max_speed", max_speed), ("max_relative", max_relative), ("watchdog_ns", watchdog_ns)):
            if value is not None and value <= 0:
                raise ValueError(f"{name} must be positive or None, got {value}")
        self.joint_names = list(joint_names)
        self.limits = limits
        self._bounds = [limits.bounds.get(name) for name in self.joint_names]
        turns = set(turning)
        self._turning = [name in turns for name in self.joint_names]  # targets taken modulo a turn
        self.max_speed = max_speed
        self.max_relative = max_relative
        self.watchdog_ns = watchdog_ns
        self.max_dt_ns = max_dt_ns
        self.stats = GuardStats()
        self._target: dict[str, float] = {}
        self._last_command_ns: int | None = None
        self._sent: list[float] | None = None
        self._last_step_ns: int | None = None

    def reset(self, present: Sequence[float] | None = None) -> None:
        """Forget targets (e.g. after a reconnect) and hold `present` until a new command."""
        self._target = {}
        self._last_command_ns = None
        self._sent = None if present is None else [float(v) for v in present]
        self._last_step_ns = None

    def restart_from(self, present: Sequence[float]) -> None:
        """Move from `present` at the next step (e.g. torque just came on) but keep target and its time."""
        self._sent = [float(v) for v in present]
        self._last_step_ns = None

    def hold(self) -> None:
        """Make the last *sent* value the target: a hold stops motion at once instead of finishing
        a rate-limited move toward a target that is no longer trusted."""
        if self._sent is not None:
            self._target = dict(zip(self.joint_names, self._sent, strict=True))

    def command(self, names: Iterable[str], positions: Iterable[float], stamp_ns: int) -> bool:
        """Record a new target; unknown names are ignored, missing joints keep their target. A
        command with a value that is not a finite number (NaN, ±inf) for any known joint is dropped
        whole (False) and does not count as a command: its sender is broken, and the watchdog must
        hold the arm when nothing else comes, as if it had sent nothing."""
        known = set(self.joint_names)
        wanted = {name: float(value) for name, value in zip(names, positions, strict=False) if name in known}
        if not all(math.isfinite(value) for value in wanted.values()):
            self.stats.rejected += 1
            return False
        self._target.update(wanted)
        self._last_command_ns = stamp_ns
        self.stats.commands += 1
        return True

    @property
    def last_command_ns(self) -> int | None:
        return self._last_command_ns

    @property
    def has_command(self) -> bool:
        return self._last_command_ns is not None

    @property
    def sent(self) -> list[float] | None:
        """The positions the last step returned (None before the first)."""
        return None if self._sent is None else list(self._sent)

    def stale(self, now_ns: int) -> bool:
        """True when commands have been seen but none within the watchdog window."""
        if self.watchdog_ns is None or self._last_command_ns is None:
            return False
        return now_ns - self._last_command_ns > self.watchdog_ns

    def step(self, present: Sequence[float], now_ns: int) -> list[float]:
        """The positions to send this tick (joint_names order); `present` is where the arm is now
        (it seeds the first hold and bounds goal minus present). Written flat, with the joints'
        bounds looked up once (`_bounds`): it runs for every joint of every tick of every arm."""
        if self._sent is None:
            self._sent = [float(v) for v in present]
        dt_ns = 0 if self._last_step_ns is None else min(max(now_ns - self._last_step_ns, 0), self.max_dt_ns)
        self._last_step_ns = now_ns
        max_step = None if self.max_speed is None else self.max_speed * dt_ns / 1e9
        relative = self.max_relative
        stale = self.stale(now_ns)
        stats = self.stats
        if stale:
            stats.stale_ticks += 1
        out: list[float] = []
        for i, name in enumerate(self.joint_names):
            previous = self._sent[i]
            wanted = None if stale else self._target.get(name)
            if wanted is None:
                out.append(previous)
                continue
            if self._turning[i]:
                wanted = nearest_turn(wanted, previous)
            target = wanted
            bounds = self._bounds[i]
            if bounds is not None:
                target = min(bounds[1], max(bounds[0], wanted))
                if target != wanted:
                    stats.clamped += 1
            value = limit_step(previous, target, max_step)
            if value != target:
                stats.rate_limited += 1
            if relative is not None and i < len(present):
                bounded = min(max(value, present[i] - relative), present[i] + relative)
                if bounded != value:
                    stats.relative_limited += 1
                    value = bounded
            out.append(value)
        if stale:
            # Hold means hold: drop the old target so it is not resumed when a late command
            # for another joint arrives.
            self._target = {}
        self._sent = out
        return list(out)
