"""`scripted` policy: smooth minimum-jerk moves through waypoints — the simulator's policy.

It can be told to fail: with `fail_every=N`, every Nth move heads for a waypoint offset by
`fail_offset_rad` (the "wrong grasp" a human has to correct), so a rollout session has
something for the operator to take over from.

With a `clock_probe` (the task spec's field, `core/task_spec.ClockProbe`) every reset plays the
probe `probe_at_s` after it: one joint out and back, a short known motion the camera sees — a sharp
timing event per episode for the validator's content clock check (docs/validate.md).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from teleop_flywheel.core.so101 import JOINT_NAMES
from teleop_flywheel.core.task_spec import PROBE_AT_S, ClockProbe, clock_probe_of
from teleop_flywheel.policies.base import NO_IMAGES, Images, Policy

DEFAULT_WAYPOINTS: list[list[float]] = [
    [0.0, -0.3, 0.4, 0.2, 0.0, 0.1],
    [0.5, 0.1, 0.1, -0.2, 0.6, 0.8],
    [-0.4, 0.2, -0.2, 0.3, -0.5, 0.2],
    [0.2, -0.1, 0.5, 0.0, 0.3, 0.6],
]


def min_jerk(s: float) -> float:
    s = min(max(s, 0.0), 1.0)
    return s * s * s * (10 - 15 * s + 6 * s * s)


@dataclass
class ScriptedPolicy(Policy):
    checkpoint_id: str = "scripted-v0"
    waypoints: list[list[float]] = field(default_factory=lambda: [list(w) for w in DEFAULT_WAYPOINTS])
    move_s: float = 2.0
    fail_every: int = 0
    fail_offset_rad: float = 0.35
    clock_probe: ClockProbe | None = None
    probe_at_s: float = PROBE_AT_S  # after each reset: the episode has started recording by then
    cameras: tuple[str, ...] = field(default=(), init=False)
    _start: list[float] | None = None  # the plan: from this state at _t0, move number _first onwards
    _t0: int = 0
    _first: int = 0
    _resume: bool = False  # after a takeover: re-plan the move under way from where the arm is
    _reset_ns: int = 0  # the last reset: the probe's time base (a re-plan does not move it)
    plans_dropped: int = 0

    @classmethod
    def from_args(cls, args: str, checkpoint_id: str) -> ScriptedPolicy:
        """`args` empty, or a YAML file with waypoints / move_s / fail_every / fail_offset_rad."""
        checkpoint_id = checkpoint_id or cls.checkpoint_id
        if not args:
            return cls(checkpoint_id)
        path = Path(args)
        try:
            data = yaml.safe_load(path.read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise ValueError(f"{path}: cannot read scripted policy ({exc})") from exc
        waypoints = data.get("waypoints", DEFAULT_WAYPOINTS)
        if not waypoints or any(len(w) != 6 for w in waypoints):
            raise ValueError(f"{path}: waypoints must be a list of 6-joint positions in radians")
        try:
            probe = clock_probe_of(data["clock_probe"], str(path)) if "clock_probe" in data else None
        except ValueError as exc:
            raise ValueError(f"{path}: cannot read scripted policy ({exc})") from exc
        return cls(checkpoint_id, [list(map(float, w)) for w in waypoints], float(data.get("move_s", 2.0)),
                   int(data.get("fail_every", 0)), float(data.get("fail_offset_rad", 0.35)), probe)

    def reset(self, state: Sequence[float] | None, t_ns: int) -> None:
        self._start = None if state is None else list(state)
        self._t0, self._first, self._reset_ns = t_ns, 0, t_ns

    def target(self, move: int) -> list[float]:
        goal = list(self.waypoints[move % len(self.waypoints)])
        if self.fail_every and move % self.fail_every == self.fail_every - 1:
            goal = [g + self.fail_offset_rad for g in goal]
        return goal

    def drop_plan(self) -> None:
        """The human moved the arm: the move under way starts over from the present state."""
        self._resume = True
        self.plans_dropped += 1

    def act(self, state: Sequence[float] | None, t_ns: int, images: Images = NO_IMAGES) -> list[float] | None:
        if self._start is None:
            if state is None:
                return None
            self.reset(state, t_ns)
        if self._resume and state is not None:
            self._resume = False
            move = self._first + int((t_ns - self._t0) / 1e9 // self.move_s)
            self._start, self._t0, self._first = list(state), t_ns, move
        elapsed = (t_ns - self._t0) / 1e9
        step = int(elapsed // self.move_s)
        move = self._first + step
        frm = self._start if step == 0 else self.target(move - 1)
        to = self.target(move)
        s = min_jerk((elapsed - step * self.move_s) / self.move_s)
        out = [a + (b - a) * s for a, b in zip(frm, to, strict=True)]  # type: ignore[arg-type]
        if self.clock_probe is not None:
            out[JOINT_NAMES.index(self.clock_probe.joint)] += self.clock_probe.offset(
                (t_ns - self._reset_ns) / 1e9 - self.probe_at_s)
        return out


def make_policy(args: str, checkpoint_id: str, *, simulated: bool) -> ScriptedPolicy:
    """Entry point `scripted` (teleop_flywheel.policies). Its waypoints are radians, so `simulated`
    chooses no calibration here; whether it may drive a real follower is the node's rule
    (`scripted_on_real`)."""
    return ScriptedPolicy.from_args(args, checkpoint_id)
