"""`teleop-flywheel find-port`: which serial port is this arm, what adapter is it on, and the udev
rule that names it for good.

Lists the serial ports, asks the user to unplug the arm's USB cable, lists them again and names
the one that disappeared (as LeRobot's `find_port` does). Each port's adapter is read from sysfs
before the unplug (its sysfs entry goes with it): the kernel driver, an FTDI's latency timer,
the sync-read rate to expect through it and what to do (`usb_adapter.py`). Then the udev rule:
a stable /dev/so101_<arm>, ModemManager kept off the port, an FTDI's timer at 1 ms; printed, or
created (never overwritten) with `--udev-rule FILE`. `--port PORT` describes a known port without
the unplug. `--ports GLOB` watches given paths instead of pyserial's list (a simulator's pty and
its `--link` are not in that list); `--after-seconds N` replaces the prompt with a wait.
"""
from __future__ import annotations

import glob

from serial.tools import list_ports


def current_ports(pattern: str | None) -> set[str]:
    """Serial ports present now: pyserial's list, or the paths matching `pattern`."""
    if pattern:
        return set(glob.glob(pattern))
    return {p.device for p in list_ports.comports()}

