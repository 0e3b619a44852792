"""Authority blending between a policy and the human: the flywheel's takeover, without ROS.

In `policy` mode the policy drives and the operator takes over with the pedal: pedal down
ramps α (the human's weight) 0→1, pedal up ramps it 1→0, both along a raised cosine over
`blend_ms` (default 150, accepted 20–1000). A reversal mid-ramp continues from the current
α — it never jumps. The command sent is α·human + (1−α)·policy, then the follower's safety
guard (limits, speed). With `max_speed` (rad/s) a ramp between two commands far apart lasts longer
than `blend_ms`: long enough that the blend alone never asks for more than `SPEED_SHARE` of that
speed (the rest is left for the commands' own motion). An authority change to a far target is so a
bounded-speed move with a smooth raised-cosine profile, not a blend cut off by the guard's speed
limit into a kinked one. Every takeover is an `Intervention` with an id, start/end stamps
and the operator's trigger label; one nobody labelled stays unlabelled (the validator
rejects it). Stale inputs hold the last command; nothing is ever extrapolated.

In `teleop` mode the human already has authority: a pedal press there never changes it (α stays
1). It marks a **correction** instead — "I reached in to fix something" — a span with its own ids,
start/end at the pedal edges and a trigger label given exactly like an intervention's (the label
goes to the most recent span of either kind, within the same window). Corrections are recorded
beside interventions (`EpisodeMeta.corrections`), so a teleoperated demonstration carries its
"I reached in" marks and an unlabelled one is flagged like an unlabelled intervention.

All times are CLOCK_MONOTONIC ns passed in by the caller, so the whole machine is testable
without sleeping — ramps, staleness and the labelling window never see a clock step. The teleop
node converts incoming header stamps (ROS time) back with `clock.from_ros_ns` before they get
here, and the intervention start/end it publishes to ROS time with `clock.to_ros_ns`.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from teleop_flywheel.core.episode import Intervention
from teleop_flywheel.core.labels import CORRECTION_KIND, INTERVENTION_KIND, MODES, TRIGGER_LABELS

BLEND_MS_DEFAULT = 150.0
BLEND_MS_RANGE = (20.0, 1000.0)
SPEED_SHARE = 0.8  # of max_speed the blend itself may use; the inputs' own motion gets the rest


def raised_cosine(x: float) -> float:
    """0→1 over x in [0, 1] with zero slope at both ends (no velocity step at either end)."""
    x = min(max(x, 0.0), 1.0)
    return 0.5 - 0.5 * math.cos(math.pi * x)


@dataclass
class BlendOutput:
    """One tick's result: what to send and everything the recording needs about it."""

    command: list[float] | None  # None = nothing valid to send yet (hold)
    alpha: float
    mode: str
    intervention_id: int  # 0 = none running
    trigger: str | None
    holding: bool  # True when a stale input forced a hold
    reason: str = ""


