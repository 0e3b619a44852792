"""`teleop-flywheel replay`: replay a bag over Foxglove WebSocket or onto the ROS graph."""
from __future__ import annotations

import argparse
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("bag", type=Path, help="bag directory or .mcap file")
    parser.add_argument("--foxglove", action="store_true", help="serve over the Foxglove WebSocket protocol")
    parser.add_argument("--ros", action="store_true", help="republish onto the ROS graph with original timing and QoS")
    parser.add_argument("--rate", type=float, default=1.0, help="playback speed factor (default 1.0)")
    parser.add_argument(
        "--host", default="127.0.0.1", help="Foxglove bind address (default 127.0.0.1: this machine only)"
    )
    parser.add_argument("--port", type=int, default=8765, help="Foxglove port (default 8765)")
    parser.add_argument("--loop", action="store_true", help="start over at the end")
    parser.add_argument("--paused", action="store_true", help="(Foxglove) start paused; press play in the app")
    parser.add_argument("--layout", type=Path, metavar="FILE",
                        help="(Foxglove) write a layout for this bag's cameras to FILE (import it in the app)")
    wait = parser.add_mutually_exclusive_group()
    wait.add_argument("--wait-for-subscribers", type=int, default=None, metavar="N",
                      help="(ROS) start once every topic has N subscribers (default: once any subscriber has "
                           "matched and discovery has settled)")
    wait.add_argument("--no-wait", action="store_true", help="(ROS) start at once, subscribers or not")
    parser.add_argument("--wait-timeout", type=float, default=0.0, metavar="S",
                        help="(ROS) start anyway after S seconds of waiting (default 0: wait until Ctrl-C)")


def run(args: argparse.Namespace) -> int:
    from teleop_flywheel.ros.commands import replay  # ROS is imported only when the verb runs

    return replay.run(args)
