"""Bring-up of a real SO-101 pair with this project's commands only: find the ports, give
factory-new servos their ids and baud, calibrate, find the cameras. Every command works against
`sim-bus` (which learns a factory-new servo, EEPROM locking and baud changes) and has a
non-interactive mode so tests and CI run it."""
from __future__ import annotations

import os

from teleop_flywheel.core.errors import UsageError

# A bring-up step is not a control loop: it waits 5x the driver's 20 ms for a reply, so a servo (or a
# simulator on a busy machine) that answers late is not a failed calibration or a servo left half-set.
REPLY_TIMEOUT_S = 0.1


def require_port(port: str) -> None:
    """A serial port that does not exist is a usage error naming it (exit 2), before any bus is opened."""
    if not os.path.exists(port):
        raise UsageError("no such serial port", where=port,
                         fix="teleop-flywheel find-port names the arm's port; is its USB cable plugged in?")
