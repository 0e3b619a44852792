"""The arm's motion at its edges, against the simulator on a real pty: the shaft's own speed in a
soft start, wrist_roll across the encoder's seam, a joint found outside its calibrated range, and
what the arm does when the driver stops (it parks, then lets go; never drops a raised arm)."""
from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from hw.arm.test_arm import make_driver
from hw.arm.test_arm_faults import keep_commanding, running
from teleop_flywheel.hw.feetech.sim import SimulatedArm
from teleop_flywheel.hw.feetech.sim_servo import STEPS_PER_RAD

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
