"""The arm's motion at its edges, against the simulator on a real pty: the shaft's own speed in a
soft start, and a joint found outside its calibrated range (the seam and stopping are shown on the
nodes, test/ros/nodes/test_arm_driver_motion.py)."""
from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from support.procs import wait_for

from hw.arm.test_arm import calibration, make_driver
from hw.arm.test_arm_faults import keep_commanding, running
from teleop_flywheel.core.calibration import RAD_PER_STEP, parse_calibration
from teleop_flywheel.core.safety import CommandGuard
from teleop_flywheel.core.so101 import JOINT_NAMES
from teleop_flywheel.hw.arm import ArmConfig, ArmDriver, effective_limits
from teleop_flywheel.hw.feetech.bus import FeetechBus
from teleop_flywheel.hw.feetech.sim import SimulatedArm
from teleop_flywheel.hw.feetech.sim.servo import STEPS_PER_RAD

pytestmark = pytest.mark.timeout(120)


class ShaftSpeed:
    """The peak speed of one simulated shaft (rad/s), sampled every 2 ms while it runs."""

    def __init__(self, arm: SimulatedArm, sid: int) -> None:
        self.peak = 0.0
        self._arm, self._sid = arm, sid
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.is_set():
            with self._arm._lock:
                speed = abs(self._arm.servos[self._sid].velocity) / STEPS_PER_RAD
            self.peak = max(self.peak, speed)
            time.sleep(0.002)

    def stop(self) -> float:
        self._stop.set()
        self._thread.join(2)
        return self.peak


def test_the_shaft_never_runs_faster_than_the_limit_in_a_soft_start(tmp_path: Path) -> None:
    """Goal_Velocity was 1.1x the driver's limit: a lagging shaft caught up at 2.2 rad/s under 2."""
    with SimulatedArm("follower", link=tmp_path / "follower") as arm:
        driver = make_driver(arm, "follower", max_speed=2.0)
        with running(driver) as readings:
            start = list(readings[-1].positions)
            target = list(start)
            target[0] = start[0] + 1.5
            shaft = ShaftSpeed(arm, 1)
            keep_commanding(driver, lambda: target, 3.0,
                            until=lambda: abs(readings[-1].positions[0] - target[0]) < 0.02)
            peak = shaft.stop()
            assert abs(readings[-1].positions[0] - target[0]) < 0.02, "the arm got there"
        assert 1.8 < peak <= 2.0 * 1.05, f"shaft peak {peak:.3f} rad/s against a 2 rad/s limit"


def test_a_joint_resting_outside_its_range_stays_still_until_the_operator_resets(tmp_path: Path) -> None:
    """shoulder_pan rests 220 steps below a calibrated range that does not cover it: torque on used
    to move it to the range's edge at once. It stays limp and named until reset; then it comes in
    at the speed limit."""
    data = calibration("follower").to_dict()
    data["joints"]["shoulder_pan"]["range_min"] = 2300  # the simulated pan rests at 2080
    cal = parse_calibration(data)
    with SimulatedArm("follower", link=tmp_path / "follower", calibration=cal) as arm:
        guard = CommandGuard(JOINT_NAMES, effective_limits(cal, [-6.3] * 6, [6.3] * 6), max_speed=2.0)
        driver = ArmDriver(FeetechBus(str(arm.link)), cal, guard, ArmConfig())
        start = arm.servos[1].position
        shaft = ShaftSpeed(arm, 1)
        with running(driver):
            time.sleep(0.5)
            assert abs(arm.servos[1].position - start) < 2, "it moved before the operator said so"
            assert not arm.servos[1].torque_on and all(arm.servos[sid].torque_on for sid in (2, 3, 4, 5, 6))
            health = driver.health()
            assert health.level == "ERROR" and "shoulder_pan (servo 1): rests 19.3° outside its calibrated" in \
                health.message, health.message
            driver.reset()  # the operator confirms
            wait_for(lambda: arm.servos[1].get("Present_Position") >= 2298, 10, "the pan brought into its range")
        peak = shaft.stop()
        assert peak <= 2.0 * 1.05, f"brought in at {peak:.2f} rad/s"


def test_the_arm_parks_at_exit_with_an_object_in_its_jaws(tmp_path: Path) -> None:
    """An object between the jaws stops the gripper short of its rest value: the park used to wait
    for it 8 s and then leave the arm holding; the body parks and lets go."""
    with SimulatedArm("follower", link=tmp_path / "follower", grip_object=2800.0) as arm:
        wait_for(lambda: arm.servos[2].position < 1500 and arm.servos[2].velocity == 0, 10,
                 "the limp shoulder come to rest (where gravity no longer beats friction)")
        rest = arm.servos[2].position
        said: list[str] = []
        driver = make_driver(arm, "follower", log=lambda _level, message: said.append(message))
        with running(driver) as readings:
            target = list(readings[-1].positions)
            target[1] += 1.0  # shoulder raised
            target[5] += 0.6  # jaws open past the object (the gripper rests below it)
            keep_commanding(driver, lambda: target, 5.0, until=lambda: arm.servos[6].position > 2900
                            and arm.servos[2].position > rest + 0.9 / RAD_PER_STEP)
            t0 = time.monotonic()
        took = time.monotonic() - t0  # running() closes the driver: the park
        assert not any(s.torque_on for s in arm.servos.values()), f"parked and released: {said[-1:]}"
        # let go within 0.1 rad of rest (parking.ARRIVED_RAD), where it settles
        assert abs(arm.servos[2].position - rest) * RAD_PER_STEP < 0.11 and took < 4.0, (arm.servos[2].position, took)
        assert 2795 < arm.servos[6].position < 2900, "the jaws closed toward the object, never through it"
