"""Soft start: the peak joint speed at the servo when the first command is 1.5 rad away.

A simulated follower (an STS3215 with its real top speed and acceleration, on a pty) holds where
it was found; the real `ArmDriver` then gets a live command stream for a pose 1.5 rad away on
shoulder_pan (a session started with the leader elsewhere, a replugged leader, a policy's first
command). Measured from the simulator's own record of Goal_Position writes (the speed the servo
was told to move at, over 100 ms windows so neither a step of rounding nor the stamping jitter is
a speed) and from its shaft (sampled every 2 ms), for:

- the driver as configured by default (`max_speed_rad_s` 2.0, `acceleration` 100, and the servo's
  own Goal_Velocity at that limit);
- the baseline of the same run: the limit the driver had before (0.05 rad per tick at 200 Hz,
  10 rad/s) with LeRobot's Acceleration 254 — what a far first command did then.

Target (SPEC §9, issue 34): the peak commanded speed and the shaft's peak speed both ≤ the
configured approach speed (default 2 rad/s) + 5 %.
Usage: `python bench/soft_start.py [--out bench/results/soft_start.json]`
"""
from __future__ import annotations

import argparse
import tempfile
import threading
import time
from pathlib import Path

from result_file import write_result

from teleop_flywheel.core.calibration import RAD_PER_STEP, load_calibration, sim_calibration_file
from teleop_flywheel.core.clock import now_ns
from teleop_flywheel.core.safety import CommandGuard
from teleop_flywheel.core.so101 import JOINT_NAMES
from teleop_flywheel.hw.arm import ArmConfig, ArmDriver, effective_limits
from teleop_flywheel.hw.arm.settings import DEFAULT_ACCELERATION
from teleop_flywheel.hw.feetech.bus import FeetechBus
from teleop_flywheel.hw.feetech.sim import SimulatedArm
from teleop_flywheel.hw.feetech.sim.servo import STEPS_PER_RAD

DISTANCE_RAD = 1.5
RATE_HZ = 200.0
WINDOW_S = 0.1  # long against the simulator's scheduling jitter in stamping the writes


def commanded_peak(writes: list[tuple[float, int]]) -> float:
    """Peak speed (rad/s) between Goal_Position writes at least WINDOW_S apart."""
    peak = 0.0
    for i, (t, goal) in enumerate(writes):
        for t0, goal0 in reversed(writes[:i]):
            if t - t0 >= WINDOW_S:
                peak = max(peak, abs(goal - goal0) * RAD_PER_STEP / (t - t0))
                break
    return peak


def approach(max_speed: float, acceleration: int) -> dict[str, float]:
    cal = load_calibration(sim_calibration_file("follower"))
    limits = effective_limits(cal, [-6.3] * 6, [6.3] * 6)
    with tempfile.TemporaryDirectory(prefix="bench_soft_start_") as tmp, \
            SimulatedArm("follower", link=Path(tmp) / "follower") as arm:
        guard = CommandGuard(JOINT_NAMES, limits, max_speed=max_speed, watchdog_ns=100_000_000)
        driver = ArmDriver(FeetechBus(str(arm.link)), cal, guard, ArmConfig(acceleration=acceleration))
        readings: list = []
        stop = threading.Event()
        loop = threading.Thread(target=driver.run, args=(RATE_HZ, stop, readings.append), daemon=True)
        loop.start()
        while len(readings) < 20:
            time.sleep(0.01)
        start = list(readings[-1].positions)
        target = list(start)
        target[0] = start[0] + DISTANCE_RAD
        shaft_peak = 0.0
        t0 = time.monotonic()
        arrived = None
        while time.monotonic() - t0 < 5.0:
            driver.command(JOINT_NAMES, target, now_ns())
            with arm._lock:
                shaft_peak = max(shaft_peak, abs(arm.servos[1].velocity) / STEPS_PER_RAD)
            if arrived is None and abs(readings[-1].positions[0] - target[0]) < 0.01:
                arrived = time.monotonic() - t0
            time.sleep(0.002)
        stop.set()
        loop.join(5)
        driver.close()
        writes = [(t, goal) for t, sid, goal in list(arm.goal_writes) if sid == 1]
    return {"commanded_peak_rad_s": round(commanded_peak(writes), 3), "shaft_peak_rad_s": round(shaft_peak, 3),
            "time_to_target_s": round(arrived, 3) if arrived is not None else None}


def run(out: Path) -> dict:
    configured = 2.0  # the arm driver's default max_speed_rad_s
    result = {
        "distance_rad": DISTANCE_RAD,
        "rate_hz": RATE_HZ,
        "configured_speed_rad_s": configured,
        "default": approach(configured, DEFAULT_ACCELERATION),
        "baseline_0.05_rad_per_tick_acc254": approach(0.05 * RATE_HZ, 254),
        "servo_top_speed_rad_s": 4.7,
    }
    result["met"] = max(result["default"]["commanded_peak_rad_s"], result["default"]["shaft_peak_rad_s"]) \
        <= configured * 1.05
    write_result(out, result)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "soft_start.json")
    args = parser.parse_args()
    run(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
