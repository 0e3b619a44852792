"""What a leader renders to the operator's hand: per bus tick what it did (`Rendered`, published as
`/leader/feedback`), and the `contact` mode's judgement of the follower (`Contact`: its load
beyond what free motion and gravity produce, `ExpectedLoad`); docs/teleop.md "Force feedback".

The STS3215 has no torque control: what reaches the hand is a spring toward the goal written,
capped by the live Torque_Limit. So what was rendered is, per joint, that goal minus where the
shaft is and that cap, and nothing where the servo has no torque."""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from teleop_flywheel.core.so101 import JOINT_NAMES


@dataclass(frozen=True)
class Rendered:
    """One leader tick's feedback, joint order: `offsets` the goal minus the present position (rad;
    0.0 where the joint renders no feedback), `ceilings` the live Torque_Limit as a fraction of the
    servo's maximum torque (0.0 where it renders none: also a joint torqued by commands),
    `stamp_ns` (`now_ns` clock) taken right after the tick's last goal or torque write."""

    stamp_ns: int
    offsets: tuple[float, ...]
    ceilings: tuple[float, ...]


@dataclass(frozen=True)
class Felt:
    """The follower as a leader feels it, joint order: `positions` in the leader's radians
    (`ArmPair.to_leader`), `efforts` its load (signed fraction of its maximum torque), `velocities`
    rad/s, `stamp_ns` when it arrived (`now_ns` clock); `jaws_stopped`: its gripper is on something
    (`grasp.stopped`: slow and not gaining speed toward where it presses since the sample before —
    jaws getting going from rest are slow and loaded too)."""

    positions: tuple[float, ...]
    efforts: tuple[float, ...]
    velocities: tuple[float, ...]
    stamp_ns: int
    jaws_stopped: bool = False


PRIOR = 10.0  # the least-squares fit's initial covariance: loads are fractions, features of order one
WARMUP = 400  # samples every free reading is learned from (2 s at 200 Hz) before a joint may render
# A follower this far from the leader (rad) is not moving freely: catching up after a soft start, or
# held off by something. Free motion at the 2 rad/s speed limit lags by less than 0.1 rad.
FREE_TRACK = 0.15
MIN_CEILING = 10  # Torque_Limit (0.1 %) a rendered contact starts at: below it the hand feels nothing
_LIFT, _ELBOW = JOINT_NAMES.index("shoulder_lift"), JOINT_NAMES.index("elbow_flex")


def features(positions: Sequence[float], velocities: Sequence[float], joint: int) -> list[float]:
    """What the follower's load on `joint` depends on in free motion: gravity through the pose of the
    two joints that carry the arm (sines and cosines of shoulder_lift, and of it with elbow_flex
    added and taken away, so either sign convention of the elbow fits), and the joint's own speed
    (a position loop lags a moving goal, and its load is that lag)."""
    lift, elbow = positions[_LIFT], positions[_ELBOW]
    return [1.0, math.sin(lift), math.cos(lift), math.sin(lift + elbow), math.cos(lift + elbow),
            math.sin(lift - elbow), math.cos(lift - elbow), velocities[joint]]


class ExpectedLoad:
    """One joint's load in free motion, fitted by recursive least squares (no forgetting: the arm's
    weight does not change within a session) to the follower's own readings — what the real servo
    reports, not the simulator's gravity model."""

    def __init__(self, n: int = 8) -> None:
        self.weights = [0.0] * n
        self._cov = [[PRIOR if i == k else 0.0 for k in range(n)] for i in range(n)]
        self.samples = 0

    def predict(self, phi: Sequence[float]) -> float:
        return sum(w * f for w, f in zip(self.weights, phi, strict=True))

    def learn(self, phi: Sequence[float], load: float) -> None:
        p = self._cov
        p_phi = [sum(row[k] * phi[k] for k in range(len(phi))) for row in p]
        gain = [x / (1.0 + sum(f * x for f, x in zip(phi, p_phi, strict=True))) for x in p_phi]
        error = load - self.predict(phi)
        self.weights = [w + g * error for w, g in zip(self.weights, gain, strict=True)]
        self._cov = [[p[i][k] - gain[i] * p_phi[k] for k in range(len(phi))] for i in range(len(phi))]
        self.samples += 1


@dataclass(frozen=True)
class ContactGains:
    """`load`: the excess over the expected load (fraction of max torque) at which a joint renders
    (what free motion's misses stay below); `gain`: Torque_Limit as a fraction of max torque per unit
    of excess beyond it; `ceiling`: the highest Torque_Limit (0.1 %)."""

    load: float = 0.15
    gain: float = 1.0
    ceiling: int = 150


class Contact:
    """`contact` feedback on the leader's body joints: a joint whose follower load departs from what
    free motion and gravity produce (`ExpectedLoad`) by more than `gains.load` is torqued toward
    where the follower is (the wall is where the follower stopped), its ceiling growing with the
    excess up to `gains.ceiling` — only while the hand is beyond the follower in the direction the
    follower pushes (never a pull toward the obstacle). A joint keeps rendering down to
    `keep × gains.load` (a load that dips for a tick does not buzz). The fit learns from every
    free reading for `WARMUP` samples (the session's first seconds: the arm moved freely), then only
    from readings it already explains to within half of `gains.load`, and never while it renders:
    a contact is not learned as normal. Either way only from a follower within `FREE_TRACK` of the
    leader (one catching up after a soft start presses, it does not move freely)."""

    def __init__(self, gains: ContactGains, joints: Sequence[int], keep: float) -> None:
        self.gains = gains
        self.keep = keep
        self.models = {j: ExpectedLoad() for j in joints}
        self._learned_ns: int | None = None  # the sample last learned from: each is learned once, ticks see it again

    @property
    def ready(self) -> bool:
        """Every joint has learned free motion (before, nothing is rendered)."""
        return all(m.samples >= WARMUP for m in self.models.values())

    def render(self, felt: Felt, leader: Sequence[float], rendering: set[int]) -> dict[int, tuple[float, int]]:
        """Joint → (leader goal rad, Torque_Limit) for every body joint to torque now."""
        out: dict[int, tuple[float, int]] = {}
        g = self.gains
        new, self._learned_ns = felt.stamp_ns != self._learned_ns, felt.stamp_ns
        for j, model in self.models.items():
            phi = features(felt.positions, felt.velocities, j)
            residual = felt.efforts[j] - model.predict(phi)
            warm = model.samples >= WARMUP
            offset = felt.positions[j] - leader[j]
            free = abs(offset) < FREE_TRACK and (not warm or (abs(residual) < g.load / 2 and j not in rendering))
            if free and new:
                model.learn(phi, felt.efforts[j])
            if not warm:
                continue
            threshold = g.load * (self.keep if j in rendering else 1.0)
            if abs(residual) < threshold or offset * residual >= 0:
                continue
            excess = abs(residual) - g.load
            ceiling = min(g.ceiling, max(MIN_CEILING, round(1000.0 * g.gain * excess)))
            out[j] = (felt.positions[j], ceiling)
        return out
