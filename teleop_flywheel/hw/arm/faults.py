"""An arm's faults: what a servo says about itself, decoded, latched and made loud.

An STS3215 protects itself: on overload, overcurrent or overheat it cuts its own torque (as its
Unloading_Condition says) and sets a status bit that every reply carries. A joint that did so
hangs limp while the others hold, so a fault is never a warning: it latches the arm into a hold
that only an operator's reset ends (`ArmDriver.reset`). The driver latches a fault when:

- a reply or the Status register carries a protection bit (voltage, angle sensor, overheat,
  overcurrent, overload);
- a servo that should hold reads Torque_Enable 0 (it cut its torque, or rebooted);
- a servo stops answering (the others keep being read: it is named, not the whole arm blinded);
- a temperature reaches `temperature_stop_c` (a temperature from `temperature_warn_c` is a warning);
- a follower's limp joint is found resting outside its calibrated range at connect (`outside_range`):
  torque on would move it to the range's edge at once, so it stays limp until the operator's reset
  (which then brings it in at the speed limit) or a calibration that covers where it rests.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from teleop_flywheel.core.calibration import ArmCalibration
from teleop_flywheel.hw.arm.settings import Supply
from teleop_flywheel.hw.feetech.control_table import error_names

PROTECTION_BITS = 0x01 | 0x02 | 0x04 | 0x08 | 0x20
# A joint this far beyond its calibrated range rests outside it; closer is the edge itself (a joint
# on the stop it was calibrated against reads a step or two past the range recorded).
RANGE_SLACK_RAD = 0.02


@dataclass(frozen=True)
class Fault:
    joint: str
    servo_id: int
    cause: str

    def __str__(self) -> str:
        return f"{self.joint} (servo {self.servo_id}): {self.cause}"


def status_cause(bits: int) -> str:
    """What protection bits mean, e.g. 'overload (status 0x20)'."""
    return f"{', '.join(error_names(bits & PROTECTION_BITS))} (status 0x{bits:02x})"


@dataclass
class FaultLatch:
    """The faults latched since the last reset, the first per joint kept; and current warnings."""

    latched: dict[str, Fault] = field(default_factory=dict)
    warnings: dict[str, str] = field(default_factory=dict)

    def latch(self, fault: Fault) -> bool:
        """Latch `fault`; True if its joint had none yet (the moment to say so)."""
        if fault.joint in self.latched:
            return False
        self.latched[fault.joint] = fault
        return True

    def clear(self) -> list[Fault]:
        cleared = list(self.latched.values())
        self.latched.clear()
        return cleared

    def __bool__(self) -> bool:
        return bool(self.latched)

    def summary(self) -> str:
        return "; ".join(str(f) for f in self.latched.values())


def supply_fault(joint: str, servo_id: int, volts: float, supply: Supply, latch: FaultLatch) -> Fault | None:
    """A Fault outside `supply.hold`; a warning in `latch.warnings` outside `supply.warn`; else None."""
    key = f"{joint} supply"
    band = f"{supply.nominal:g} V arm"
    if not supply.hold[0] <= volts <= supply.hold[1]:
        return Fault(joint, servo_id, f"supply {volts:.1f} V outside {supply.hold[0]:g}-{supply.hold[1]:g} V ({band})")
    if not supply.warn[0] <= volts <= supply.warn[1]:
        latch.warnings[key] = (f"{joint} supply {volts:.1f} V outside {supply.warn[0]:g}-{supply.warn[1]:g} V ({band}; "
                               f"holds outside {supply.hold[0]:g}-{supply.hold[1]:g} V)")
    else:
        latch.warnings.pop(key, None)
    return None


def temperature_fault(joint: str, servo_id: int, celsius: float, warn_c: float, stop_c: float,
                      latch: FaultLatch) -> Fault | None:
    """A Fault at or above `stop_c`; a warning in `latch.warnings` from `warn_c`; None below both."""
    if celsius >= stop_c:
        return Fault(joint, servo_id, f"temperature {celsius:.0f} °C reached the stop threshold {stop_c:g} °C")
    if celsius >= warn_c:
        latch.warnings[joint] = f"{joint} at {celsius:.0f} °C (stop at {stop_c:g} °C)"
    else:
        latch.warnings.pop(joint, None)
    return None


def outside_range(calibration: ArmCalibration, positions: Sequence[float], ids: Sequence[int]) -> list[Fault]:
    """A Fault for each of the servos `ids` whose joint (`positions`, radians in joint order) rests
    more than RANGE_SLACK_RAD outside its calibrated range."""
    out = []
    for joint, rad in zip(calibration.joints, positions, strict=True):
        lo, hi = joint.rad_range()
        if joint.id in ids and not lo - RANGE_SLACK_RAD <= rad <= hi + RANGE_SLACK_RAD:
            edge = lo if rad < lo else hi
            out.append(Fault(joint.name, joint.id, f"rests {math.degrees(abs(rad - edge)):.1f}° outside its calibrated "
                                                   "range: left limp, nothing moves until ~/reset (it then comes "
                                                   "to the range's edge at the speed limit) or a calibration that "
                                                   "covers where it rests"))
    return out
