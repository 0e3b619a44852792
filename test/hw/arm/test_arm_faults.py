"""The real arm does no harm: each moment of a new owner's first hour, against a
simulated STS3215 as unkind as the real one, on a real pseudo-terminal with the real FeetechBus.

A far target is approached at the configured speed at the servo; the gripper presses an object
with limited force and never trips its protection; a joint that protects itself, a servo that
goes silent, one that cuts its torque without a word or runs hot latch a loud hold that only the
operator's reset ends; a reconnect never drops the follower's torque; the e-stop holds (or cuts);
torque at exit is checked per servo; a rate the adapter cannot give is said; wrist_roll crossing
its encoder's seam does not flip.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from itertools import pairwise
from pathlib import Path

import pytest
from support.procs import wait_for

from hw.arm.test_arm import calibration, make_driver
from teleop_flywheel.core.calibration import RAD_PER_STEP
from teleop_flywheel.core.clock import now_ns
from teleop_flywheel.core.so101 import JOINT_NAMES
from teleop_flywheel.hw.arm import ArmDriver, Reading
from teleop_flywheel.hw.feetech.sim import Faults, SimulatedArm

pytestmark = pytest.mark.timeout(120)


@contextmanager
def running(driver: ArmDriver, rate_hz: float = 200.0) -> Iterator[list[Reading]]:
    """The driver's bus loop in a thread; yields the readings as they come."""
    readings: list[Reading] = []
    stop = threading.Event()
    loop = threading.Thread(target=driver.run, args=(rate_hz, stop, readings.append), daemon=True)
    loop.start()
    try:
        wait_for(lambda: len(readings) > 5, 30, "first readings")
        yield readings
    finally:
        stop.set()
        loop.join(10)
        driver.close()


