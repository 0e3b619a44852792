"""`teleop-flywheel mirror`: leader→follower mirroring session; prints loop rate and tracking error."""
from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seconds", type=float, default=10.0, help="how long to mirror (default 10)")
    parser.add_argument("--rate-hz", type=float, default=200.0, help="bus loop rate of both drivers (default 200)")
    parser.add_argument("--report-every", type=float, default=2.0, help="seconds between progress lines")
    parser.add_argument("--settle", type=float, default=1.0,
                        help="seconds after start excluded from the error (the follower first travels to the leader)")
    parser.add_argument("--max-error-deg", type=float, default=20.0,
                        help="fail (exit 1) when any joint's mean tracking error exceeds this")
    parser.add_argument("--json", action="store_true", help="print the final summary as JSON")
    parser.add_argument("--sim", choices=("process", "thread"), default="process",
                        help="simulated arms as `sim-bus` subprocesses (default: uses a second core) or threads")


def run(args: argparse.Namespace) -> int:
    from teleop_flywheel.ros.commands import mirror  # ROS is imported only when the verb runs

    return mirror.run(args)
