"""`teleop-flywheel find-port`: which serial port is the arm on (unplug it and see)."""
from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from teleop_flywheel.core.errors import PartialFailure, UsageError
from teleop_flywheel.core.files import create_exclusive
from teleop_flywheel.hw.bringup.find_port import current_ports
from teleop_flywheel.hw.bringup.usb_adapter import Adapter, advice, describe, no_rule_reason, summary, udev_rule


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--ports", metavar="GLOB", help="watch these paths instead of the system's serial ports")
    parser.add_argument("--after-seconds", type=float, metavar="N",
                        help="no prompt: look again after N seconds (unplug within them)")
    parser.add_argument("--port", help="describe this port's adapter and give its udev rule, without the unplug")
    parser.add_argument("--arm", choices=("leader", "follower"), default="follower",
                        help="which arm the port is: the udev rule names it /dev/so101_<arm> (default follower)")
    parser.add_argument("--udev-rule", type=Path, metavar="FILE",
                        help="create FILE with the udev rule (never overwritten) instead of printing it")
    parser.add_argument("--by-usb-port", action="store_true",
                        help="match the physical USB port in the rule even if the adapter has a serial number "
                             "(for two adapters that report the same one)")


def run(args: argparse.Namespace) -> int:
    if args.udev_rule is not None and (args.udev_rule.exists() or args.udev_rule.is_symlink()):
        raise UsageError("already exists", where=str(args.udev_rule),
                         fix="choose another path: a udev rule file is never overwritten")
    if args.port:
        if args.ports or args.after_seconds is not None:
            raise UsageError("--port describes a known port; --ports and --after-seconds find one by unplugging",
                             where="--port", fix="give one or the other")
        adapter = describe(args.port)
        if adapter.kind == "unknown" and not os.path.exists(args.port):
            raise UsageError("no such serial port", where=args.port,
                             fix="teleop-flywheel find-port (without --port) names the arm's port")
        report(adapter, args)
        return 0
    before = current_ports(args.ports)
    if not before:
        raise UsageError("no serial ports found", where=args.ports or "the system's serial ports",
                         fix="is the arm's USB cable plugged in?")
    adapters = {port: describe(port) for port in before}  # the sysfs entry goes with the unplugged adapter
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
    print(f"find-port: the arm is on {gone[0]}")
    report(adapters[gone[0]], args)
    return 0


def report(adapter: Adapter, args: argparse.Namespace) -> None:
    """The adapter, the rate to expect, what to do, and the udev rule (printed or written)."""
    expect, action = advice(adapter)
    print(f"find-port: {adapter.port}: {summary(adapter)}")
    print(f"find-port: {expect}" + (f"; {action}" if action else ""))
    link = f"so101_{args.arm}"
    rule = udev_rule(adapter, link, args.by_usb_port)
    if rule is None:
        if args.udev_rule is not None:
            raise UsageError(no_rule_reason(adapter), where=adapter.port, fix="give the port of a USB adapter")
        print(f"find-port: {no_rule_reason(adapter)}")
        return
    installed = f"/etc/udev/rules.d/99-{link.replace('_', '-')}.rules"
    reload = "sudo udevadm control --reload && sudo udevadm trigger"
    if args.udev_rule is None:
        print(f"find-port: udev rule for /dev/{link} (put it in {installed}, then {reload}; docs/arm_driver.md):")
        print(f"  {rule}")
        return
    create_exclusive(args.udev_rule, f"# SO-101 {args.arm} arm on {summary(adapter)}; by teleop-flywheel find-port\n"
                                     f"{rule}\n")
    print(f"find-port: wrote {args.udev_rule}; install it: sudo cp {args.udev_rule} {installed} && {reload}")
