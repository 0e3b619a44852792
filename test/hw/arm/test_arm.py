"""hw.arm.ArmDriver without ROS: the real simulator on a real pseudo-terminal, real FeetechBus.

Control ticks are driven by the test with explicit times where the rule is about time (speed,
watchdog), so limits, speed and torque handling are checked tick by tick, independent of machine
load. Faults, e-stop and the gripper: test_arm_faults.py.
"""
from __future__ import annotations

import threading
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path

import pytest
from support.procs import wait_for
from support.sim_arms import driven_before

from teleop_flywheel.core.calibration import RAD_PER_STEP, ArmCalibration, load_calibration, sim_calibration_file
from teleop_flywheel.core.clock import now_ns
from teleop_flywheel.core.safety import CommandGuard, JointLimits
from teleop_flywheel.core.so101 import JOINT_NAMES
from teleop_flywheel.hw.arm import ArmConfig, ArmDriver, Reading, effective_limits
from teleop_flywheel.hw.arm.health import READ_BUCKETS_MS, read_bucket_key
from teleop_flywheel.hw.arm.servos import Log
from teleop_flywheel.hw.errors import BusTimeout
from teleop_flywheel.hw.feetech.bus import FeetechBus
from teleop_flywheel.hw.feetech.sim import Faults, SimulatedArm

pytestmark = pytest.mark.timeout(120)
MS = 1_000_000
NO_LIMIT = 6.3  # rad: wider than any joint, the calibrated range is the limit


def calibration(role: str) -> ArmCalibration:
    return load_calibration(sim_calibration_file(role))


def make_driver(arm: SimulatedArm, role: str, max_speed: float | None = 2.0, watchdog_ms: float | None = None,
                upper: dict[str, float] | None = None, max_relative: float | None = None, log: Log | None = None,
                first_session: bool = False, **kw: object) -> ArmDriver:
    """A driver of `arm`, which it has driven before (`driven_before`) unless `first_session`."""
    if not first_session:
        driven_before(arm, role)
    cal = calibration(role)
    hi = {n: NO_LIMIT for n in JOINT_NAMES} | (upper or {})
    limits = effective_limits(cal, [-NO_LIMIT] * 6, [hi[n] for n in JOINT_NAMES])
    guard = CommandGuard(JOINT_NAMES, limits, max_speed=max_speed, max_relative=max_relative,
                         watchdog_ns=int(watchdog_ms * MS) if watchdog_ms else None)
    return ArmDriver(FeetechBus(str(arm.link)), cal, guard, ArmConfig(role=role, **kw), log)  # type: ignore[arg-type]


@pytest.fixture
def follower(tmp_path: Path) -> Iterator[SimulatedArm]:
    with SimulatedArm("follower", link=tmp_path / "follower") as arm:
        yield arm


def goal(arm: SimulatedArm, sid: int = 1) -> int:
    return arm.servos[sid].get("Goal_Position")


def tick(driver: ArmDriver, now: int | None = None) -> Reading:
    """One tick, then one more read: SYNC_WRITEs get no reply, but the simulator serves the line in
    order, so once the read is answered every write of the tick is in its control table."""
    reading = driver.tick(now)
    driver.read()
    return reading


