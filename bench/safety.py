"""Safety through faults: what the follower does when something goes wrong (SPEC §3, issue 34).

A simulated follower (STS3215s as unkind as the real ones, on a pty) driven by the real `ArmDriver`
at 200 Hz in this process, one fault per run. Per fault: the time from the fault to the hold (the
last goal written to the faulted joint, from the simulator's own record), the peak load and the peak
shaft speed of any joint (sampled every 2 ms from the simulator), the torque of every servo after a
replug, and the EEPROM writes per minute (the simulator counts every write into EEPROM):

- `collision`: shoulder_pan blocked while commanded 1 rad through the obstacle (time from the load
  first reaching the collision threshold); baseline, same run: the servo alone with its goal 0.35
  rad into the obstacle (the bound on goal minus present), until its own overload trip;
- `estop_replug`: `~/estop` with `estop_cuts_torque`, then the USB cable out for 0.3 s; after the
  replug the torque of every servo, then a reset and the peak speed of the restart;
- `reboot`: elbow_flex, raised, reboots (a brown-out) and falls: time until the driver names it;
- `supply_sag`: the supply drops to 9 V: time until the hold;
- `eeprom_refused`: the gripper refuses its Overload_Torque write: EEPROM writes per minute.

Usage: `python bench/safety.py [--out bench/results/safety.json]`
"""
from __future__ import annotations

import argparse
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from lerobot_bench import RESULTS, write_result

from teleop_flywheel.core.calibration import load_calibration, sim_calibration_file
from teleop_flywheel.core.clock import now_ns
from teleop_flywheel.core.safety import CommandGuard
from teleop_flywheel.core.so101 import JOINT_NAMES
from teleop_flywheel.hw.arm import ArmConfig, ArmDriver, Reading, effective_limits, settings
from teleop_flywheel.hw.feetech.bus import FeetechBus
from teleop_flywheel.hw.feetech.sim import Faults, SimulatedArm
from teleop_flywheel.hw.feetech.sim_servo import STEPS_PER_RAD

RATE_HZ = 200.0
SAMPLE_S = 0.002


class Watch:
    """Peak load and shaft speed of every joint, sampled from the simulator every 2 ms."""

    def __init__(self, arm: SimulatedArm) -> None:
        self.arm = arm
        self.peak_load = 0.0
        self.peak_speed = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            with self.arm._lock:
                for servo in self.arm.servos.values():
                    self.peak_load = max(self.peak_load, abs(servo.load()) / 1000.0)
                    self.peak_speed = max(self.peak_speed, abs(servo.velocity) / STEPS_PER_RAD)

    def reset(self) -> None:
        self.peak_load = self.peak_speed = 0.0

    def stop(self) -> dict[str, float]:
        self._stop.set()
        self._thread.join(1.0)
        return {"peak_load": round(self.peak_load, 3), "peak_joint_speed_rad_s": round(self.peak_speed, 3)}


@contextmanager
def follower(tmp: Path, faults: Faults | None = None, **config: Any) -> Iterator[tuple[SimulatedArm, ArmDriver,
                                                                                          list[Reading]]]:
    cal = load_calibration(sim_calibration_file("follower"))
    with SimulatedArm("follower", link=tmp / "follower", faults=faults) as arm:
        guard = CommandGuard(JOINT_NAMES, effective_limits(cal, [-6.3] * 6, [6.3] * 6), max_speed=2.0,
                             max_relative=0.35, watchdog_ns=100_000_000)
        driver = ArmDriver(FeetechBus(str(arm.link)), cal, guard, ArmConfig(**config))
        readings: list[Reading] = []
        stop = threading.Event()
        loop = threading.Thread(target=driver.run, args=(RATE_HZ, stop, readings.append), daemon=True)
        loop.start()
        wait(lambda: len(readings) > 20, 30)
        time.sleep(0.5)  # the arm settled where it holds before the fault
        try:
            yield arm, driver, readings
        finally:
            stop.set()
            loop.join(5)
            driver.close()


