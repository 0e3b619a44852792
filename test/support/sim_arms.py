"""A simulated arm as a user's arm is from its second session on."""
from __future__ import annotations

from teleop_flywheel.core.calibration import load_calibration, sim_calibration_file
from teleop_flywheel.hw.arm import settings
from teleop_flywheel.hw.feetech.sim import SimulatedArm


def driven_before(arm: SimulatedArm, role: str) -> SimulatedArm:
    """`arm` with the EEPROM an earlier session's connect left in it (`settings.wanted`) and
    power-cycled since, unless it holds that EEPROM already. A fresh simulator is an arm out of
    the box: its first connect drops each servo's torque in turn to write its EEPROM, one
    acknowledged write after another 10 ms apart (the bus's duplicate hold), ~0.2 s of every test
    that is not about that connect. A test that is about it (or about a refused EEPROM write)
    leaves the arm fresh."""
    cal = load_calibration(sim_calibration_file(role))
    wanted = {joint.id: {name: value for name, value in settings.wanted(role, joint.name, 0).items()
                         if settings.in_eeprom(name)} for joint in cal.joints}
    with arm._lock:
        for sid, values in wanted.items():
            servo = arm.servos[sid]
            if any(servo.get(name) != value for name, value in values.items()):
                for name, value in values.items():
                    servo.set(name, value)
                servo.power_on()
    return arm