def test_connect_configures_the_arm_and_tick_reads_it(follower: SimulatedArm) -> None:
    driver = make_driver(follower, "follower", first_session=True)
    assert driver.connect()
    try:
        driver.read()  # the torque-on write is in (see tick())
        cal = driver.calibration
        for j in cal.joints:
            s = follower.servos[j.id]
            assert (s.get("Homing_Offset"), s.get("Min_Position_Limit"), s.get("Max_Position_Limit"),
                    s.get("Return_Delay_Time"), s.get("Torque_Enable")) == (j.homing_offset, j.range_min,
                                                                            j.range_max, 0, 1)
        assert driver.state.torque and driver.state.connected
        readings = [driver.tick() for _ in range(5)]
        stamps = [r.stamp_ns for r in readings]
        assert stamps == sorted(stamps) and len(set(stamps)) == 5 and stamps[-1] <= now_ns()
        raw = [follower.servos[j.id].get("Present_Position") for j in cal.joints]
        assert readings[-1].positions == pytest.approx(cal.raw_to_rad(raw), abs=3 * RAD_PER_STEP)
        # the follower holds where it was found (gravity then sags shoulder and elbow a little; on a
        # loaded machine the limp arm may fall further before the torque-on write, then comes back)
        wait_for(lambda: all(abs(goal(follower, j.id) - follower.servos[j.id].get("Present_Position")) <= 30
                             for j in cal.joints), 10, "the follower holding where it was found")
        assert driver.health().level == "OK"
        # and what settings.py wants is in the servos: LeRobot's gripper protection, a sane acceleration
        grip = follower.servos[6]
        assert (grip.get("Max_Torque_Limit"), grip.get("Protection_Current"), grip.get("Overload_Torque")) == (
            500, 250, 25)
        assert all(s.get("Acceleration") == 100 and s.get("Lock") == 1 for s in follower.servos.values())
        # the servo's own speed limit: the driver's 2 rad/s, never its 4.7 rad/s top speed
        assert all(s.get("Goal_Velocity") == int(2.0 / RAD_PER_STEP) for s in follower.servos.values())
    finally:
        driver.close()
    wait_for(lambda: all(s.get("Torque_Enable") == 0 for s in follower.servos.values()), 10, "torque released on close")


def test_limits_clamp_and_speed_is_bounded_in_rad_per_second(follower: SimulatedArm) -> None:
    driver = make_driver(follower, "follower", max_speed=2.0, upper={"shoulder_pan": 0.3})
    assert driver.connect()
    try:
        cal = driver.calibration["shoulder_pan"]
        t0 = now_ns()
        start = tick(driver, t0)
        driver.command(["shoulder_pan"], [1.5], t0)  # beyond the 0.3 rad limit
        goals = [goal(follower)]
        for k in range(1, 400):
            tick(driver, t0 + k * 5 * MS)
            goals.append(goal(follower))
            if goals[-1] == cal.rad_to_raw(0.3) and goals[-1] == goals[-2]:
                break
        per_tick_steps = 2.0 * 0.005 / RAD_PER_STEP
        assert max(abs(b - a) for a, b in pairwise(goals)) <= per_tick_steps + 1
        assert goals[-1] == cal.rad_to_raw(0.3), "the goal stops at the limit"
        assert len(goals) > (0.3 - start.positions[0]) / (2.0 * 0.005) - 2, "it took 2 rad/s to get there"
        assert driver.guard.stats.clamped > 0 and driver.guard.stats.rate_limited > 0
    finally:
        driver.close()


def test_the_default_limits_are_the_calibrated_range() -> None:
    """A ±1.92 rad soft limit used to clip a calibrated shoulder_pan range wider than that."""
    cal = calibration("follower")
    limits = effective_limits(cal, [-NO_LIMIT] * 6, [NO_LIMIT] * 6)
    assert {n: list(b) for n, b in limits.bounds.items()} == {n: pytest.approx(list(b))
                                                             for n, b in cal.rad_limits().items()}
    assert cal.rad_limits()["wrist_roll"][1] > 2.8


def test_watchdog_holds_a_command_gone_stale(follower: SimulatedArm) -> None:
    driver = make_driver(follower, "follower", max_speed=0.4, watchdog_ms=100.0)
    assert driver.connect()
    try:
        t0 = now_ns()
        start = tick(driver, t0).positions[0]
        driver.command(["shoulder_pan"], [start + 0.5], t0)
        for k in range(1, 10):
            tick(driver, t0 + k * 5 * MS)  # fresh: each tick moves the goal on at 0.4 rad/s
        moving = goal(follower)
        tick(driver, t0 + 200 * MS)  # 200 ms after the only command: stale, hold
        held = goal(follower)
        assert held == moving
        for k in range(5):
            tick(driver, t0 + (210 + k) * MS)
        assert goal(follower) == held and driver.guard.stats.stale_ticks >= 6
        # a fresh command moves it again
        t1 = t0 + 300 * MS
        driver.command(["shoulder_pan"], [start + 0.5], t1)
        tick(driver, t1 + 10 * MS)
        assert goal(follower) != held
    finally:
        driver.close()