def keep_commanding(driver: ArmDriver, positions: Callable[[], list[float]], seconds: float,
                    until: Callable[[], bool] = lambda: False) -> None:
    """Send a command every 10 ms (a live teleop stream) for `seconds` or until `until()`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not until():
        driver.command(JOINT_NAMES, positions(), now_ns())
        time.sleep(0.01)


def peak_speed(arm: SimulatedArm, sid: int, window_s: float = 0.25) -> float:
    """Peak joint speed the servo was told to move at (rad/s), from the simulator's own record of its
    Goal_Position writes, over windows long enough that neither one step of rounding nor a write
    timed late is a speed: the simulator times a write when its thread gets to it, and on a busy
    two-core machine one timed 20 ms late at the start of a 0.1 s window made a command the driver
    limits to 2.0 rad/s by its own clock read 2.44 (0.25 s: at most 2.2 with writes up to 25 ms late
    in a tenth of ticks, modelled). Still short enough that 1 rad at the servo's 4.7 rad/s top speed
    reads 4."""
    writes = [(t, goal) for t, s, goal in list(arm.goal_writes) if s == sid]
    peak = 0.0
    for i, (t, goal) in enumerate(writes):
        for t0, goal0 in reversed(writes[:i]):
            if t - t0 >= window_s:
                peak = max(peak, abs(goal - goal0) * RAD_PER_STEP / (t - t0))
                break
    return peak


def test_a_far_target_is_approached_at_the_configured_speed_not_snapped(tmp_path: Path) -> None:
    """The first far command used to be approached at 10 rad/s (0.05 rad per tick at 200 Hz)."""
    with SimulatedArm("follower", link=tmp_path / "follower") as arm:
        driver = make_driver(arm, "follower", max_speed=2.0)
        with running(driver) as readings:
            start = list(readings[-1].positions)
            target = list(start)
            target[0] = start[0] + 1.5
            keep_commanding(driver, lambda: target, 3.0,
                            until=lambda: abs(readings[-1].positions[0] - target[0]) < 0.02)
            assert abs(readings[-1].positions[0] - target[0]) < 0.02, "the arm got there"
        speed = peak_speed(arm, 1)
        assert 1.6 < speed <= 2.0 * 1.15, f"peak commanded speed {speed:.2f} rad/s, configured 2.0"


def test_the_gripper_presses_an_object_with_limited_force_and_never_trips(tmp_path: Path) -> None:
    cal = calibration("follower")["gripper"]
    with SimulatedArm("follower", link=tmp_path / "follower", grip_object=2300.0) as arm:
        driver = make_driver(arm, "follower", grip_force_limit=0.2)
        with running(driver) as readings:
            closed = list(readings[-1].positions)
            closed[5] = float(cal.raw_to_rad(cal.range_min))  # a grasp: close fully
            keep_commanding(driver, lambda: closed, 4.0)  # twice the servo's 2 s protection time
            grip = arm.servos[6]
            assert grip.position == pytest.approx(2300.0, abs=1.0), "on the object"
            assert not driver.state.faults and grip.faults == 0 and grip.torque_on
            assert 0.05 < -readings[-1].efforts[5] <= 0.2, readings[-1].efforts[5]  # squeezing, within the limit
            assert driver.health().values["gripper_force_limited"] is True


def test_jaws_closing_from_rest_in_free_air_are_not_taken_for_a_grasp(tmp_path: Path) -> None:
    """Jaws at rest told to close: while they accelerate their load is high and their speed still
    low, which looked like jaws stopped on an object — the force limit then held them to a creep."""
    cal = calibration("follower")["gripper"]
    with SimulatedArm("follower", link=tmp_path / "follower") as arm:  # nothing between the jaws
        driver = make_driver(arm, "follower", grip_force_limit=0.2)
        with running(driver) as readings:
            closed = list(readings[-1].positions)
            closed[5] = float(cal.raw_to_rad(cal.range_min + 100))
            limited: list[bool] = []
            keep_commanding(driver, lambda: closed, 3.0, until=lambda: bool(  # noqa: B023
                limited.append(driver.health().values["gripper_force_limited"])
                or abs(readings[-1].positions[5] - closed[5]) < 0.02))
            assert not any(limited), "a close in free air was taken for a grasp"
            assert abs(readings[-1].positions[5] - closed[5]) < 0.02, "the jaws closed"


def test_without_the_force_limit_the_simulated_gripper_protects_itself(tmp_path: Path) -> None:
    """What a real STS3215 does to a gripper told to close on an object at full torque: after
    Protection_Time above Overload_Torque it cuts its own torque. The driver latches that as a fault."""
    cal = calibration("follower")["gripper"]
    with SimulatedArm("follower", link=tmp_path / "follower", grip_object=2300.0) as arm:
        driver = make_driver(arm, "follower", grip_force_limit=0.0)
        with running(driver) as readings:
            closed = list(readings[-1].positions)
            closed[5] = float(cal.raw_to_rad(cal.range_min))
            keep_commanding(driver, lambda: closed, 6.0, until=lambda: bool(driver.state.faults))
            health = driver.health()
        assert not arm.servos[6].torque_on and arm.servos[6].faults & 0x20
        assert health.level == "ERROR" and "gripper (servo 6): overload" in health.message
        assert "torque cut by the servo" in health.message


def test_a_joint_that_protected_itself_holds_the_arm_until_the_operator_resets(tmp_path: Path) -> None:
    """The gripper (no collision check: it closes on objects) without its force limit, blocked."""
    with SimulatedArm("follower", link=tmp_path / "follower", faults=Faults(block={6: 0.0})) as arm:
        driver = make_driver(arm, "follower", max_relative=0.35, grip_force_limit=0.0)
        with running(driver) as readings:
            target = list(readings[-1].positions)
            target[5] -= 0.5  # the gripper closes against the obstacle
            keep_commanding(driver, lambda: target, 6.0, until=lambda: bool(driver.state.faults))
            assert "gripper (servo 6): overload" in driver.state.faults.summary()
            assert not arm.servos[6].torque_on  # the servo cut its own torque
            n = driver.state.ticks
            wait_for(lambda: driver.state.ticks > n + 1, 5, "a tick of the hold")  # latched by a slow read
            held = {sid: s.get("Goal_Position") for sid, s in arm.servos.items()}
            moved = list(target)
            moved[0] += 0.5
            keep_commanding(driver, lambda: moved, 0.3)  # commands are not taken while held
            assert {sid: s.get("Goal_Position") for sid, s in arm.servos.items()} == held
            health = driver.health()
            assert health.level == "ERROR" and "resets" in health.message
            assert health.values["servo_fault"].startswith("gripper")
            assert health.values["torque"] is False and health.values["torque_off"] == "gripper"

            arm.servos[6].blocked_at = None  # the obstacle is gone; the operator re-enables
            arm.faults.block.clear()
            driver.reset()
            wait_for(lambda: not driver.state.faults and arm.servos[6].torque_on, 10, "re-enabled")
            # Within 1.5 s of the reset: commands taken and the torque read back on (a slow read's news).
            keep_commanding(driver, lambda: moved, 1.5, until=lambda: arm.servos[1].get("Goal_Position") != held[1]
                            and driver.health().values["torque"] is True)
            assert arm.servos[1].get("Goal_Position") != held[1], "commands are taken again"
            assert arm.servos[6].faults == 0
            health = driver.health()
            assert (health.values["servo_fault"], health.values["torque"], health.values["torque_off"],
                    health.values["holding"]) == ("", True, "", ""), health.message
            # A simulator starved of CPU on a loaded host can time a read out: a bus error, reported until
            # acknowledged, that neither the fault nor the reset made.
            assert health.level == "OK" or health.message.startswith("bus errors"), health.message


def test_a_silent_servo_is_named_and_the_other_five_are_still_read(tmp_path: Path) -> None:
    """One servo that stops answering used to fail the whole arm's sync read every tick."""
    with SimulatedArm("follower", link=tmp_path / "follower") as arm:
        driver = make_driver(arm, "follower")
        with running(driver) as readings:
            # Once the driver reads: silent at a fixed time, a loaded machine's slow connect found it
            # silent already and retried the connection for ever.
            arm.faults = Faults(silent={4: arm._elapsed()})
            wait_for(lambda: bool(driver.state.faults), 20, "the silent servo named")
            n = len(readings)
            wait_for(lambda: len(readings) > n + 50, 20, "readings of the other five")
            health = driver.health()
            assert all(arm.servos[sid].torque_on for sid in (1, 2, 3, 5, 6))  # the others hold
        assert readings[-1].names == tuple(n for n in JOINT_NAMES if n != "wrist_flex")
        assert health.level == "ERROR" and "wrist_flex (servo 4): does not answer" in health.message


