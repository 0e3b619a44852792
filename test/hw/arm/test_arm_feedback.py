"""Force feedback on the leader (docs/teleop.md, "Force feedback"): two simulated arms on real
pseudo-terminals, two real ArmDrivers, the leader held by the simulator's modelled `Hand`.

The test is the teleop loop in miniature: the leader's reading commands the follower (`ArmPair`),
the follower's gripper is felt back by the leader (`ArmDriver.feel`), and what reaches the hand
is read from the simulated leader's shafts (`hand_forces`).
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

import pytest
from support.procs import wait_for

from hw.arm.test_arm import calibration, make_driver
from teleop_flywheel.core.calibration import ArmPair
from teleop_flywheel.core.clock import now_ns
from teleop_flywheel.core.so101 import JOINT_NAMES
from teleop_flywheel.hw.arm import ArmConfig, ArmDriver, Reading
from teleop_flywheel.hw.arm.rendering import FEEDBACK_STALE_S
from teleop_flywheel.hw.errors import BusTimeout, PortUnavailable
from teleop_flywheel.hw.feetech.sim import Faults, Hand, SimulatedArm
from teleop_flywheel.hw.feetech.sim.servo import STEPS_PER_RAD

pytestmark = pytest.mark.timeout(120)
GRIPPER = JOINT_NAMES.index("gripper")
OBJECT = 2300.0  # follower gripper shaft steps where the jaws meet the object
# The hand's pose: the body still, the trigger squeezed shut (leader shaft steps).
SQUEEZE = [2050.0, 2050.0, 1975.0, 2025.0, 2050.0, 2050.0]
OPEN = SQUEEZE[:GRIPPER] + [3000.0]
FELT = 0.1  # fraction of the leader gripper's maximum torque: a grasp the hand feels
PERIOD_S = 0.005  # the teleop loop's 200 Hz


@dataclass
class Rig:
    leader: SimulatedArm
    follower: SimulatedArm
    lead: ArmDriver
    follow: ArmDriver
    pair: ArmPair

    def run(self, seconds: float, feel: bool = True, until: Callable[[], bool] | None = None) -> None:
        """The teleop loop at 200 Hz, paced as `ArmDriver.run` paces it (a pass every `PERIOD_S`,
        not a pass and then a full period's sleep): the leader's pose commands the follower, the
        follower's gripper is felt back (unless `feel` is False: its news stops)."""
        end = time.monotonic() + seconds
        next_pass = time.monotonic()
        while time.monotonic() < end and not (until and until()):
            late = time.monotonic() - next_pass
            if late < 0:
                time.sleep(-late)
            elif late > PERIOD_S:
                next_pass = time.monotonic()  # fell behind (a starved machine): resync rather than burst
            next_pass += PERIOD_S
            if not self.lead.state.connected:  # the leader's port went away: reconnect, as `run()` does
                self.lead.connect()
                time.sleep(0.05)
                continue
            try:  # a read lost on a starved machine is counted and the loop goes on, as in `run()`
                lead = self.lead.tick()
                self.follow.command(JOINT_NAMES, self.pair.to_follower(lead.positions), now_ns())
                got = self.follow.tick()
            except PortUnavailable as exc:
                self.lead.lost(str(exc))
                continue
            except BusTimeout:
                continue
            if feel:
                self.lead.feel(self.pair.to_leader(got.positions), got.efforts, got.velocities, got.stamp_ns)

    def lead_tick(self) -> Reading:
        """One leader tick; a read lost on a starved machine is counted and tried again, as `run()` does."""
        for _ in range(20):
            try:
                return self.lead.tick()
            except BusTimeout:
                continue
        return self.lead.tick()

    def gripper_torque(self) -> bool:
        return self.leader.servos[GRIPPER + 1].torque_on

    def hand_on_gripper(self) -> float:
        return abs(self.leader.hand_forces()[GRIPPER])


@contextmanager
def rig(tmp_path: Path, feedback: str, human: list[float] = SQUEEZE, hand: Hand | None = None,
        faults: Faults | None = None, grip_object: float | None = OBJECT) -> Iterator[Rig]:
    with (SimulatedArm("leader", link=tmp_path / "leader", hand=hand or Hand(), faults=faults) as leader,
          SimulatedArm("follower", link=tmp_path / "follower", grip_object=grip_object) as follower):
        leader.set_human(lambda t: human)
        lead = make_driver(leader, "leader", feedback=feedback)
        follow = make_driver(follower, "follower", grip_force_limit=0.2)
        # As the bus loop does: a connect that timed out on a starved machine is tried again.
        wait_for(lead.connect, 30, "the leader connected")
        wait_for(follow.connect, 30, "the follower connected")
        try:
            yield Rig(leader, follower, lead, follow, ArmPair(calibration("leader"), calibration("follower")))
        finally:
            follow.close("release")
            lead.close()


def test_the_hand_feels_the_grasp_with_gripper_feedback_and_next_to_nothing_without(tmp_path: Path) -> None:
    """The follower's jaws stop on an object while the hand squeezes the trigger shut: with
    `gripper` the leader's gripper pushes back on the hand (up to its ceiling), with `off` the hand
    closes the trigger unopposed."""
    felt = {}
    for mode in ("gripper", "off"):
        (tmp_path / mode).mkdir()
        with rig(tmp_path / mode, mode) as r:
            r.run(3.0, until=lambda r=r: r.follower.servos[GRIPPER + 1].position <= OBJECT + 1.0)  # noqa: B023
            r.run(1.0)  # squeezing on the object
            assert r.follower.servos[GRIPPER + 1].position == pytest.approx(OBJECT, abs=1.0), "on the object"
            assert r.follow.health().values["gripper_force_limited"] is True
            felt[mode] = (r.hand_on_gripper(), r.gripper_torque(), r.leader.servos[GRIPPER + 1].get("Torque_Limit"))
            assert r.lead.health().values["feedback_rendering"] is (mode == "gripper"), "diagnostics say so"
    force, torque, ceiling = felt["gripper"]
    assert torque and ceiling == 150
    assert FELT < force <= ceiling / 1000 + 0.01, f"the hand pushes {force:.3f} of max torque on the trigger"
    force, torque, _ = felt["off"]
    assert not torque and force < 0.01, f"without feedback the hand still pushes {force:.3f}"


def test_a_trigger_closed_at_a_hands_pace_on_nothing_renders_nothing(tmp_path: Path) -> None:
    """The follower's half-torque gripper closing at a hand's 0.5 rad/s in free air lags its goal by
    a load at the grip limit, slower than the old stall speed (0.5 rad/s): it was felt as a grasp (and
    the follower's force limit held it to a creep), so the trigger pushed back on nothing."""
    with rig(tmp_path, "gripper", human=OPEN, grip_object=None) as r:
        r.run(2.0)  # the follower's soft start to the open pose
        start = time.monotonic()
        r.leader.set_human(lambda t: OPEN[:GRIPPER] + [max(SQUEEZE[GRIPPER], OPEN[GRIPPER] - 326.0 * (
            time.monotonic() - start))])
        torqued: list[bool] = []
        limited: list[bool] = []
        r.run(5.0, until=lambda: torqued.append(r.gripper_torque()) or limited.append(
            r.follow.health().values["gripper_force_limited"]) or r.leader.servos[GRIPPER + 1].position < 2100)
        assert r.leader.servos[GRIPPER + 1].position < 2100, "the trigger closed"
        assert not any(limited), "the follower's force limit took its own close for a grasp"
        assert not any(torqued), "the trigger pushed back on nothing"


def test_a_grasp_held_by_a_soft_hand_is_rendered_steadily_not_buzzed(tmp_path: Path) -> None:
    """A hand 40x softer than the default holds the trigger 0.1 rad past where it was when the jaws
    met the object and does not react: the trigger's spring pushes it back, the follower's goal
    with it, and the load the grasp is judged by with that. The leader's gripper is a soft spring
    (P_Coefficient 8) so this settles; at the other joints' P 16 the rendering switched on and off
    at ~11 Hz (23 times in 2 s in bench/feedback.py's `stability_grasp`): a buzz in the hand."""
    with rig(tmp_path, "gripper", human=OPEN, hand=Hand(stiffness=0.5)) as r:
        r.run(2.0)  # the follower's soft start to the open pose
        start = time.monotonic()
        r.leader.set_human(lambda t: OPEN[:GRIPPER] + [max(SQUEEZE[GRIPPER], OPEN[GRIPPER] - 326.0 * (
            time.monotonic() - start))])  # squeezed at a hand's 0.5 rad/s
        r.run(5.0, until=lambda: r.follower.servos[GRIPPER + 1].position <= OBJECT + 1.0)
        held = r.leader.servos[GRIPPER + 1].position - 0.1 * STEPS_PER_RAD
        r.leader.set_human(lambda t: SQUEEZE[:GRIPPER] + [held])
        r.run(4.0, until=r.gripper_torque)
        r.run(0.5)  # the push to the held pose
        ticks: list[tuple[float, bool]] = []  # (when, the trigger torqued) after each pass of the loop
        r.run(1.5, until=lambda: ticks.append((time.monotonic(), r.gripper_torque())) and False)
        # A pass that came later than the feedback's staleness rightly lets go: the loop was starved.
        let_go = [b - a for (a, was), (b, now) in pairwise(ticks) if was and not now]
        assert len(ticks) > 20 and not [gap for gap in let_go if gap < FEEDBACK_STALE_S], (
            f"the grasp let go {len(let_go)} times in {len(ticks)} passes (after {let_go} s)")
        assert r.hand_on_gripper() > 0.02, "the spring is felt (nothing, at rest without torque)"


def test_the_feedback_lets_go_when_the_hand_opens_and_when_the_follower_goes_quiet(tmp_path: Path) -> None:
    with rig(tmp_path, "gripper") as r:
        r.run(4.0, until=lambda: r.gripper_torque() and r.hand_on_gripper() > FELT)
        assert r.gripper_torque() and r.hand_on_gripper() > FELT, "a grasp is felt"
        r.leader.set_human(lambda t: OPEN)  # the hand lets the trigger open: the jaws leave the object
        r.run(3.0, until=lambda: not r.gripper_torque())
        assert not r.gripper_torque()
        r.run(3.0, until=lambda: abs(r.leader.servos[GRIPPER + 1].position - OPEN[GRIPPER]) < 0.25)
        assert r.hand_on_gripper() < 0.01, "the trigger open where the hand wants it, nothing felt"
        r.leader.set_human(lambda t: SQUEEZE)
        r.run(4.0, until=lambda: r.gripper_torque())
        assert r.gripper_torque(), "a new grasp is felt again"
        stop = time.monotonic()
        r.run(1.0, feel=False, until=lambda: not r.gripper_torque())  # the follower's news stops
        assert not r.gripper_torque()
        assert time.monotonic() - stop < FEEDBACK_STALE_S + 0.5  # a tick after the news is stale, not at once


def test_an_estop_a_fault_and_the_exit_release_the_feedback(tmp_path: Path) -> None:
    with rig(tmp_path, "gripper") as r:
        r.run(4.0, until=r.gripper_torque)
        assert r.gripper_torque()
        r.lead.estop("test")
        r.run(0.02)
        assert not r.gripper_torque(), "an e-stop releases the feedback at the next tick"
        r.run(0.5)
        assert not r.gripper_torque(), "and it stays released while held, the grasp still on"
        r.lead.reset()
        r.run(4.0, until=r.gripper_torque)
        assert r.gripper_torque(), "felt again after the operator's reset"
        r.leader.servos[3].faults |= 0x20  # elbow_flex reports an overload: the arm holds
        r.run(1.0, until=lambda: not r.gripper_torque())
        assert r.lead.state.faults and not r.gripper_torque(), "a fault releases the feedback"
        r.leader.servos[3].faults = 0
        r.lead.reset()
        r.run(4.0, until=r.gripper_torque)
        assert r.gripper_torque()
        r.lead.close()  # the exit, while the grasp is rendered
        assert not any(s.torque_on for s in r.leader.servos.values()), "no torque left on at exit"


def test_a_reconnect_releases_the_feedback(tmp_path: Path) -> None:
    """The leader's USB goes away while a grasp is rendered (the servos keep their own power) and
    comes back: the reconnect's configure releases the trigger before anything else."""
    with rig(tmp_path, "gripper", faults=Faults(unplug_at=2.0, replug_after=0.3)) as r:
        r.run(2.0, until=r.gripper_torque)
        assert r.gripper_torque()
        r.run(3.0, until=lambda: not r.lead.state.connected)
        assert not r.lead.state.connected, "the port went away"
        assert r.gripper_torque(), "the servos still hold what they were told: nothing reaches them"
        r.run(5.0, until=lambda: r.lead.state.reconnects >= 1)
        assert r.lead.state.reconnects == 1
        assert not r.gripper_torque(), "configure on reconnect released the feedback"
        r.run(4.0, until=r.gripper_torque)
        assert r.gripper_torque(), "the grasp, still on, is felt again"


def test_a_trigger_that_did_not_take_the_feedback_ceiling_gets_no_torque(tmp_path: Path) -> None:
    """The live Torque_Limit is the driver's full torque: a trigger servo that acknowledges the
    ceiling's write and keeps its old value must never be torqued toward the grasp."""
    with rig(tmp_path, "gripper") as r:
        r.leader.servos[GRIPPER + 1].refused = {"Torque_Limit"}
        r.run(2.0, until=r.gripper_torque)
        assert not r.gripper_torque(), f"torqued at Torque_Limit {r.leader.servos[GRIPPER + 1].get('Torque_Limit')}"
        assert r.follower.servos[GRIPPER + 1].position == pytest.approx(OBJECT, abs=1.0), "the follower grasps"
        assert r.hand_on_gripper() < 0.01


def test_what_a_tick_rendered_is_stamped_when_the_torque_came_on_not_after_its_read_back(tmp_path: Path) -> None:
    """`Rendered.stamp_ns` is when the hand was given the force (the tick's last write, the torque
    switched on), which `/leader/feedback` records and the feedback bench times the latency to; the
    read-back that checks the servo took it comes after, and a loaded machine can stall it."""
    with rig(tmp_path, "gripper") as r:
        r.run(4.0, until=r.gripper_torque)
        assert r.gripper_torque(), "the grasp is rendered"
        rendered, read_back = r.lead.rendered, r.leader.latches[-1]  # the tick's last read: Torque_Enable
        assert rendered is not None and rendered.ceilings[GRIPPER] > 0
        assert rendered.stamp_ns < read_back * 1e9, (
            f"stamped {(rendered.stamp_ns - read_back * 1e9) / 1e6:.2f} ms after the torque's read-back was answered")


def test_feedback_is_the_leaders_and_a_known_mode(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="feedback must be one of"):
        ArmConfig(role="leader", feedback="everything")
    with pytest.raises(ValueError, match="rendered on a leader"):
        ArmConfig(role="follower", feedback="gripper")


PAN = JOINT_NAMES.index("shoulder_pan")


def test_contact_resists_a_push_into_a_blocked_joint_and_leaves_free_motion_alone(tmp_path: Path) -> None:
    """`contact`: once the session's first free motion is learned (the expected load), moving freely
    torques no joint; the follower's shoulder_pan blocked and the hand pushing 0.1 rad past it, the
    leader's shoulder_pan pushes back on the hand up to the default ceiling, which the hand
    overpowers (the leader's shaft follows it past the follower, short by what the ceiling bends
    the hand's stiffness); with `off` the hand feels nothing."""
    felt = {}
    base = list(OPEN)
    for mode in ("contact", "off"):
        (tmp_path / mode).mkdir()
        with rig(tmp_path / mode, mode, human=OPEN) as r:
            if mode == "contact":
                r.leader.set_human(lambda t: [b + (120.0 * math.sin(2.0 * t + i) if i < GRIPPER else 0.0)
                                              for i, b in enumerate(base)])
                r.run(30.0, until=lambda r=r: r.lead.health().values["feedback_contact_ready"])  # noqa: B023
                assert r.lead.health().values["feedback_contact_ready"]
                # 100 ticks of free motion (about a second idle; a starved loop takes longer, never fewer).
                torqued: list[bool] = []
                r.run(30.0, until=lambda r=r, torqued=torqued: torqued.append(  # noqa: B023
                    any(s.torque_on for s in r.leader.servos.values())) or len(torqued) >= 100)
                assert len(torqued) >= 100 and not any(torqued), "free motion torqued a leader joint"
                r.leader.set_human(lambda t: base)
            r.run(1.0)  # still, the follower where the leader is
            pan = r.follower.servos[PAN + 1]
            pan.blocked_at = pan.position
            r.leader.set_human(lambda t: [b + (65.0 if i == PAN else 0.0) for i, b in enumerate(base)])
            r.run(2.0, until=lambda r=r: abs(r.leader.hand_forces()[PAN]) > 0.1)  # noqa: B023
            r.run(0.3)
            felt[mode] = abs(r.leader.hand_forces()[PAN]), r.leader.servos[PAN + 1].torque_on
            past = r.leader.servos[PAN + 1].position - base[PAN]
            assert not r.follow.state.faults, "pushed short of a collision"
    force, torque = felt["contact"]
    ceiling = ArmConfig(role="leader").feedback_contact_torque_limit
    assert torque and 0.1 < force <= ceiling / 1000 + 0.01, f"the hand feels {force:.3f} of max torque on shoulder_pan"
    # The hand (20 Present_Load units per step) means 65 steps past: the ceiling bends it back by at most ceiling / 20.
    assert past >= 65.0 - ceiling / 20.0 - 2.0, f"the hand did not overpower the ceiling: {past:.1f} steps past"
    force, torque = felt["off"]
    assert not torque and force < 0.02, f"without feedback the hand feels {force:.3f}"


def test_a_leader_rendering_contact_on_every_joint_lets_go_at_exit_without_parking(tmp_path: Path) -> None:
    """Every leader joint torqued for feedback reads as a leader with torque on: the exit parked it,
    moving the device in the operator's hand to the rest pose before letting go."""
    with rig(tmp_path, "contact", human=OPEN) as r:
        base = list(OPEN)
        r.leader.set_human(lambda t: [b + (120.0 * math.sin(2.0 * t + i) if i < GRIPPER else 0.0)
                                      for i, b in enumerate(base)])
        r.run(30.0, until=lambda: r.lead.health().values["feedback_contact_ready"])
        r.leader.set_human(lambda t: base)
        r.run(1.0)
        for sid in range(1, GRIPPER + 1):
            r.follower.servos[sid].blocked_at = r.follower.servos[sid].position
        r.leader.set_human(lambda t: [b + 65.0 for b in base[:GRIPPER]] + [SQUEEZE[GRIPPER]])
        r.run(10.0, until=lambda: all(s.torque_on for s in r.leader.servos.values()))
        assert all(s.torque_on for s in r.leader.servos.values()), "every joint renders"
        writes = len(r.leader.goal_writes)
        r.lead.close()
        assert not any(s.torque_on for s in r.leader.servos.values()), "no torque left on at exit"
        assert len(r.leader.goal_writes) == writes, "the leader was moved at exit"


def test_a_leader_driven_by_commands_is_torqued_but_renders_nothing(tmp_path: Path) -> None:
    """While the policy drives (commands to the leader: it tracks the follower) every leader joint
    is torqued, and `rendered` says 0 on each: the record (`/leader/feedback`, the mashing measures'
    felt share) counts what feedback gave the hand, not the leader's tracking (before: 0.3 on every
    joint, so a takeover episode showed a third of its contact as felt)."""
    with rig(tmp_path, "gripper", human=OPEN) as r:
        r.run(0.3)
        for _ in range(60):
            r.lead.command(JOINT_NAMES, r.lead_tick().positions, now_ns())
            if all(s.torque_on for s in r.leader.servos.values()):
                break
            time.sleep(0.005)
        assert all(s.torque_on for s in r.leader.servos.values()), "commands engaged the leader"
        r.lead.command(JOINT_NAMES, r.lead_tick().positions, now_ns())
        assert r.lead.rendered is not None
        assert r.lead.rendered.ceilings == (0.0,) * 6 and r.lead.rendered.offsets == (0.0,) * 6


def test_free_motion_after_the_followers_catch_up_torques_no_leader_joint(tmp_path: Path) -> None:
    """`contact` learns free motion from the session's first seconds, which start with the follower
    catching up to the leader (its soft start) and braking into place. Learned as free motion, that
    arrival (loads to 0.8 at 2 rad/s, then an overshoot) bent the expected load so that plain free
    motion afterwards rendered shoulder_lift a third of the time: drag the hand felt for nothing."""
    base = list(OPEN)
    with rig(tmp_path, "contact", human=OPEN) as r:
        r.leader.set_human(lambda t: [b + (120.0 * math.sin(2.0 * t + i) if i < GRIPPER else 0.0)
                                      for i, b in enumerate(base)])
        r.run(30.0, until=lambda: r.lead.health().values["feedback_contact_ready"])
        assert r.lead.health().values["feedback_contact_ready"]
        # Four seconds of ticks (a starved loop takes longer, never fewer): more than the motion's period.
        torqued: list[bool] = []
        r.run(60.0, until=lambda: torqued.append(any(s.torque_on for s in r.leader.servos.values()))
              or len(torqued) >= 800)
        assert len(torqued) >= 800
        assert sum(torqued) == 0, f"free motion torqued a leader joint on {sum(torqued)} of {len(torqued)} ticks"