def test_nan_commands_do_not_keep_the_watchdog_from_holding(follower: SimulatedArm) -> None:
    """A sender that went on publishing NaN after its last good command: the arm holds 100 ms after
    the good one, as if nothing came, and diagnostics count the dropped commands."""
    driver = make_driver(follower, "follower", max_speed=0.4, watchdog_ms=100.0)
    assert driver.connect()
    try:
        t0 = now_ns()
        start = tick(driver, t0).positions[0]
        driver.command(["shoulder_pan"], [start + 0.5], t0)
        goals = []
        for k in range(1, 60):  # 295 ms of NaN commands, one per 5 ms tick
            driver.command(JOINT_NAMES, [float("nan")] * 6, t0 + k * 5 * MS)
            for attempt in range(3):  # a read the starved simulator missed is retried, as the bus loop does
                try:
                    tick(driver, t0 + k * 5 * MS)
                    break
                except BusTimeout:
                    if attempt == 2:
                        raise
            goals.append(goal(follower))
        cal = driver.calibration["shoulder_pan"]
        assert goals[-1] == goals[25], "held once the good command was 100 ms old"
        moved = (goals[-1] - cal.rad_to_raw(start)) * RAD_PER_STEP
        assert moved == pytest.approx(0.4 * 0.1, abs=3 * RAD_PER_STEP)  # 100 ms at 0.4 rad/s, not 295 ms
        assert driver.health().values["rejected_commands"] == 59
    finally:
        driver.close()


def test_leader_engages_on_commands_releases_on_request_and_when_stale(tmp_path: Path) -> None:
    with SimulatedArm("leader", link=tmp_path / "leader") as arm:
        arm.set_human(lambda t: [2050.0, 2050.0, 1975.0, 2025.0, 2050.0, 2650.0])
        driver = make_driver(arm, "leader", watchdog_ms=500.0, leader_torque_limit=250)
        assert driver.connect()

        def torque(on: int) -> bool:
            return all(s.get("Torque_Enable") == on for s in arm.servos.values())

        try:
            t0 = now_ns()
            tick(driver, t0)
            assert torque(0) and not driver.state.torque  # a human moves it
            driver.command(JOINT_NAMES, [0.25] * 6, t0)
            tick(driver, t0 + MS)
            assert torque(1) and driver.state.torque
            assert all(s.get("Torque_Limit") == 250 for s in arm.servos.values())
            driver.release()  # the pedal went down: let go now
            tick(driver, t0 + 2 * MS)
            assert torque(0) and not driver.state.torque
            driver.command(JOINT_NAMES, [0.25] * 6, t0 + 3 * MS)
            tick(driver, t0 + 4 * MS)
            assert torque(1)
            tick(driver, t0 + 600 * MS)  # commands stopped: released by the watchdog
            assert torque(0) and not driver.state.torque
        finally:
            driver.close()