def test_a_stall_of_the_whole_line_names_no_servo(tmp_path: Path) -> None:
    """The whole line goes quiet for 0.15 s (a USB adapter's hiccup; the simulator starved of CPU on
    a loaded machine): the sync read times out and each servo is read on its own, the first ones
    during the stall. They used to be named silent and the arm held, its readings one joint short;
    now they are asked again once the others answered, and nothing latches."""
    with SimulatedArm("follower", link=tmp_path / "follower") as arm:
        driver = make_driver(arm, "follower")
        with running(driver) as readings:
            stall_at = arm._elapsed()  # once the driver reads: a loaded machine may take seconds to connect
            arm.faults = Faults(stall_at=stall_at, stall_for=0.15)
            wait_for(lambda: arm._elapsed() > stall_at + 0.6, 20, "the stall over")
            n = len(readings)
            wait_for(lambda: len(readings) > n + 20, 20, "readings after the stall")
            health = driver.health()
        assert driver.state.read_errors >= 1, "the stall was not noticed: the test did not test"
        assert not driver.state.faults and health.level != "ERROR", health.message
        assert readings[-1].names == tuple(JOINT_NAMES)


def test_torque_lost_without_a_status_bit_is_a_fault(tmp_path: Path) -> None:
    """A servo that restarted (a brown-out) comes back with its torque off and no status bit."""
    with SimulatedArm("follower", link=tmp_path / "follower") as arm:
        driver = make_driver(arm, "follower", slow_period_s=0.1)
        with running(driver):
            with arm._lock:
                arm.servos[5].set("Torque_Enable", 0)
            wait_for(lambda: bool(driver.state.faults), 10, "torque loss noticed")
            assert "wrist_roll (servo 5): torque off" in driver.health().message


