"""The path through a fault is as safe as the normal path (SPEC §3), against the simulated STS3215
on a real pseudo-terminal with the real FeetechBus: a reconnect never undoes an e-stop's cut; a
blocked joint holds within 0.1 s with its goal at the present position; a rebooted servo and a
sagging supply are detected and a reset rewrites RAM; the gripper's torque limit is live from the
first session; a refused EEPROM write is bounded; the e-stop answers only once the servos took it.
"""
from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from support.procs import wait_for

from hw.arm.test_arm import make_driver
from hw.arm.test_arm_faults import keep_commanding, peak_speed, running
from teleop_flywheel.core.clock import now_ns
from teleop_flywheel.core.so101 import JOINT_NAMES
from teleop_flywheel.hw.arm import Reading, settings
from teleop_flywheel.hw.feetech.sim import Faults, SimulatedArm

pytestmark = pytest.mark.timeout(120)


def ram(arm: SimulatedArm, sid: int) -> dict[str, int]:
    with arm._lock:
        return {n: arm.servos[sid].get(n) for n in ("Acceleration", "Goal_Velocity", "Torque_Limit")}


def test_a_reconnect_keeps_an_e_stops_cut_torque_off_until_reset(tmp_path: Path) -> None:
    """Before: the reconnect's configure() turned torque back on and the next tick wrote the goal
    from before the e-stop; /diagnostics said e-stopped next to torque=True."""
    with SimulatedArm("follower", link=tmp_path / "follower") as arm:
        driver = make_driver(arm, "follower", estop_cuts_torque=True)
        with running(driver) as readings:
            driver.estop("pinch")
            wait_for(lambda: not any(s.torque_on for s in arm.servos.values()), 5, "torque cut")
            arm.faults.unplug_at, arm.faults.replug_after = arm._elapsed(), 0.3
            wait_for(lambda: driver.state.reconnects >= 1, 30, "a reconnect")
            n = len(readings)
            wait_for(lambda: len(readings) > n + 40, 10, "readings after it")
            assert not any(s.torque_on for s in arm.servos.values()), "torque came back without a reset"
            health = driver.health()
            assert health.values["torque"] is False and health.values["estop"] == "pinch"
            assert "e-stopped" in health.message and "torque cut" in health.message
            fallen = arm.positions()
            driver.reset()
            wait_for(lambda: all(s.torque_on for s in arm.servos.values()), 10, "torque back on reset")
            time.sleep(0.3)
            moved = [abs(a - b) for a, b in zip(arm.positions(), fallen, strict=True)]
            assert max(moved) < 40, f"the arm moved {max(moved):.0f} steps on reset: it starts where it is"
            assert driver.health().values["torque"] is True


def test_a_fault_that_cut_torque_stays_cut_across_a_reconnect(tmp_path: Path) -> None:
    """Before: a servo that protected itself got its torque back from the reconnect's configure()."""
    with SimulatedArm("follower", link=tmp_path / "follower") as arm:
        driver = make_driver(arm, "follower", slow_period_s=0.1)
        with running(driver) as readings:
            with arm._lock:
                arm.servos[3].set("Torque_Enable", 0)  # the servo cut its own torque
            wait_for(lambda: bool(driver.state.faults), 10, "the fault")
            arm.faults.unplug_at, arm.faults.replug_after = arm._elapsed(), 0.3
            wait_for(lambda: driver.state.reconnects >= 1, 30, "a reconnect")
            n = len(readings)
            wait_for(lambda: len(readings) > n + 40, 10, "readings after it")
            assert not arm.servos[3].torque_on and driver.state.faults
            assert driver.health().values["torque_off"] == "elbow_flex"


