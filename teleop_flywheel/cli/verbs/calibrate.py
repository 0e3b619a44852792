"""`teleop-flywheel calibrate`: LeRobot's SO-101 calibration: homing offsets and ranges."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml

from teleop_flywheel.core.errors import EXIT_PARTIAL, FlywheelError, UsageError
from teleop_flywheel.core.files import create_exclusive
from teleop_flywheel.hw.bringup import REPLY_TIMEOUT_S, require_port
from teleop_flywheel.hw.bringup.calibrate import calibrate
from teleop_flywheel.hw.errors import CalibrationStopped
from teleop_flywheel.hw.feetech.bus import FeetechBus


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--port", required=True, help="the arm's serial port (e.g. /dev/so101_follower)")
    parser.add_argument("--arm", choices=("leader", "follower"), required=True, help="which arm this is")
    parser.add_argument("--out", required=True, type=Path, help="calibration YAML to create (never overwritten)")
    parser.add_argument("--arm-id", default="", help="name stored in the file (default: the --out file name)")
    parser.add_argument("--lerobot-json", type=Path, help="also write LeRobot's calibration JSON here")
    parser.add_argument("--non-interactive", type=float, metavar="SECONDS",
                        help="no prompts: the start pose is the middle, record motion for SECONDS")


def run(args: argparse.Namespace) -> int:
    for path in filter(None, (args.out, args.lerobot_json)):
        if path.exists() or path.is_symlink():
            raise UsageError("already exists", where=str(path),
                             fix="choose another path: a calibration is never overwritten")
    require_port(args.port)
    try:
        with FeetechBus(args.port, timeout_s=REPLY_TIMEOUT_S) as bus:
            cal = calibrate(bus, args.arm_id or args.out.stem, args.non_interactive, sys.stdout, sys.stdin)
        create_exclusive(args.out, f"# {args.arm} arm, calibrated with teleop-flywheel calibrate on {args.port}\n"
                         + yaml.safe_dump(cal.to_dict(), sort_keys=False))
        if args.lerobot_json:
            create_exclusive(args.lerobot_json, json.dumps(cal.to_lerobot_json(), indent=4) + "\n")
    except CalibrationStopped:  # its own exit code: 1, or 130 after Ctrl-C
        raise
    except FlywheelError as exc:  # it ran on the arm and failed there: one line, exit 1 (cli/)
        exc.exit_code = EXIT_PARTIAL
        raise
    for j in cal.joints:
        print(f"calibrate: {j.name:13s} id {j.id}  homing_offset {j.homing_offset:+5d}  "
              f"range {j.range_min}..{j.range_max}")
    print(f"calibrate: wrote {args.out}" + (f" and {args.lerobot_json}" if args.lerobot_json else ""))
    return 0