def test_a_hot_servo_warns_then_holds(tmp_path: Path) -> None:
    with SimulatedArm("follower", link=tmp_path / "follower", faults=Faults(hot={3: 58.0})) as arm:
        driver = make_driver(arm, "follower", slow_period_s=0.1, temperature_warn_c=55, temperature_stop_c=65)
        with running(driver):
            wait_for(lambda: driver.health().level == "WARN", 10, "a hot warning")
            assert "elbow_flex at 58 °C" in driver.health().message and not driver.state.faults
            with arm._lock:
                arm.servos[3].temperature = 66.0
            wait_for(lambda: bool(driver.state.faults), 10, "the stop threshold")
            assert "elbow_flex (servo 3): temperature 66 °C reached the stop threshold 65" in driver.health().message


def test_a_reconnect_never_drops_the_followers_torque(tmp_path: Path) -> None:
    """After a USB glitch the holding follower used to go limp while the driver reconfigured it, and
    re-lock where it had sagged. The servos never lost power: they keep holding their goal."""
    with SimulatedArm("follower", link=tmp_path / "follower", faults=Faults(unplug_at=1.5, replug_after=0.3)) as arm:
        torque_offs: list[int] = []
        for servo in arm.servos.values():
            original = servo.write

            def spy(address: int, data: bytes, _orig=original, _sid=servo.id) -> None:
                if address <= 40 < address + len(data) and data[40 - address] == 0:
                    torque_offs.append(_sid)
                _orig(address, data)

            servo.write = spy  # type: ignore[method-assign]
        driver = make_driver(arm, "follower")
        with running(driver) as readings:
            torque_offs.clear()  # the first connect may drop a servo's torque to write its EEPROM
            wait_for(lambda: driver.state.reconnects >= 1, 30, "a reconnect")
            n = len(readings)
            wait_for(lambda: len(readings) > n + 20, 10, "readings after it")
            shoulder = arm.positions()[1]
            time.sleep(0.3)
            assert arm.positions()[1] == pytest.approx(shoulder, abs=2.0), "no sag after the reconnect"
            assert not torque_offs, f"torque dropped on servos {torque_offs}"
            assert all(s.torque_on for s in arm.servos.values())


def test_the_e_stop_holds_until_reset(tmp_path: Path) -> None:
    with SimulatedArm("follower", link=tmp_path / "follower") as arm:
        driver = make_driver(arm, "follower")
        with running(driver) as readings:
            target = list(readings[-1].positions)
            target[0] += 1.0
            driver.command(JOINT_NAMES, target, now_ns())
            time.sleep(0.1)
            # The hold is written, and read back, by the bus thread's next tick: waited for, not slept
            # (a tick late on a loaded machine read the goal before the hold moved it).
            ok, why = driver.estop("operator pressed e-stop").wait(5.0)
            assert ok and driver.state.estop, why
            held = arm.servos[1].get("Goal_Position")
            keep_commanding(driver, lambda: target, 0.3)
            assert arm.servos[1].get("Goal_Position") == held, "commands are not taken while e-stopped"
            health = driver.health()
            assert (
                health.level == "WARN" and "e-stopped" in health.message and "operator pressed e-stop" in health.message
            )
            assert all(s.torque_on for s in arm.servos.values())  # holding, not limp
            driver.reset()
            keep_commanding(driver, lambda: target, 1.5, until=lambda: arm.servos[1].get("Goal_Position") != held
                            and driver.health().level == "OK")  # within 1.5 s of the reset
            assert arm.servos[1].get("Goal_Position") != held and driver.health().level == "OK", driver.health().message


