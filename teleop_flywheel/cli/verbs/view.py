"""`teleop-flywheel view`: serve the live session to Foxglove (WebSocket on 127.0.0.1, 3D arms)."""
from __future__ import annotations

import argparse
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--namespace", default="", help="the rig's ROS namespace (as given to the session)")
    parser.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1: this machine only)")
    parser.add_argument("--port", type=int, default=8765, help="WebSocket port (default 8765)")
    parser.add_argument("--layout", type=Path, metavar="FILE",
                        help="write a layout for the cameras the session has to FILE (after 3 s of discovery)")
    parser.add_argument("--seconds", type=float, default=0.0, help="stop after this long (default: until Ctrl-C)")


def run(args: argparse.Namespace) -> int:
    from teleop_flywheel.ros.commands import view  # ROS is imported only when the verb runs

    return view.run(args)
