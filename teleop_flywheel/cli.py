"""`teleop-flywheel`: one command, many subcommands.

Each subcommand lives in the module that owns the capability and exposes two functions:
`add_arguments(parser)` and `run(args) -> int`. Modules are imported only when their
subcommand runs, so `teleop-flywheel validate` never imports rclpy, torch or OpenCV.
"""
from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from teleop_flywheel import __version__

# name -> (module, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "find-port": ("teleop_flywheel.hw.bringup.find_port", "which serial port is the arm on (unplug it and see)"),
    "setup-motors": ("teleop_flywheel.hw.bringup.setup_motors", "give factory-new servos their SO-101 ids and baud"),
    "calibrate": ("teleop_flywheel.hw.bringup.calibrate", "LeRobot's SO-101 calibration: homing offsets and ranges"),
    "find-cameras": ("teleop_flywheel.hw.bringup.find_cameras", "list V4L2 cameras, their modes, one still each"),
    "sim-bus": ("teleop_flywheel.hw.feetech.sim_cli", "serve a simulated SO-101 arm (6 STS3215) on a pseudo-terminal"),
    "mirror": ("teleop_flywheel.ros.session.mirror", "leader→follower mirroring session; prints loop rate and tracking error"),
    "run": ("teleop_flywheel.ros.session.runner", "start a session graph (teleop, rollout, record, sim), one process per node, supervised"),
    "demo": ("teleop_flywheel.ros.session.demo", "the main job on simulated hardware: record, validate, convert, audit"),
    "info": ("teleop_flywheel.recording.info", "describe a bag like `ros2 bag info`, plus episode metadata"),
    "recover": ("teleop_flywheel.recording.recover", "rebuild an indexed MCAP and metadata.yaml from a crashed bag"),
    "validate": ("teleop_flywheel.data.validate", "PASS/FAIL per episode with reason codes; quarantine rejects"),
    "convert": ("teleop_flywheel.data.convert", "bags → LeRobot v3.0 dataset (validated episodes only)"),
    "doctor": ("teleop_flywheel.data.doctor", "is a dataset consistent; explain and (--repair) repair it"),
    "audit": ("teleop_flywheel.data.audit", "dataset audit from numeric columns"),
    "curate": ("teleop_flywheel.data.curate", "per-episode scores, coverage and where to send operators"),
    "manifest": ("teleop_flywheel.data.manifest", "freeze or verify a manifest of content-addressed episodes"),
    "lineage": ("teleop_flywheel.data.lineage", "which manifest trained which checkpoint"),
    "card": ("teleop_flywheel.data.card", "write a data card (README.md) beside a dataset"),
    "stats": ("teleop_flywheel.data.stats", "intervention rates per checkpoint/week/label/operator"),
    "eval": ("teleop_flywheel.evaluation.cli", "success-rate tables with N and intervals from rollouts"),
    "replay": ("teleop_flywheel.ros.session.playback", "replay a bag over Foxglove WebSocket or onto the ROS graph"),
    "view": ("teleop_flywheel.ros.session.view", "serve the live session to Foxglove (WebSocket on 127.0.0.1, 3D arms)"),
    "console": ("teleop_flywheel.ros.session.console", "operator console for a live session"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="teleop-flywheel", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"teleop-flywheel {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_module, help_text) in SUBCOMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in SUBCOMMANDS:
        build_parser().parse_args(argv or ["--help"])
        return 2
    name, rest = argv[0], argv[1:]
    module_name, help_text = SUBCOMMANDS[name]
    module = importlib.import_module(module_name)
    parser = argparse.ArgumentParser(prog=f"teleop-flywheel {name}", description=help_text)
    module.add_arguments(parser)
    args = parser.parse_args(rest)
    try:
        return int(module.run(args) or 0)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