def test_an_e_stop_that_cuts_torque(tmp_path: Path) -> None:
    with SimulatedArm("follower", link=tmp_path / "follower") as arm:
        driver = make_driver(arm, "follower", estop_cuts_torque=True)
        with running(driver):
            driver.estop("cut")
            wait_for(lambda: not any(s.torque_on for s in arm.servos.values()), 5, "torque cut")
            driver.reset()
            wait_for(lambda: all(s.torque_on for s in arm.servos.values()), 5, "torque back on reset")


def test_torque_off_at_exit_is_checked_per_servo(tmp_path: Path) -> None:
    logged: list[str] = []
    with SimulatedArm("follower", link=tmp_path / "follower") as arm:
        driver = make_driver(arm, "follower", log=lambda _level, message: logged.append(message),
                             exit_action="release")
        assert driver.connect()
        driver.tick()
        arm.servos[3].silent = True  # hung: it cannot be told to let go
        driver.close()
        assert [s.torque_on for s in arm.servos.values()] == [False, False, True, False, False, False]
    assert any("elbow_flex (servo 3) did not take torque off" in m for m in logged), logged


def test_a_rate_the_adapter_cannot_give_is_said(tmp_path: Path) -> None:
    """Behind an FTDI adapter at its default 16 ms latency timer a read takes ~18 ms: 200 Hz is impossible."""
    with SimulatedArm("follower", link=tmp_path / "follower", adapter_name="ftdi16") as arm:
        driver = make_driver(arm, "follower")
        with running(driver):
            wait_for(lambda: driver.state.ticks > 120, 30, "ticks")
            health = driver.health(200.0)
        assert health.level == "WARN" and "configured 200 Hz cannot be met" in health.message
        assert "latency_timer" in health.message and float(health.values["read_ms_p50"]) > 10  # type: ignore[arg-type]


def test_wrist_roll_crossing_the_encoders_seam_does_not_flip(tmp_path: Path) -> None:
    """A leader's wrist_roll turned past 4095 reads 0 again; unwrapped, the angle goes on past π
    (the follower's limits then hold it at the end of its range instead of spinning it the long way)."""
    with SimulatedArm("leader", link=tmp_path / "leader") as arm:
        arm.set_human(lambda t: [2050.0, 2050.0, 1975.0, 2025.0, 3900.0 + 150.0 * t, 2650.0])
        driver = make_driver(arm, "leader")
        with running(driver) as readings:
            wait_for(lambda: arm.positions()[4] > 4300, 30, "the wrist past the seam")
            angles = [r.positions[4] for r in readings if r.positions[4] > 2.0]  # once the hand is on its way
        assert max(angles) > 3.2, max(angles)
        assert max(abs(b - a) for a, b in pairwise(angles)) < 0.1, "no jump of a turn"


def test_a_servo_reporting_a_fault_at_connect_is_configured_and_named(tmp_path: Path) -> None:
    with SimulatedArm("follower", link=tmp_path / "follower", faults=Faults(error_bits={3: 0x04})) as arm:
        driver = make_driver(arm, "follower", first_session=True)  # its EEPROM writes answered with the bit
        assert driver.connect()
        try:
            driver.tick()
            driver.slow_read()
            health = driver.health()
            assert health.level == "ERROR" and "elbow_flex (servo 3): overheat (status 0x04)" in health.message
            assert health.values["elbow_flex.error_bits"] == "0x04 (overheat)"
            assert health.values["shoulder_pan.error_bits"] == "0x00"
            assert health.values["gripper.voltage_v"] == arm.servos[6].get("Present_Voltage") / 10
        finally:
            driver.close()
