"""`teleop-flywheel run`: start a session graph (teleop, rollout, record, sim), one process per node, supervised."""
from __future__ import annotations

import argparse
from pathlib import Path

from teleop_flywheel.ros.session.launch.graph import KINDS, LAUNCH_ARGUMENTS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("kind", choices=KINDS, help="session graph to start")
    parser.add_argument("--param-file", action="append", default=[], type=Path,
                        help="ROS 2 parameter YAML (node: {ros__parameters: ...}); repeatable")
    parser.add_argument("--arg", action="append", default=[], metavar="NAME=VALUE",
                        help=f"session argument, as for the launch files: {', '.join(LAUNCH_ARGUMENTS)}")
    parser.add_argument("--seconds", type=float, default=0.0, help="stop after this long (default: until Ctrl-C)")
    parser.add_argument("--protocol", type=Path, metavar="EVAL_YAML",
                        help="walk an evaluation protocol: one bag per trial, then the results table")
    parser.add_argument("--unattended", action="store_true",
                        help="with --protocol on kind sim: nobody at the keys; each checkpoint runs in its condition's "
                             "simulated world and the machine check judges the recorded final state")
    parser.add_argument("--resume", action="store_true",
                        help="with --protocol: trials of this protocol already in output_dir count as done")


def run(args: argparse.Namespace) -> int:
    from teleop_flywheel.ros.commands import run  # ROS is imported only when the verb runs

    return run.run(args)
