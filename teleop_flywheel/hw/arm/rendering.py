"""What a leader renders to the operator's hand (docs/teleop.md "Force feedback"): the bus thread's
`Renderer` (which joints it torques toward where the follower is, at what ceiling, and when it lets
go), per bus tick what it did (`Rendered`, published as `/leader/feedback`), and the `contact`
mode's judgement of the follower (`Contact`: its load beyond what free motion and gravity produce,
`ExpectedLoad`).

The STS3215 has no torque control: what reaches the hand is a spring toward the goal written,
capped by the live Torque_Limit. So what was rendered is, per joint, that goal minus where the
shaft is and that cap, and nothing where the servo has no torque."""
from __future__ import annotations

import math
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from teleop_flywheel.core.calibration import RAD_PER_STEP
from teleop_flywheel.core.clock import NS_PER_S, now_ns
from teleop_flywheel.core.so101 import GRIPPER, JOINT_NAMES
from teleop_flywheel.hw.arm.config import ArmConfig
from teleop_flywheel.hw.arm.grasp import stopped
from teleop_flywheel.hw.arm.servos import ArmServos

# The follower as felt, or the rig's say on the feedback (`gate`): older than this (the follower's
# driver or the teleop node stopped, its topic went quiet) and the leader stops rendering: the
# command watchdog's default (`watchdog_ms`).
FEEDBACK_STALE_S = 0.1
# A grasp being rendered goes on while the follower's load stays above this fraction of
# `feedback_grasp_load`: its force limit holds the load near the threshold, and a load that dips
# for one tick must not switch the leader's torque off and on (a buzz in the hand).
FEEDBACK_KEEP = 0.5


@dataclass(frozen=True)
class Rendered:
    """One leader tick's feedback, joint order: `offsets` the goal minus the present position (rad;
    0.0 where the joint renders no feedback), `ceilings` the live Torque_Limit as a fraction of the
    servo's maximum torque (0.0 where it renders none: also a joint torqued by commands),
    `stamp_ns` (`now_ns` clock) taken right after the tick's last goal or torque write: a torque
    switched on or off is read back after it, which is not waited for."""

    stamp_ns: int
    offsets: tuple[float, ...]
    ceilings: tuple[float, ...]