def test_a_leader_servo_that_did_not_take_its_torque_limit_is_not_engaged(tmp_path: Path) -> None:
    """The live Torque_Limit is the driver's full torque: a leader servo that acknowledges the
    limit's write and keeps its old value must not be torqued in the operator's hand."""
    with SimulatedArm("leader", link=tmp_path / "leader") as arm:
        arm.set_human(lambda t: [2050.0, 2050.0, 1975.0, 2025.0, 2050.0, 2650.0])
        driver = make_driver(arm, "leader", watchdog_ms=500.0, leader_torque_limit=250)
        assert driver.connect()
        try:
            arm.servos[3].refused = {"Torque_Limit"}
            t0 = now_ns()
            for k in range(3):
                driver.command(JOINT_NAMES, [0.25] * 6, t0 + k * MS)
                tick(driver, t0 + k * MS + MS // 2)
            assert all(s.get("Torque_Enable") == 0 for s in arm.servos.values()), \
                f"torqued at Torque_Limit {arm.servos[3].get('Torque_Limit')}"
            assert not driver.state.torque
            arm.servos[3].refused = set()  # the write is taken again: it engages, at the limit
            driver.command(JOINT_NAMES, [0.25] * 6, t0 + 3 * MS)
            tick(driver, t0 + 3 * MS + MS // 2)
            assert driver.state.torque and all(s.get("Torque_Enable") == 1 for s in arm.servos.values())
            assert all(s.get("Torque_Limit") == 250 for s in arm.servos.values())
        finally:
            driver.close()

def test_run_reconnects_with_backoff_after_an_unplug(tmp_path: Path) -> None:
    with SimulatedArm("follower", link=tmp_path / "follower", faults=Faults(unplug_at=1.0, replug_after=1.5)) as arm:
        driver = make_driver(arm, "follower")
        readings: list[Reading] = []
        errors: list[str] = []
        stop = threading.Event()
        loop = threading.Thread(target=driver.run, args=(200.0, stop, readings.append))
        loop.start()
        try:
            def saw_error() -> bool:
                h = driver.health()
                if h.level == "ERROR":
                    errors.append(h.message)
                return bool(errors)

            wait_for(lambda: len(readings) >= 10, 60, "readings before the unplug")
            wait_for(saw_error, 60, "ERROR health while unplugged")
            assert str(arm.link) in errors[0] and "reconnecting" in errors[0]
            n = len(readings)
            wait_for(lambda: driver.state.reconnects >= 1 and len(readings) > n + 20, 60, "readings after reconnect")
            assert driver.health().level in ("OK", "WARN")
            assert all(s.get("Torque_Enable") == 1 for s in arm.servos.values())  # configured again
        finally:
            stop.set()
            loop.join(10)
            driver.close()
        assert not loop.is_alive()


def test_two_servos_at_one_id_are_named_and_end_the_driver(tmp_path: Path) -> None:
    """A second servo at id 3: the arm's reads collide and the driver used to retry forever with a
    bad-checksum error naming no servo. It names the id and the joint and stops (state.fatal: the
    node ends with that line), for retrying cannot rewire an arm."""
    with SimulatedArm("follower", link=tmp_path / "follower", faults=Faults(duplicate=[3])) as arm:
        driver = make_driver(arm, "follower", first_session=True)  # the twin is a copy of servo 3 as it booted
        assert not driver.connect()
        assert driver.state.fatal.startswith(f"{arm.link}: two servos answer to id 3 (elbow_flex): their replies "
                                             "collide"), driver.state.fatal
        assert "setup-motors" in driver.state.fatal
        assert not any(s.torque_on for s in arm.servos.values()), "nothing driven"


def test_a_missing_port_is_an_error_naming_it(tmp_path: Path) -> None:
    cal = calibration("follower")
    port = str(tmp_path / "no_arm_here")
    driver = ArmDriver(FeetechBus(port), cal, CommandGuard(JOINT_NAMES, JointLimits.unbounded()))
    assert not driver.connect()
    health = driver.health()
    assert health.level == "ERROR" and port in health.message
    with pytest.raises(ValueError, match="role"):
        ArmConfig(role="both")


def test_diagnostics_count_overruns_and_each_reads_latency(tmp_path: Path) -> None:
    """Behind an FTDI adapter at its default 16 ms latency timer a read takes ~16 ms, so a 500 Hz
    loop overruns on every tick and every read lands in the buckets above 10 ms: the counters a
    metrics exporter turns into an overrun rate and a per-transaction latency histogram."""
    with SimulatedArm("follower", link=tmp_path / "follower", adapter_name="ftdi16") as arm:
        driver = make_driver(arm, "follower")
        readings: list[Reading] = []
        stop = threading.Event()
        loop = threading.Thread(target=driver.run, args=(500.0, stop, readings.append))
        loop.start()
        try:
            wait_for(lambda: len(readings) >= 30, 60, "readings behind the FTDI timer")
        finally:
            stop.set()
            loop.join(10)
            driver.close()
    values = driver.health(500.0).values
    ticks, reads, overruns = (int(values[k]) for k in ("ticks", "reads", "overruns"))  # type: ignore[call-overload]
    assert ticks >= 30 and reads >= ticks and overruns >= ticks - 1
    buckets = [int(values[read_bucket_key(le)]) for le in READ_BUCKETS_MS]  # type: ignore[call-overload]
    assert buckets == sorted(buckets) and buckets[-1] <= reads  # cumulative (a loaded machine may take 100 ms)
    assert buckets[READ_BUCKETS_MS.index(5.0)] <= reads // 10  # the 16 ms timer: hardly any read under 5 ms
    mean_ms = float(values["read_sum_ms"]) / reads  # type: ignore[arg-type]
    assert 5.0 < mean_ms < 50.0