def test_a_blocked_joint_holds_within_0_1_s_with_its_goal_at_the_present_position(tmp_path: Path) -> None:
    """Before: the joint pressed at its torque cap for the servo's 2 s Protection_Time, the goal
    0.35 rad into the obstacle, until the servo's overload trip cut its torque."""
    with SimulatedArm("follower", link=tmp_path / "follower", faults=Faults(block={1: 0.0})) as arm:
        driver = make_driver(arm, "follower", max_relative=0.35)
        with running(driver) as readings:
            target = list(readings[-1].positions)
            target[0] += 1.0  # shoulder_pan commanded through the obstacle
            keep_commanding(driver, lambda: target, 4.0, until=lambda: bool(driver.state.faults))
            time.sleep(0.1)
            samples: list[Reading] = list(readings)
            servo = arm.servos[1]
            assert servo.faults == 0 and servo.torque_on, "the driver held before the servo had to protect itself"
            assert abs(servo.goal_physical() - servo.position) <= 2, "the goal is where the shaft is: no pinch"
            assert abs(samples[-1].efforts[0]) < 0.05
        limit = settings.COLLISION["shoulder_pan"]
        at_cap = next(r.stamp_ns for r in samples if abs(r.efforts[0]) >= limit.load)
        assert "shoulder_pan (servo 1): collision" in driver.state.faults.summary()
        hold_s = [t for t, sid, _goal in arm.goal_writes if sid == 1][-1] - at_cap / 1e9
        assert hold_s <= 0.1, f"held {hold_s:.3f} s after the load reached {limit.load}"


def test_free_motion_and_gravity_never_reach_the_collision_thresholds(tmp_path: Path) -> None:
    """Every body joint at the 2 rad/s approach speed at once, shoulder and elbow against gravity."""
    with SimulatedArm("follower", link=tmp_path / "follower") as arm:
        driver = make_driver(arm, "follower", max_relative=0.35)
        with running(driver) as readings:
            start = list(readings[-1].positions)
            for sign in (1.0, -1.0, 1.0):
                target = [p + sign * 0.9 if i < 4 else p for i, p in enumerate(start)]
                keep_commanding(driver, lambda t=target: t, 1.2)  # type: ignore[misc]
            travelled = max(abs(r.positions[1] - start[1]) for r in readings)
        assert not driver.state.faults, driver.state.faults.summary()
        assert travelled > 0.85, "shoulder_lift went the whole way"


def test_a_rebooted_servo_is_named_and_reset_rewrites_its_ram(tmp_path: Path) -> None:
    """Before: the reboot read as a servo that cut its torque, and ~/reset turned torque on with
    Acceleration 0, Goal_Velocity 0 (top speed) and the power-on Torque_Limit."""
    with SimulatedArm("follower", link=tmp_path / "follower") as arm:
        driver = make_driver(arm, "follower", slow_period_s=0.1)
        with running(driver):
            wanted = ram(arm, 3)
            assert wanted["Acceleration"] == settings.DEFAULT_ACCELERATION and wanted["Goal_Velocity"] > 0
            arm.faults.reboot[3] = arm._elapsed()
            wait_for(lambda: bool(driver.state.faults), 10, "the reboot noticed")
            assert "elbow_flex (servo 3): rebooted" in driver.health().message
            assert ram(arm, 3) != wanted and not arm.servos[3].torque_on
            driver.reset()
            wait_for(lambda: arm.servos[3].torque_on, 10, "torque back on reset")
            assert ram(arm, 3) == wanted, "RAM rewritten before torque returned"
            time.sleep(0.3)
            assert not driver.state.faults


def test_a_rebooted_joint_that_falls_is_caught_at_once_not_at_the_next_slow_read(tmp_path: Path) -> None:
    """elbow_flex browns out and falls under gravity: carrying no load while it leaves its goal, it
    makes the driver read torque and the RAM marker at once. Before: only the slow read saw it
    (here every 5 s; 1 s by default), the joint falling meanwhile.

    The arm powers up limp and elbow_flex falls until friction holds it (60° below level), so the
    driver finds it wherever it had fallen by its connect: on a loaded machine at rest, where a
    reboot lets nothing fall. It is held level first, where gravity pulls hardest."""
    with SimulatedArm("follower", link=tmp_path / "follower") as arm:
        driver = make_driver(arm, "follower", slow_period_s=5.0)
        with running(driver) as readings:
            level = driver.guard.sent
            assert level is not None
            level[2] = 0.0  # elbow_flex level: the middle of its travel
            driver.command(JOINT_NAMES, level, now_ns())
            wait_for(lambda: abs(readings[-1].positions[2]) < 0.05 and abs(readings[-1].velocities[2]) < 0.05, 10,
                     "elbow_flex held level")
            t0 = arm._elapsed()
            arm.faults.reboot[3] = t0
            wait_for(lambda: bool(driver.state.faults), 2, "the reboot noticed")
            caught_s = arm._elapsed() - t0
            assert "elbow_flex (servo 3): rebooted" in driver.state.faults.summary()
        assert caught_s < 0.3, f"caught {caught_s:.2f} s after the reboot"