@dataclass(frozen=True)
class Felt:
    """The follower as a leader feels it, joint order: `positions` in the leader's radians
    (`ArmPair.to_leader`), `efforts` its load (signed fraction of its maximum torque), `velocities`
    rad/s, `stamp_ns` when it arrived (`now_ns` clock); `jaws_stopped`: its gripper is on something
    (`grasp.stopped`: slow and not gaining speed toward where it presses since the sample before —
    jaws getting going from rest are slow and loaded too —, and if still at that sample, loaded
    then to half `feedback_grasp_load` too: at rest and told to move, they are loaded a sample
    before they move)."""

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
# Samples in a row (0.4 s at 200 Hz) a follower joint must first have stayed within `FREE_TRACK`
# before any of its load is learned as free motion's, and samples since its news last paused past
# `FEEDBACK_STALE_S` (the command watchdog's: the follower held meanwhile) before a moving one is
# judged. A follower catching up (its soft start, a hand that moved on while its commands or its
# news paused) accelerates, brakes and overshoots for ~0.3 s: loads up to 0.8 (~0.012 per rad/s² of
# acceleration) that a fit of pose and speed does not explain. Learned, the soft start's arrival bent
# the fit for all the rest; judged, a catch-up was rendered as a contact (free-motion drag in
# bench/feedback.py). Later excursions and pauses do not hold the learning back (a starved loop has
# them often, and after the warm-up only readings the fit explains are learned); a joint standing
# still on something (`STALL_SAMPLES`) is judged at once.
SETTLE_SAMPLES = 80
MIN_CEILING = 10  # Torque_Limit (0.1 %) a rendered contact starts at: below it the hand feels nothing
# A follower joint that stood still (within Present_Velocity's one step/s) for this many of its
# samples in a row (15 ms at 200 Hz) while the hand is beyond it is held by something: its contact
# is judged at `STALLED` times a moving one's thresholds. Free motion never stands still that long
# while moving: a reversal passes zero speed within a sample.
STALL_SAMPLES = 3
STALLED = 0.5
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
    of excess above where a rendering joint lets go; `ceiling`: the highest Torque_Limit (0.1 %)."""

    load: float = 0.15
    gain: float = 1.0
    ceiling: int = 150


class Contact:
    """`contact` feedback on the leader's body joints: a joint whose follower load departs from what
    free motion and gravity produce (`ExpectedLoad`) by more than `gains.load` is torqued toward
    where the follower is (the wall is where the follower stopped), its ceiling `gains.gain` times the
    excess above `keep` times its threshold, up to `gains.ceiling` — only while the hand is beyond
    the follower in the direction the follower pushes (never a pull toward the obstacle). A joint
    keeps rendering down to `keep` times its threshold (a load that dips for a tick does not buzz),
    where its ceiling has come down to nothing: a release never drops a force off the hand. The
    threshold decides that the follower meets something, it is not a dead band of what the hand
    feels: grown from the threshold, a blocked joint's first 0.075 of excess would go unfelt while
    the follower's load climbs on at ~2.3/s (the push felt ~20 ms later, bench/feedback.py). Nor
    is the whole excess rendered at once: a step of 0.075 on contact makes a hand 40x softer than
    the default chatter on and off, and free motion's rare misses past the threshold drag the
    hand (+18 % in the bench). A follower joint standing still for `STALL_SAMPLES` while the hand is
    beyond it is blocked, not a miss of the fit in free motion: its thresholds are `STALLED` times a
    moving one's, so it is felt ~0.08 of load sooner (each tick it is not, the follower's load
    climbs on); its ceiling grows at the same gain (a steeper one, delayed by the follower's round
    trip, makes a soft hand oscillate). The fit learns from every free reading for `WARMUP` samples
    (the session's first seconds: the arm moved freely), then only from readings it already explains
    to within half of `gains.load`, and never while it renders: a contact is not learned as normal.
    Either way only from a follower that has tracked within `FREE_TRACK` of the leader for
    `SETTLE_SAMPLES` (one catching up presses and overshoots, it does not move freely); nor is a
    moving joint judged before, only a still one."""

    def __init__(self, gains: ContactGains, joints: Sequence[int], keep: float) -> None:
        self.gains = gains
        self.keep = keep
        self.models = {j: ExpectedLoad() for j in joints}
        self._learned_ns: int | None = None  # the sample last learned from: each is learned once, ticks see it again
        self._still = dict.fromkeys(joints, 0)  # per joint, the follower's samples in a row standing still
        self._tracking = dict.fromkeys(joints, 0)  # per joint, the follower's samples in a row within FREE_TRACK
        self._since_gap = 0  # the follower's samples since its news last paused past FEEDBACK_STALE_S
        self._arrived: set[int] = set()  # joints whose follower has once tracked for SETTLE_SAMPLES

    @property
    def ready(self) -> bool:
        """Every joint has learned free motion (before, nothing is rendered)."""
        return all(m.samples >= WARMUP for m in self.models.values())

    def render(self, felt: Felt, leader: Sequence[float], rendering: set[int]) -> dict[int, tuple[float, int]]:
        """Joint → (leader goal rad, Torque_Limit) for every body joint to torque now."""
        out: dict[int, tuple[float, int]] = {}
        g = self.gains
        gap = self._learned_ns is not None and felt.stamp_ns - self._learned_ns > FEEDBACK_STALE_S * NS_PER_S
        new, self._learned_ns = felt.stamp_ns != self._learned_ns, felt.stamp_ns
        if new:
            self._since_gap = 0 if gap else self._since_gap + 1
        for j, model in self.models.items():
            phi = features(felt.positions, felt.velocities, j)
            residual = felt.efforts[j] - model.predict(phi)
            warm = model.samples >= WARMUP
            offset = felt.positions[j] - leader[j]
            if new:
                self._still[j] = self._still[j] + 1 if abs(felt.velocities[j]) <= RAD_PER_STEP else 0
                self._tracking[j] = self._tracking[j] + 1 if abs(offset) < FREE_TRACK else 0
                if self._tracking[j] > SETTLE_SAMPLES:
                    self._arrived.add(j)
            free = (j in self._arrived and abs(offset) < FREE_TRACK
                    and (not warm or (abs(residual) < g.load / 2 and j not in rendering)))
            settled = self._tracking[j] > SETTLE_SAMPLES and self._since_gap > SETTLE_SAMPLES
            if free and new:
                model.learn(phi, felt.efforts[j])
            if not warm:
                continue
            stalled = self._still[j] >= STALL_SAMPLES
            if not (stalled or settled or j in rendering):
                continue
            onset = g.load * (STALLED if stalled else 1.0)
            if abs(residual) < onset * (self.keep if j in rendering else 1.0) or offset * residual >= 0:
                continue
            ceiling = round(1000.0 * g.gain * (abs(residual) - onset * self.keep))
            out[j] = (felt.positions[j], min(g.ceiling, max(MIN_CEILING, ceiling)))
        return out


class Renderer:
    """A leader's force feedback (`ArmConfig.feedback`), driven by its bus thread. `feel()` and
    `gate()` (any thread) pass on the follower and the rig's say; each tick in the hand, `render()`
    torques the joints whose follower meets something — the gripper: a grasp (load at
    `feedback_grasp_load`, jaws stalled), at `feedback_torque_limit`; with `contact`, a body joint
    whose load departs from free motion's (`Contact`), its ceiling growing with the excess —
    softly toward where the follower is: the hand feels a spring it can always overpower. No
    grasp, news older than `FEEDBACK_STALE_S`, a hold (fault, e-stop) or a gate closed releases
    that joint. `joints` are those torqued to render; `note()` says what a tick left them doing."""

    def __init__(self, config: ArmConfig, servos: ArmServos,
                 note_torque: Callable[[dict[int, bool]], None]) -> None:
        self.config = config
        self.servos = servos
        self._note_torque = note_torque  # the driver's record of which servos have torque
        self._gripper = JOINT_NAMES.index(GRIPPER)
        self._lock = threading.Lock()
        self._felt: Felt | None = None  # the follower as last felt
        # The rig's say on the feedback (why not, "" = allowed; when it was last said), None: no say.
        self._gate: tuple[str, int] | None = None
        self.gated = ""  # why the last tick rendered nothing although a follower was felt ("" = it could)
        self.joints: set[int] = set()  # joint indices torqued to render
        self._written_ns: int | None = None  # this tick's last write, if `render` wrote
        self.ceilings: dict[int, int] = {}  # the Torque_Limit written (and read back) per servo id
        self.contact = (Contact(ContactGains(config.feedback_contact_load, config.feedback_contact_gain,
                                             config.feedback_contact_torque_limit),
                                [i for i in range(len(JOINT_NAMES)) if i != self._gripper], FEEDBACK_KEEP)
                        if config.feedback == "contact" else None)

    def feel(self, positions: Sequence[float], efforts: Sequence[float], velocities: Sequence[float],
             stamp_ns: int) -> None:
        """The follower (`ArmDriver.feel`)."""
        g = self._gripper

        def toward(v: Sequence[float], e: Sequence[float]) -> float:  # the jaws' speed toward where they press
            return math.copysign(v[g], v[g] * e[g])

        with self._lock:
            last = self._felt
            was = None if last is None else toward(last.velocities, last.efforts)
            loaded = last is not None and abs(last.efforts[g]) >= self.config.feedback_grasp_load * FEEDBACK_KEEP
            self._felt = Felt(tuple(positions), tuple(efforts), tuple(velocities), stamp_ns,
                              stopped(velocities[g], toward(velocities, efforts), was, loaded))

    def gate(self, reason: str, stamp_ns: int) -> None:
        """The rig's say (`ArmDriver.gate`)."""
        with self._lock:
            self._gate = (reason, stamp_ns)

    def render(self, now: int, held: bool, positions: Sequence[float], refused: set[int]) -> list[float] | None:
        """One tick of a leader in the hand (its joints at `positions`; servos in `refused` never
        torqued): torque the joints whose follower meets something, release each the moment it
        does not. The goal written, None if none was."""
        self._written_ns = None
        with self._lock:
            felt, gate = self._felt, self._gate
        stale = FEEDBACK_STALE_S * NS_PER_S
        self.gated = "" if gate is None else gate[0] or ("the rig's say is stale" if now - gate[1] > stale else "")
        want: dict[int, tuple[float, int]] = {}
        if felt is not None and not held and not self.gated and now - felt.stamp_ns <= stale:
            g = self._gripper
            grasp_load = self.config.feedback_grasp_load * (FEEDBACK_KEEP if g in self.joints else 1.0)
            if abs(felt.efforts[g]) >= grasp_load and felt.jaws_stopped:
                want[g] = (felt.positions[g], self.config.feedback_torque_limit)
            if self.contact is not None:
                want.update(self.contact.render(felt, positions, self.joints))
        ids, servos = self.servos.ids, self.servos
        want = {i: v for i, v in want.items() if ids[i] not in refused}
        stop = sorted(self.joints - set(want))
        if stop:
            self._written_ns = servos.set_torque([ids[i] for i in stop], False)
            self._note_torque(dict.fromkeys((ids[i] for i in stop), False))
            self.joints -= set(stop)
        if not want:
            return None
        start = [i for i in want if i not in self.joints]
        limits = {ids[i]: want[i][1] for i in want if i in start or self.ceilings.get(ids[i]) != want[i][1]}
        if limits:
            servos.bus.sync_write_register("Torque_Limit", limits)
            self.ceilings.update(limits)
        if start:
            # Read back before torque comes on: the live limit is otherwise the driver's full torque.
            # Not taken: no torque on that joint this tick, tried again the next. Once on, a changed
            # ceiling is written without a read-back: a lost write leaves the last, no higher than
            # the configured ceiling.
            back = servos.registers("Torque_Limit", [ids[i] for i in start])
            start = [i for i in start if back.get(ids[i]) == limits[ids[i]]]
        live = sorted(self.joints | set(start))
        if not live:
            return None
        goal = list(positions)
        for i in live:
            goal[i] = want[i][0]
        servos.write_goals(goal, [ids[i] for i in live])
        self._written_ns = now_ns()
        if start:
            self._written_ns = servos.set_torque([ids[i] for i in start], True)
            self._note_torque(dict.fromkeys((ids[i] for i in start), True))
            self.joints |= set(start)
        return goal

    def note(self, goal: Sequence[float] | None, positions: Sequence[float], off: set[int]) -> Rendered:
        """The goal offset and torque ceiling of every joint rendering feedback as this tick left it
        (`goal` last written, servos in `off` without torque), stamped at this tick's last write by
        `render` (a torque switched on or off: when its write went out, not after its read-back),
        else now. A leader driven by commands (tracking the follower while the policy drives) is torqued
        too, but renders nothing: its joints say 0, so the record (`complementary_info.feedback`, the
        mashing measures' felt share) means what the hand was given."""
        ids = self.servos.ids
        on = [i in self.joints and sid not in off and goal is not None for i, sid in enumerate(ids)]
        offsets = tuple(goal[i] - positions[i] if on[i] and goal is not None else 0.0 for i in range(len(on)))
        ceilings = tuple(self.ceilings.get(sid, 0) / 1000.0 if on[i] else 0.0 for i, sid in enumerate(ids))
        stamp, self._written_ns = self._written_ns or now_ns(), None
        return Rendered(stamp, offsets, ceilings)
