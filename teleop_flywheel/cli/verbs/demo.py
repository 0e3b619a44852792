"""`teleop-flywheel demo`: the main job on simulated hardware: record, validate, convert, audit."""
from __future__ import annotations

import argparse
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from teleop_flywheel.ros.commands.demo import MIN_SECONDS  # the scripted take's length: the demo's own, with ROS

    parser.add_argument("--out", type=Path, required=True, help="output folder (must not exist, or be empty)")
    parser.add_argument("--episodes", type=int, default=6, help="episodes to record (default 6)")
    parser.add_argument("--seconds", type=float, default=8.0,
                        help=f"seconds per episode (default 8, at least {MIN_SECONDS:g})")
    parser.add_argument("--codec", default="libsvtav1", choices=("libsvtav1", "h264"), help="dataset video codec")


def run(args: argparse.Namespace) -> int:
    from teleop_flywheel.ros.commands import demo  # ROS is imported only when the verb runs

    return demo.run(args)
