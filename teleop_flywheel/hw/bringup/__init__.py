"""Bring-up of a real SO-101 pair with this project's commands only: find the ports, give
factory-new servos their ids and baud, calibrate, find the cameras. Every command works against
`sim-bus` (which learns a factory-new servo, EEPROM locking and baud changes) and has a
non-interactive mode so tests and CI run it."""
from __future__ import annotations

import os

from teleop_flywheel.core.errors import UsageError
from teleop_flywheel.hw.feetech.bus import FeetechBus
from teleop_flywheel.hw.feetech.control_table import PHASE_MULTI_TURN

# A bring-up step is not a control loop: it waits 5x the driver's 20 ms for a reply, so a servo (or a
# simulator on a busy machine) that answers late is not a failed calibration or a servo left half-set.
REPLY_TIMEOUT_S = 0.1


def require_port(port: str) -> None:
    """A serial port that does not exist is a usage error naming it (exit 2), before any bus is opened."""
    if not os.path.exists(port):
        raise UsageError("no such serial port", where=port,
                         fix="teleop-flywheel find-port names the arm's port; is its USB cable plugged in?")


def clear_multi_turn(bus: FeetechBus, servo_id: int) -> bool:
    """Clear Phase bit 4 of a servo whose EEPROM is unlocked; True if it was set.

    With the bit set an STS3215 counts whole turns: Present_Position reads above 4095 (or below 0)
    once the shaft is a turn past, and a homing offset taken from it does not fit the servo's
    ±2047 (LeRobot's issues #1296 and #3193). LeRobot's `configure_motors` clears it the same way.
    Callers read it back (`multi_turn`): a servo whose EEPROM did not take the write must stop them."""
    phase = bus.read_register(servo_id, "Phase")[0]
    if not phase & PHASE_MULTI_TURN:
        return False
    bus.write_register(servo_id, "Phase", phase & ~PHASE_MULTI_TURN)
    return True


def multi_turn(bus: FeetechBus, servo_id: int) -> bool:
    """Whether the servo reads whole turns (Phase bit 4 set)."""
    return bool(bus.read_register(servo_id, "Phase")[0] & PHASE_MULTI_TURN)