@dataclass
class AuthorityBlender:
    """The state machine; call `pedal()` on pedal events and `tick()` every control tick."""

    mode: str = "policy"
    blend_ms: float = BLEND_MS_DEFAULT
    stale_ms: float = 100.0
    label_window_ms: float = 10_000.0
    max_speed: float | None = None  # rad/s: stretch a ramp between far commands (None: always blend_ms)
    interventions: list[Intervention] = field(default_factory=list)
    corrections: list[Intervention] = field(default_factory=list)  # teleop mode, pedal down

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        lo, hi = BLEND_MS_RANGE
        if not lo <= float(self.blend_ms) <= hi:
            raise ValueError(f"blend_duration_ms must be within {lo:.0f}–{hi:.0f} ms, got {self.blend_ms}")
        self._pedal_down = False
        self._ramp_ms = float(self.blend_ms)  # this ramp's duration: blend_ms, or longer between far commands
        self._ramp_start_ns = 0
        self._phase0 = 1.0 if self.mode == "teleop" else 0.0
        self._direction = 1.0 if self.mode == "teleop" else -1.0
        self._last_command: list[float] | None = None
        self._human: tuple[int, list[float]] | None = None
        self._policy: tuple[int, list[float]] | None = None
        self._last_tick_ns = 0

    # -- inputs -------------------------------------------------------------------------
    def set_mode(self, mode: str, t_ns: int) -> None:
        """Switch mode; the switch itself is ramped like a pedal press, never a jump."""
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        self.mode = mode
        self._update(t_ns, t_ns)

    def set_blend_ms(self, blend_ms: float, t_ns: int) -> None:
        """Change the ramp duration at t; a ramp under way goes on from its current α at the new
        speed (α never jumps)."""
        lo, hi = BLEND_MS_RANGE
        if not lo <= float(blend_ms) <= hi:
            raise ValueError(f"blend_duration_ms must be within {lo:.0f}–{hi:.0f} ms, got {blend_ms}")
        t_ns = max(t_ns, self._last_tick_ns)
        self._phase0 = self._phase(t_ns)
        self._ramp_start_ns = t_ns
        self.blend_ms = float(blend_ms)
        self._ramp_ms = max(self.blend_ms, self._ramp_ms_for_gap())

    def human(self, positions: Sequence[float], stamp_ns: int) -> None:
        self._human = (stamp_ns, list(positions))

    def policy(self, positions: Sequence[float], stamp_ns: int) -> None:
        self._policy = (stamp_ns, list(positions))

    def pedal(self, down: bool, stamp_ns: int, received_ns: int | None = None) -> None:
        """Pedal edge (debounced upstream), stamped at its source; `received_ns` is when it
        reached us (default: the stamp). The intervention starts/ends at the source stamp; the
        ramp starts when the edge is known, so a late edge never makes α leap."""
        if down == self._pedal_down:
            return
        self._pedal_down = down
        self._update(stamp_ns, stamp_ns if received_ns is None else received_ns)

    def _update(self, stamp_ns: int, known_ns: int) -> None:
        """Bring interventions and the ramp in line with (mode, pedal): the human has authority in
        teleop mode, and in policy mode while the pedal is down — that, and only that, is an
        intervention. So leaving policy mode ends a running takeover, and entering it with the
        pedal held starts one."""
        takeover = self.takeover
        for spans, active in ((self.interventions, takeover), (self.corrections, self.correcting)):
            running = spans[-1] if spans and spans[-1].end_ns is None else None
            if active and running is None:
                spans.append(Intervention(id=len(spans) + 1, start_ns=stamp_ns))
            elif not active and running is not None:
                running.end_ns = max(stamp_ns, running.start_ns)
        self._start_ramp(1.0 if self.mode == "teleop" or takeover else 0.0, known_ns)

    def last_span(self) -> tuple[str, Intervention] | None:
        """(kind, span) of the most recent intervention or correction: a running one, else the one
        that started last."""
        spans = ([(INTERVENTION_KIND, s) for s in self.interventions[-1:]]
                 + [(CORRECTION_KIND, s) for s in self.corrections[-1:]])
        if not spans:
            return None
        return max(spans, key=lambda ks: (ks[1].end_ns is None, ks[1].start_ns))

    def label(self, trigger: str, t_ns: int) -> Intervention:
        """Label the running intervention or correction, or the last one if it ended within the label
        window (`last_span` says which kind it was)."""
        if trigger not in TRIGGER_LABELS:
            raise ValueError(f"unknown trigger label {trigger!r}; expected one of {', '.join(TRIGGER_LABELS)}")
        found = self.last_span()
        if found is None:
            raise ValueError("no intervention or correction to label")
        kind, last = found
        if last.end_ns is not None and t_ns - last.end_ns > self.label_window_ms * 1e6:
            raise ValueError(
                f"{kind} {last.id} ended {(t_ns - last.end_ns) / 1e9:.1f} s ago, beyond the "
                f"{self.label_window_ms / 1000:.0f} s labelling window")
        last.trigger = trigger
        return last

    # -- output -------------------------------------------------------------------------
    @property
    def pedal_down(self) -> bool:
        return self._pedal_down

    @property
    def takeover(self) -> bool:
        """The human holds authority in policy mode (an intervention is running)."""
        return self.mode == "policy" and self._pedal_down

    @property
    def correcting(self) -> bool:
        """The pedal is down in teleop mode (a correction is running; authority unchanged)."""
        return self.mode == "teleop" and self._pedal_down

    def _phase(self, t_ns: int) -> float:
        step = (t_ns - self._ramp_start_ns) / (self._ramp_ms * 1e6)
        return min(max(self._phase0 + self._direction * step, 0.0), 1.0)

    def alpha(self, t_ns: int) -> float:
        """α at t: raised_cosine of a phase that moves at 1/blend per unit time toward its target."""
        return raised_cosine(self._phase(t_ns))

    def _start_ramp(self, target: float, t_ns: int) -> None:
        # Continue from the current phase: a reversal mid-ramp never makes α jump. A ramp never
        # starts before the last tick already sent, so α never leaps to where the ramp "would be
        # by now".
        t_ns = max(t_ns, self._last_tick_ns)
        self._phase0 = self._phase(t_ns)
        self._ramp_start_ns = t_ns
        self._direction = 1.0 if target >= 0.5 else -1.0
        self._ramp_ms = max(self.blend_ms, self._ramp_ms_for_gap())

    def _ramp_ms_for_gap(self) -> float:
        """The ramp duration whose peak blend speed (π/2 · gap / duration, the raised cosine's
        steepest slope) stays within SPEED_SHARE of max_speed, for the gap between the two commands."""
        if self.max_speed is None or self._human is None or self._policy is None:
            return 0.0
        gap = max((abs(h - p) for h, p in zip(self._human[1], self._policy[1], strict=True)), default=0.0)
        return min(math.pi / 2 * gap / (SPEED_SHARE * self.max_speed) * 1e3, BLEND_MS_RANGE[1])

    def tick(self, t_ns: int) -> BlendOutput:
        self._last_tick_ns = max(self._last_tick_ns, t_ns)
        a = self.alpha(t_ns)
        stale = self.stale_ms * 1e6
        human_ok = self._human is not None and t_ns - self._human[0] <= stale
        policy_ok = self._policy is not None and t_ns - self._policy[0] <= stale
        need_human, need_policy = a > 0.0, a < 1.0
        reason = ""
        if need_human and not human_ok:
            reason = "leader stale" if self._human else "no leader sample yet"
        elif need_policy and not policy_ok:
            reason = "policy stale" if self._policy else "no policy command yet"
        current = self.interventions[-1] if self.interventions and self.interventions[-1].end_ns is None else None
        out = BlendOutput(None, a, self.mode, current.id if current else 0, current.trigger if current else None,
                          bool(reason), reason)
        if reason:
            out.command = None if self._last_command is None else list(self._last_command)
            return out
        human = self._human[1] if need_human and self._human else None
        policy = self._policy[1] if need_policy and self._policy else None
        if human is not None and policy is not None:
            if len(human) != len(policy):
                raise ValueError(f"human command has {len(human)} joints, policy command {len(policy)}")
            command = [a * h + (1.0 - a) * p for h, p in zip(human, policy, strict=True)]
        else:
            command = list(human if human is not None else policy)  # type: ignore[arg-type]
        self._last_command = command
        out.command = command
        return out
