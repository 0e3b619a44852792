"""`teleop-flywheel`: one command, many subcommands.

Each subcommand lives in the module that owns the capability and exposes two functions:
`add_arguments(parser)` and `run(args) -> int`; a module that sets `PASSTHROUGH = "name"` gets the
arguments after the first `--` unparsed, as the list `args.name` (for another tool's parser).
Modules are imported only when their subcommand runs, so `teleop-flywheel validate` never imports
rclpy, torch or OpenCV.

One voice for every subcommand (`core/errors.py`): an error is ONE line, the last on stderr,
`teleop-flywheel <command>: error: <what>, <where> (<how to fix>)`; argparse's usage errors too.
A `FlywheelError` or `OSError` that ends a command is printed that way here, once, with its exit
code (0 ran to completion, 1 some inputs could not be processed, 2 usage error or nothing could be
read); `--debug` (or TELEOP_FLYWHEEL_DEBUG=1) prints the traceback above it. Anything else is a
bug: its traceback, then the same one line asking for a report.
"""
from __future__ import annotations

import argparse
import errno
import importlib
import os
import sys
import traceback
from collections.abc import Sequence
from typing import NoReturn

from teleop_flywheel import __version__
from teleop_flywheel.core.errors import EXIT_CODES, EXIT_PARTIAL, EXIT_USAGE, PROG, FlywheelError, error_line

# name -> (module, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "find-port": ("teleop_flywheel.hw.bringup.find_port", "which serial port is the arm on (unplug it and see)"),
    "setup-motors": ("teleop_flywheel.hw.bringup.setup_motors", "give factory-new servos their SO-101 ids and baud"),
    "calibrate": ("teleop_flywheel.hw.bringup.calibrate", "LeRobot's SO-101 calibration: homing offsets and ranges"),
    "find-cameras": ("teleop_flywheel.hw.bringup.find_cameras", "list V4L2 cameras, their modes, one still each"),
    "sim-bus": (
        "teleop_flywheel.hw.feetech.sim.serve",
        "serve a simulated SO-101 arm (6 STS3215) on a pseudo-terminal",
    ),
    "mirror": (
        "teleop_flywheel.ros.commands.mirror",
        "leader→follower mirroring session; prints loop rate and tracking error",
    ),
    "run": (
        "teleop_flywheel.ros.commands.run",
        "start a session graph (teleop, rollout, record, sim), one process per node, supervised",
    ),
    "demo": (
        "teleop_flywheel.ros.commands.demo",
        "the main job on simulated hardware: record, validate, convert, audit",
    ),
    "info": ("teleop_flywheel.data.reports.bag_info", "describe a bag like `ros2 bag info`, plus episode metadata"),
    "recover": (
        "teleop_flywheel.recording.mcap.recover",
        "rebuild an indexed MCAP and metadata.yaml from a crashed bag",
    ),
    "migrate": (
        "teleop_flywheel.data.migrate",
        "upgrade a bag, manifest or dataset in an older format into a copy in the current one",
    ),
    "validate": (
        "teleop_flywheel.data.validate.validator",
        "PASS/FAIL per episode with reason codes; quarantine rejects",
    ),
    "review": (
        "teleop_flywheel.data.review.server",
        "a local page to look at the rejections: video and plots at the failing instant, confirm or overrule",
    ),
    "convert": ("teleop_flywheel.data.convert.converter", "bags → LeRobot v3.0 dataset (validated episodes only)"),
    "export": (
        "teleop_flywheel.data.formats.export",
        "a dataset or manifest's episodes in another stack's format (--to hdf5-aloha)",
    ),
    "import": (
        "teleop_flywheel.data.formats.import_dataset",
        "another stack's episodes as a LeRobot v3.0 dataset (--from hdf5-aloha)",
    ),
    "ingest": (
        "teleop_flywheel.data.convert.ingest_loop",
        "keep a dataset current: validate, quarantine or convert every closed bag",
    ),
    "doctor": ("teleop_flywheel.data.convert.doctor", "is a dataset consistent; explain and (--repair) repair it"),
    "audit": ("teleop_flywheel.data.reports.audit", "dataset audit from numeric columns"),
    "task": ("teleop_flywheel.data.reports.task_init", "task spec: `task init` writes a template from a dataset"),
    "curate": ("teleop_flywheel.data.curation.curate", "per-episode scores, coverage and where to send operators"),
    "manifest": (
        "teleop_flywheel.data.provenance.manifest",
        "freeze or verify a manifest of content-addressed episodes",
    ),
    "lineage": ("teleop_flywheel.data.provenance.lineage", "which manifest trained which checkpoint"),
    "train": (
        "teleop_flywheel.training.loop",
        "train a LeRobot policy on a manifest's episodes, weighted; register the checkpoint",
    ),
    "card": ("teleop_flywheel.data.reports.card", "write a data card (README.md) beside a dataset"),
    "stats": ("teleop_flywheel.data.reports.flywheel_stats", "intervention rates per checkpoint/week/label/operator"),
    "eval": ("teleop_flywheel.evaluation.command", "success-rate tables with N and intervals from rollouts"),
    "eval watch": (
        "teleop_flywheel.ros.commands.eval_watch",
        "evaluate every checkpoint that appears, unattended in the simulator, against the incumbent",
    ),
    "rollout": (
        "teleop_flywheel.evaluation.rollout",
        "stage a checkpoint across rigs: advance, hold or roll back on the recorded numbers",
    ),
    "replay": ("teleop_flywheel.ros.commands.replay", "replay a bag over Foxglove WebSocket or onto the ROS graph"),
    "view": (
        "teleop_flywheel.ros.session.foxglove.view",
        "serve the live session to Foxglove (WebSocket on 127.0.0.1, 3D arms)",
    ),
    "console": ("teleop_flywheel.ros.commands.console", "operator console for a live session"),
}