def wait(until: Callable[[], bool], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if until():
            return True
        time.sleep(0.005)
    return until()


def command(driver: ArmDriver, target: list[float], seconds: float, until: Callable[[], bool]) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not until():
        driver.command(JOINT_NAMES, target, now_ns())
        time.sleep(0.01)


def collision(tmp: Path) -> dict[str, Any]:
    threshold = settings.COLLISION["shoulder_pan"].load
    with follower(tmp, Faults(block={1: 0.0})) as (arm, driver, readings):
        watch = Watch(arm)
        target = list(readings[-1].positions)
        target[0] += 1.0
        command(driver, target, 5.0, lambda: bool(driver.state.faults))
        time.sleep(0.2)
        figures = watch.stop()
        at_cap = next(r.stamp_ns for r in list(readings) if abs(r.efforts[0]) >= threshold) / 1e9
        hold = [t for t, sid, _goal in list(arm.goal_writes) if sid == 1][-1]
        servo = arm.servos[1]
        return {"time_to_hold_s": round(hold - at_cap, 3), **figures, "fault": driver.state.faults.summary(),
                "servo_tripped": bool(servo.faults), "torque_after": servo.torque_on,
                "goal_minus_shaft_steps": round(servo.goal_physical() - servo.position, 1)}


def servo_alone(tmp: Path) -> dict[str, Any]:
    """The baseline: the servo's own overload protection with its goal 0.35 rad into an obstacle."""
    with SimulatedArm("follower", link=tmp / "alone", faults=Faults(block={1: 0.0})) as arm, \
            FeetechBus(str(arm.link)) as bus:
        watch = Watch(arm)
        present, _stamp = bus.read_register(1, "Present_Position")
        bus.write_register(1, "Goal_Position", present + round(0.35 * STEPS_PER_RAD))
        bus.write_register(1, "Torque_Enable", 1)
        t0 = time.monotonic()
        wait(lambda: not arm.servos[1].torque_on, 5.0)
        return {"time_at_cap_until_the_servo_trips_s": round(time.monotonic() - t0, 3), **watch.stop()}


def estop_replug(tmp: Path) -> dict[str, Any]:
    with follower(tmp, estop_cuts_torque=True) as (arm, driver, readings):
        watch = Watch(arm)
        t0 = time.monotonic()
        ok, why = driver.estop("bench").wait(2.0)
        acknowledged = time.monotonic() - t0
        arm.faults.unplug_at, arm.faults.replug_after = arm._elapsed(), 0.3
        wait(lambda: driver.state.reconnects >= 1, 20)
        n = len(readings)
        wait(lambda: len(readings) > n + 40, 10)
        after = {name: arm.servos[i + 1].torque_on for i, name in enumerate(JOINT_NAMES)}
        reported = driver.health().values["torque"]
        watch.reset()
        driver.reset()
        wait(lambda: all(s.torque_on for s in arm.servos.values()), 5)
        target = list(readings[-1].positions)
        target[0] += 1.0
        command(driver, target, 1.5, lambda: False)
        return {"estop_acknowledged": ok, "estop_answer": why, "time_to_hold_s": round(acknowledged, 3),
                "torque_after_replug": after, "torque_reported_after_replug": reported,
                "restart": watch.stop()}


def reboot(tmp: Path) -> dict[str, Any]:
    with follower(tmp) as (arm, driver, readings):
        raised = list(readings[-1].positions)
        raised[1] += 0.8  # shoulder and elbow up off their stops: a limp elbow falls
        raised[2] += 0.8
        command(driver, raised, 1.5, lambda: False)
        time.sleep(0.3)
        watch = Watch(arm)
        t0 = arm._elapsed()
        arm.faults.reboot[3] = t0
        wait(lambda: bool(driver.state.faults), 5)
        named = arm._elapsed() - t0
        driver.reset()
        wait(lambda: arm.servos[3].torque_on, 5)
        ram = {n: arm.servos[3].get(n) for n in ("Acceleration", "Goal_Velocity", "Torque_Limit")}
        return {"time_to_hold_s": round(named, 3), **watch.stop(), "fault": driver.state.faults.summary() or
                "cleared by the reset", "ram_after_reset": ram}


def supply_sag(tmp: Path) -> dict[str, Any]:
    with follower(tmp) as (arm, driver, _readings):
        watch = Watch(arm)
        t0 = arm._elapsed()
        arm.faults.sag = (t0, 9.0)
        wait(lambda: bool(driver.state.faults), 5)
        return {"time_to_hold_s": round(arm._elapsed() - t0, 3), **watch.stop(),
                "fault": driver.state.faults.summary()}


def eeprom_refused(tmp: Path, seconds: float = 20.0) -> dict[str, Any]:
    with follower(tmp, Faults(refuse={6: {"Overload_Torque"}})) as (arm, driver, _readings):
        wait(lambda: bool(driver.state.faults), 10)
        at_latch = arm.servos[6].eeprom_writes
        time.sleep(seconds)
        after = arm.servos[6].eeprom_writes - at_latch
        return {"gripper_eeprom_writes_until_the_latch": at_latch,
                "eeprom_writes_per_minute_after": round(after * 60 / seconds, 1),
                "fault": driver.state.faults.summary(), "connected": driver.state.connected}


def eeprom_steady(tmp: Path, seconds: float = 10.0) -> dict[str, Any]:
    """A configured arm reconnecting: no EEPROM value differs, none is written."""
    with follower(tmp, Faults(unplug_at=2.0, replug_after=0.3)) as (arm, driver, _readings):
        before = sum(s.eeprom_writes for s in arm.servos.values())
        time.sleep(seconds)
        writes = sum(s.eeprom_writes for s in arm.servos.values()) - before
        return {"reconnects": driver.state.reconnects, "eeprom_writes_per_minute": round(writes * 60 / seconds, 1)}


def run(out: Path) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench_safety_") as tmp:
        root = Path(tmp)
        result: dict[str, Any] = {
            "rate_hz": RATE_HZ,
            "collision": collision(root),
            "baseline_servo_alone": servo_alone(root),
            "estop_replug": estop_replug(root),
            "reboot": reboot(root),
            "supply_sag": supply_sag(root),
            "eeprom_refused": eeprom_refused(root),
            "eeprom_steady": eeprom_steady(root),
        }
    c = result["collision"]
    e = result["estop_replug"]
    result["met"] = bool(c["time_to_hold_s"] <= 0.1 and not c["servo_tripped"]
                         and not any(e["torque_after_replug"].values()) and e["estop_acknowledged"]
                         and result["eeprom_steady"]["eeprom_writes_per_minute"] == 0
                         and result["eeprom_refused"]["eeprom_writes_per_minute_after"] == 0)
    write_result(out, result)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=RESULTS / "safety.json")
    run(parser.parse_args().out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