def test_a_sagging_supply_warns_then_holds(tmp_path: Path) -> None:
    """Before: only the servos' own 4-14 V window faulted, so a 12 V arm at 9 V said nothing."""
    with SimulatedArm("follower", link=tmp_path / "follower") as arm:
        driver = make_driver(arm, "follower", slow_period_s=0.1)
        with running(driver):
            arm.faults.sag = (arm._elapsed(), 10.6)
            wait_for(lambda: driver.health().level == "WARN", 10, "a supply warning")
            assert "supply 10.6 V outside 11-12.8 V (12 V arm" in driver.health().message
            assert not driver.state.faults
            arm.faults.sag = (arm._elapsed(), 9.0)
            wait_for(lambda: bool(driver.state.faults), 10, "the hold")
            assert "supply 9.0 V outside 10-13.5 V (12 V arm)" in driver.health().message


def test_a_leader_fed_from_a_12_v_supply_holds(tmp_path: Path) -> None:
    with SimulatedArm("leader", link=tmp_path / "leader", faults=Faults(supply_v=12.0)) as arm:
        driver = make_driver(arm, "leader", slow_period_s=0.1)
        with running(driver):
            wait_for(lambda: bool(driver.state.faults), 10, "the hold")
            assert "supply 12.0 V outside 4.2-6.5 V (5 V arm)" in driver.health().message


def test_the_grippers_torque_limit_is_live_from_the_first_session(tmp_path: Path) -> None:
    """The servo loads Torque_Limit from Max_Torque_Limit only at power-on. Before: the driver wrote
    only the EEPROM limit, so a servo fresh from the box gripped at full torque (1000) all session."""
    with SimulatedArm("follower", link=tmp_path / "follower") as arm:
        assert arm.servos[6].get("Torque_Limit") == 1000
        driver = make_driver(arm, "follower", first_session=True)
        assert driver.connect()
        try:
            driver.read()
            grip = arm.servos[6]
            assert grip.get("Max_Torque_Limit") == 500
            assert grip.get("Torque_Limit") == 500 - settings.REBOOT_MARKER
            assert grip.torque_cap() <= 500
        finally:
            driver.close()


@pytest.mark.parametrize(("sid", "faults", "said"), [
    (6, Faults(refuse={6: {"Overload_Torque"}}),
     "gripper (servo 6): EEPROM Overload_Torque stays 80 after 3 writes of 25"),
    (1, Faults(refuse={1: {"Phase"}}, multi_turn={1: 0}),  # Phase's multi-turn bit set, and kept
     "shoulder_pan (servo 1): EEPROM Phase stays 28 after 3 writes of 12"),
], ids=["gripper-protection", "phase"])
def test_a_refused_eeprom_write_is_retried_a_bounded_number_of_times_then_latched(
        tmp_path: Path, sid: int, faults: Faults, said: str) -> None:
    """Before: configure() raised, connect() failed, and the loop rewrote the EEPROM every 2 s for ever."""
    with SimulatedArm("follower", link=tmp_path / "follower", faults=faults) as arm:
        driver = make_driver(arm, "follower", first_session=True)
        with running(driver):
            wait_for(lambda: bool(driver.state.faults), 10, "the latched fault")
            assert said in driver.state.faults.summary()
            assert driver.state.connected and not any(s.torque_on for s in arm.servos.values()), "held as it was"
            writes, ticks = arm.servos[sid].eeprom_writes, driver.state.ticks
            # The loop goes on: 250 ticks (1.25 s at 200 Hz, a slow read among them; longer when starved),
            # against the old loop's retries 0.1, 0.2, 0.4 ... s after each failed connect.
            wait_for(lambda: driver.state.ticks > ticks + 250, 30, "the loop going on after the latch")
            assert arm.servos[sid].eeprom_writes == writes, "no EEPROM write after the latch"
        assert writes <= 2 * settings.EEPROM_ATTEMPTS + 1  # the other registers it needs, then 3 tries