class Parser(argparse.ArgumentParser):
    """argparse with the project's error line (usage above it, exit 2) and the exit codes in --help."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("epilog", EXIT_CODES)
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        command = self.prog.removeprefix(PROG).strip() or PROG
        print(error_line(command, message, fix=f"see {self.prog} --help"), file=sys.stderr)
        raise SystemExit(EXIT_USAGE)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog=PROG, description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_module, help_text) in SUBCOMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    return parser


def command_parser(name: str) -> tuple[argparse.ArgumentParser, object]:
    """The parser of one subcommand (its module's arguments plus --debug) and the module."""
    module_name, help_text = SUBCOMMANDS[name]
    module = importlib.import_module(module_name)
    parser = Parser(prog=f"{PROG} {name}", description=help_text)
    module.add_arguments(parser)  # type: ignore[attr-defined]
    parser.add_argument("--debug", action="store_true",
                        help="on an error, print the Python traceback above the one-line message")
    return parser, module


def _debug(args: argparse.Namespace | None) -> bool:
    return bool(getattr(args, "debug", False)) or os.environ.get("TELEOP_FLYWHEEL_DEBUG", "") not in ("", "0")


def _exit_code(exc: BaseException) -> int:
    if isinstance(exc, FlywheelError):
        return int(exc.exit_code)
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EIO):
        return EXIT_PARTIAL  # it ran and the disk failed under it
    return EXIT_USAGE


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if not argv or argv[0] not in SUBCOMMANDS:
            build_parser().parse_args(argv or ["--help"])
            return EXIT_USAGE
        # Two-word commands (`eval watch`) before the one-word command they start with.
        two = " ".join(argv[:2])
        name, rest = (two, argv[2:]) if len(argv) > 1 and two in SUBCOMMANDS else (argv[0], argv[1:])
        parser, module = command_parser(name)
        passthrough = getattr(module, "PASSTHROUGH", None)
        extra: list[str] = []
        if passthrough and "--" in rest:
            rest, extra = rest[:rest.index("--")], rest[rest.index("--") + 1:]
        args = parser.parse_args(rest)
        if passthrough:
            setattr(args, passthrough, extra)
    except SystemExit as exc:  # --help, --version, a usage error (its line is printed)
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else EXIT_USAGE)
    try:
        return int(module.run(args) or 0)  # type: ignore[attr-defined]
    except KeyboardInterrupt:
        return 130
    except (FlywheelError, OSError) as exc:
        sys.stdout.flush()
        if _debug(args):
            traceback.print_exc()
        for line in getattr(exc, "details", ()):
            print(line, file=sys.stderr)
        print(error_line(name, exc), file=sys.stderr, flush=True)
        return _exit_code(exc)
    except Exception as exc:  # a bug, not a user mistake: the traceback, then the one line
        sys.stdout.flush()
        traceback.print_exc()
        print(error_line(name, f"internal error: {type(exc).__name__}: {exc}",
                         fix="a bug: please report it with the traceback above"), file=sys.stderr, flush=True)
        return EXIT_PARTIAL


if __name__ == "__main__":
    sys.exit(main())
