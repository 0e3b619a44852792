"""`teleop-flywheel setup-motors`: give factory-new servos their SO-101 ids and baud."""
from __future__ import annotations

import argparse

from teleop_flywheel.core.errors import EXIT_PARTIAL, FlywheelError, PartialFailure, UsageError
from teleop_flywheel.core.so101 import BAUD_RATE, JOINT_IDS, JOINT_NAMES
from teleop_flywheel.hw.bringup import require_port
from teleop_flywheel.hw.bringup.setup_motors import BAUD_CODES, configure


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--port", required=True, help="the arm's serial port")
    parser.add_argument("--arm", choices=("leader", "follower"), required=True, help="which arm you are assembling")
    parser.add_argument("--baud", type=int, default=BAUD_RATE, choices=sorted(BAUD_CODES),
                        help=f"bus baud rate to set (default {BAUD_RATE})")
    parser.add_argument("--non-interactive", action="store_true",
                        help="configure the one connected servo as --joint, without prompts")
    parser.add_argument("--joint", choices=JOINT_NAMES, help="with --non-interactive: which joint it is")


def run(args: argparse.Namespace) -> int:
    if args.non_interactive and not args.joint:
        raise UsageError("--non-interactive needs --joint NAME", fix="name the joint the connected servo is")
    require_port(args.port)
    joints = [args.joint] if args.non_interactive else list(reversed(JOINT_NAMES))
    try:
        for joint in joints:
            if not args.non_interactive:
                input(f"Connect ONLY the {args.arm}'s {joint} servo (id {JOINT_IDS[joint]} to be) to the "
                      f"controller board, then press Enter.")
            print(f"setup-motors: {configure(args.port, joint, args.baud)}", flush=True)
    except FlywheelError as exc:  # it ran on the bus and failed there: one line, exit 1 (cli/)
        exc.exit_code = EXIT_PARTIAL
        raise
    except (EOFError, KeyboardInterrupt):
        raise PartialFailure("stopped before every servo was set up", where=args.port,
                             fix="run it again: servos already done keep their new ids") from None
    return 0
