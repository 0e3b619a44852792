"""`teleop-flywheel console`: operator console for a live session."""
from __future__ import annotations

import argparse

from teleop_flywheel.core.topics import RECORDER_NODE, TELEOP_NODE


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--session", default="", help="session name shown in the header")
    parser.add_argument("--recorder", default=RECORDER_NODE, help="recorder node name (default /recorder)")
    parser.add_argument("--teleop", default=TELEOP_NODE, help="teleop node name (default /teleop)")
    parser.add_argument("--refresh-hz", type=float, default=5.0, help="screen refresh rate")


def run(args: argparse.Namespace) -> int:
    from teleop_flywheel.ros.commands import console  # ROS is imported only when the verb runs

    return console.run(args)
