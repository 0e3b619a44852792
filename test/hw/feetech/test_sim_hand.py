"""The simulator's modelled hand (`Hand`): an impedance on a leader's shafts that moves a limp
joint, feels a torqued one and can overpower a low Torque_Limit — read through the real bus on a
pseudo-terminal, what reaches the hand from the simulator (`hand_forces`)."""
from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from teleop_flywheel.hw.errors import BusTimeout
from teleop_flywheel.hw.feetech.bus import FeetechBus
from teleop_flywheel.hw.feetech.sim import Hand, SimulatedArm
from teleop_flywheel.hw.feetech.sim.servo import YIELDING_FINGER

pytestmark = pytest.mark.timeout(60)
POSE = [2050.0, 2050.0, 1975.0, 2025.0, 2050.0, 2650.0]
GRIP = 6


def settle(until: Callable[[], bool], seconds: float = 3.0) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end and not until():
        time.sleep(0.01)


def test_a_limp_leader_follows_the_hand_and_the_hand_feels_only_its_drag() -> None:
    with SimulatedArm("leader", hand=Hand()) as arm, FeetechBus(arm.port) as bus:
        arm.set_human(lambda t: POSE)
        settle(lambda: abs(arm.servos[GRIP].position - POSE[5]) < 0.1)
        present = bus.read_register(GRIP, "Present_Position")[0] + arm.servos[GRIP].get("Homing_Offset")
        assert present == pytest.approx(POSE[5], abs=1)
        assert abs(arm.hand_forces()[GRIP - 1]) < 0.005, "at rest where the hand wants it: nothing felt"
        arm.set_human(lambda t: POSE[:5] + [2650.0 + 600.0 * t])  # the hand moves the trigger at ~0.9 rad/s
        time.sleep(0.3)
        assert 0.03 < arm.hand_forces()[GRIP - 1] < 0.15, "moving it costs the hand the shaft's drag"


@pytest.mark.parametrize(("p_gain", "stiffness"), [(16, 8.0), (8, 4.0)])
def test_the_hand_and_a_torqued_servo_meet_where_their_pulls_balance(p_gain: int, stiffness: float) -> None:
    """Torque on toward a goal 100 steps from where the hand wants the shaft: the shaft rests where
    the hand's pull (20 per step) equals the servo's effort (8 per step at P 16, scaled by P)."""
    with SimulatedArm("leader", hand=Hand()) as arm, FeetechBus(arm.port) as bus:
        arm.set_human(lambda t: POSE)
        settle(lambda: abs(arm.servos[GRIP].position - POSE[5]) < 0.1)
        bus.write_register(GRIP, "P_Coefficient", p_gain)
        bus.write_register(GRIP, "Goal_Position", int(POSE[5]) + 100 - arm.servos[GRIP].get("Homing_Offset"))
        bus.write_register(GRIP, "Torque_Enable", 1)
        balance = 20.0 * stiffness / (20.0 + stiffness) * 100 / 1000  # fraction of max torque
        settle(lambda: abs(arm.hand_forces()[GRIP - 1] + balance) < 0.002)
        assert arm.hand_forces()[GRIP - 1] == pytest.approx(-balance, abs=0.002)
        load = bus.read_register(GRIP, "Present_Load")[0]
        assert load / 1000 == pytest.approx(balance, abs=0.003), "the servo reports the load the hand feels"


def test_the_hand_overpowers_a_low_torque_limit_and_feels_the_ceiling() -> None:
    with SimulatedArm("leader", hand=Hand()) as arm, FeetechBus(arm.port) as bus:
        arm.set_human(lambda t: POSE)
        settle(lambda: abs(arm.servos[GRIP].position - POSE[5]) < 0.1)
        bus.write_register(GRIP, "Torque_Limit", 150)
        bus.write_register(GRIP, "Goal_Position", int(POSE[5]) + 500 - arm.servos[GRIP].get("Homing_Offset"))
        bus.write_register(GRIP, "Torque_Enable", 1)
        settle(lambda: abs(arm.hand_forces()[GRIP - 1] + 0.15) < 0.002)
        assert arm.hand_forces()[GRIP - 1] == pytest.approx(-0.15, abs=0.002), "the ceiling, and no more"
        assert arm.servos[GRIP].position == pytest.approx(POSE[5] + 7.5, abs=0.5), "where the hand holds it"


def test_without_a_hand_a_torqued_leader_is_let_go_as_before() -> None:
    with SimulatedArm("leader") as arm, FeetechBus(arm.port) as bus:
        arm.set_human(lambda t: POSE)
        bus.write_register(GRIP, "Goal_Position", 3000 - arm.servos[GRIP].get("Homing_Offset"))
        bus.write_register(GRIP, "Torque_Enable", 1)
        settle(lambda: abs(arm.servos[GRIP].position - 3000) < 2)
        assert arm.servos[GRIP].position == pytest.approx(3000, abs=2)
        assert arm.hand_forces() == [0.0] * 6


