"""`teleop-flywheel find-port`: which serial port is this arm? Unplug it and see what vanished.

Lists the serial ports, asks the user to unplug the arm's USB cable, lists them again and names
the one that disappeared (as LeRobot's `find_port` does), with the udev rule that gives it a
stable name. `--ports GLOB` watches given paths instead of pyserial's list (a simulator's pty
and its `--link` are not in that list); `--after-seconds N` replaces the prompt with a wait.
"""
from __future__ import annotations

import argparse
import glob
import time

from serial.tools import list_ports

from teleop_flywheel.core.errors import PartialFailure, UsageError


def current_ports(pattern: str | None) -> set[str]:
    """Serial ports present now: pyserial's list, or the paths matching `pattern`."""
    if pattern:
        return set(glob.glob(pattern))
    return {p.device for p in list_ports.comports()}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--ports", metavar="GLOB", help="watch these paths instead of the system's serial ports")
    parser.add_argument("--after-seconds", type=float, metavar="N",
                        help="no prompt: look again after N seconds (unplug within them)")


def run(args: argparse.Namespace) -> int:
    before = current_ports(args.ports)
    if not before:
        raise UsageError("no serial ports found", where=args.ports or "the system's serial ports",
                         fix="is the arm's USB cable plugged in?")
    print("find-port: ports now: " + ", ".join(sorted(before)), flush=True)
    if args.after_seconds is None:
        try:
            input("Unplug the arm's USB cable, then press Enter. ")
        except EOFError:
            raise UsageError("no answer", where="standard input", fix="use --after-seconds N") from None
    else:
        print(f"find-port: unplug the arm's USB cable within {args.after_seconds:g} s", flush=True)
        time.sleep(args.after_seconds)
    gone = sorted(before - current_ports(args.ports))
    if len(gone) != 1:
        what = "no port disappeared" if not gone else f"{len(gone)} ports disappeared ({', '.join(gone)})"
        raise PartialFailure(what, where=args.ports or "the serial ports", fix="unplug exactly one arm and try again")
    port = gone[0]
    print(f"find-port: the arm is on {port}")
    print("find-port: give it a stable name with a udev rule on the adapter's serial number, e.g.\n"
          f"  udevadm info -a -n {port} | grep -m1 'ATTRS{{serial}}'\n"
          '  SUBSYSTEM=="tty", ATTRS{serial}=="<serial>", SYMLINK+="so101_follower"   (see docs/arm_driver.md)')
    return 0