def test_a_value_that_already_matches_is_never_written_to_eeprom(tmp_path: Path) -> None:
    with SimulatedArm("follower", link=tmp_path / "follower") as arm:
        for _session in range(2):
            driver = make_driver(arm, "follower", first_session=True)
            assert driver.connect()
            driver.close()
            if _session == 0:
                first = {sid: s.eeprom_writes for sid, s in arm.servos.items()}
        assert {sid: s.eeprom_writes for sid, s in arm.servos.items()} == first


def test_the_e_stop_answers_only_once_the_servos_took_it(tmp_path: Path) -> None:
    """Before: estop() returned at once, whatever happened next (a port away, a dead loop)."""
    with SimulatedArm("follower", link=tmp_path / "follower") as arm:
        driver = make_driver(arm, "follower")
        ok, why = driver.estop("before the port is open").wait(1.0)
        assert not ok and "unavailable" in why and "latched" in why
        assert driver.state.estop
        driver.reset()  # taken at the first tick
        with running(driver) as readings:
            wait_for(lambda: all(s.torque_on for s in arm.servos.values()), 10, "torque on after the reset")
            ok, why = driver.estop("again").wait(2.0)
            assert ok and "read back" in why, why
            goals = {sid: s.get("Goal_Position") for sid, s in arm.servos.items()}
            present = [r for r in readings][-1].positions
            raws = driver.calibration.rad_to_raw(present)
            assert max(abs(goals[sid] - raw) for sid, raw in zip(driver.calibration.ids, raws, strict=True)) < 30


def test_a_bus_loop_that_dies_of_any_exception_is_a_fault_and_the_e_stop_says_so(tmp_path: Path) -> None:
    """Before: only bus errors were caught: any other exception ended the thread silently."""
    with SimulatedArm("follower", link=tmp_path / "follower") as arm:
        driver = make_driver(arm, "follower")
        died = threading.Event()

        def on_reading(_reading: Reading) -> None:
            if died.is_set():
                raise ZeroDivisionError("a bug in a caller")

        stop = threading.Event()
        loop = threading.Thread(target=driver.run, args=(200.0, stop, on_reading), daemon=True)
        loop.start()
        wait_for(lambda: driver.state.ticks > 5, 30, "ticks")
        died.set()
        loop.join(5)
        assert not loop.is_alive()
        health = driver.health()
        assert health.level == "ERROR" and "the bus loop died (ZeroDivisionError: a bug in a caller)" in health.message
        ok, why = driver.estop("after").wait(1.0)
        assert not ok and "bus loop died" in why
        driver.close()


def test_reset_after_a_collision_starts_from_the_present_position_at_the_approach_speed(tmp_path: Path) -> None:
    with SimulatedArm("follower", link=tmp_path / "follower", faults=Faults(block={1: 0.0})) as arm:
        driver = make_driver(arm, "follower", max_relative=0.35)
        with running(driver) as readings:
            target = list(readings[-1].positions)
            target[0] += 1.0
            keep_commanding(driver, lambda: target, 4.0, until=lambda: bool(driver.state.faults))
            arm.servos[1].blocked_at = None
            arm.faults.block.clear()
            driver.reset()
            wait_for(lambda: not driver.state.faults, 5, "reset")
            arm.goal_writes.clear()  # the hold's step back to the stalled shaft was no motion
            keep_commanding(driver, lambda: target, 1.0)
            assert any(sid == 1 for _t, sid, _g in list(arm.goal_writes)), "commands are taken again"
        assert peak_speed(arm, 1) <= 2.0 * 1.15, "through the soft start, not at the servo's top speed"