def hand_force_rms(torque: bool, seconds: float = 2.0) -> float:
    """The hand moves the trigger ±400 steps at 0.5 Hz (up to ~1.9 rad/s); with `torque`, a host
    loop at ~200 Hz keeps the servo's goal at its own last reading (15 % Torque_Limit, P 8), the
    most transparent a torqued leader can be. RMS of the hand's force after the first half second."""
    with SimulatedArm("leader", hand=Hand()) as arm, FeetechBus(arm.port) as bus:
        arm.set_human(lambda t: POSE[:5] + [2650.0 + 400.0 * math.sin(math.pi * t)])
        bus.write_register(GRIP, "P_Coefficient", 8)
        bus.write_register(GRIP, "Torque_Limit", 150)
        bus.write_register(GRIP, "Torque_Enable", int(torque))
        forces, start = [], time.monotonic()
        while time.monotonic() - start < seconds:
            if torque:
                try:
                    present = bus.sync_read_register("Present_Position", [GRIP]).values[GRIP]
                    bus.sync_write_register("Goal_Position", {GRIP: present})
                except BusTimeout:  # the simulator starved on a loaded machine: a missed tick, as the driver takes it
                    pass
            if time.monotonic() - start > 0.5:
                forces.append(arm.hand_forces()[GRIP - 1])
            time.sleep(0.005)
        return math.sqrt(sum(f * f for f in forces) / len(forces))


def test_a_torqued_leader_following_its_own_reading_drags_the_hand_more_than_a_limp_one() -> None:
    """Why `feedback: gripper` releases the trigger's torque in free motion: a goal one bus tick
    behind the shaft is a spring the hand drags along (docs/teleop.md, "Force feedback")."""
    limp, torqued = hand_force_rms(False), hand_force_rms(True)
    assert 0.05 < limp < 0.12, f"the shaft's own drag: {limp:.3f}"
    assert torqued > 1.05 * limp, f"torqued {torqued:.3f} against limp {limp:.3f}"


def test_the_yielding_finger_shuts_the_trigger_on_squeeze_and_stops_at_a_rendered_grasp(tmp_path: Path) -> None:
    """`sim-bus --hand`: the finger holds the trigger alone (the body is let go when torqued, as
    without a hand); the world file's `squeeze` shuts it, limp; a trigger torqued at the feedback
    ceiling (0.15) toward an object's position stops it there, where the default hand goes through."""
    world = tmp_path / "world.json"
    with SimulatedArm("leader", finger=YIELDING_FINGER, world=world) as arm, FeetechBus(arm.port) as bus:
        arm.set_human(lambda t: POSE)
        settle(lambda: abs(arm.servos[GRIP].position - POSE[5]) < 0.5)
        world.write_text(json.dumps({"squeeze": True}))
        closed = arm.servos[GRIP].travel[0]
        settle(lambda: arm.servos[GRIP].position < closed + 1)
        assert arm.servos[GRIP].position == pytest.approx(closed, abs=1), "shut, limp"
        world.write_text(json.dumps({"squeeze": False}) + " ")  # another mtime
        settle(lambda: abs(arm.servos[GRIP].position - POSE[5]) < 0.5)
        assert arm.servos[GRIP].position == pytest.approx(POSE[5], abs=0.5), "let go: back where the human wants it"
        body = bus.read_register(1, "Present_Position")[0] + arm.servos[1].get("Homing_Offset")
        bus.write_register(1, "Goal_Position", body + 300 - arm.servos[1].get("Homing_Offset"))
        bus.write_register(1, "Torque_Enable", 1)
        settle(lambda: abs(arm.servos[1].position - body - 300) < 2)
        assert arm.servos[1].position == pytest.approx(body + 300, abs=2), "the body, torqued, is let go"
        assert arm.hand_forces()[0] == 0.0
        # A grasp rendered as the leader's driver does: the trigger torqued at 0.15 toward where the jaws stopped.
        bus.write_register(GRIP, "Torque_Limit", 150)
        bus.write_register(GRIP, "Goal_Position", int(POSE[5]) - arm.servos[GRIP].get("Homing_Offset"))
        bus.write_register(GRIP, "Torque_Enable", 1)
        world.write_text(json.dumps({"squeeze": True}))
        settle(lambda: abs(arm.hand_forces()[GRIP - 1] + 0.1) < 0.002)
        time.sleep(0.3)
        assert arm.hand_forces()[GRIP - 1] == pytest.approx(-0.1, abs=0.002), "the finger presses its limit"
        # Stopped a spring's stretch short of the goal (0.1 / the servo's load per step of error), far from shut.
        assert POSE[5] - 15 < arm.servos[GRIP].position < POSE[5], "and is stopped at the goal"
