"""`teleop-flywheel migrate`: upgrade a bag, manifest or dataset in an older format into a copy in the current one."""
from __future__ import annotations

import argparse
from pathlib import Path

from teleop_flywheel.core.errors import FlywheelError
from teleop_flywheel.data.migrate import migrate
from teleop_flywheel.recording.mcap.exceptions import MigrateError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", type=Path, help="a bag (directory or .mcap), a manifest (.json) or a LeRobot dataset")
    parser.add_argument("--output", "-o", type=Path, default=None,
                        help="where to write the upgraded copy (default: beside PATH, <name>.migrated)")
    parser.add_argument("--dataset", type=Path, default=None,
                        help="a manifest's dataset, if not where the manifest says it is")


def run(args: argparse.Namespace) -> int:
    try:
        result = migrate(args.path, args.output, args.dataset)
    except (ValueError, KeyError, TypeError) as exc:  # a FlywheelError as it is; malformed JSON etc. named
        if isinstance(exc, FlywheelError):
            raise
        raise MigrateError(f"{args.path}: cannot read it as a bag, manifest or dataset: {exc}") from exc
    if result.copy is None:
        print(f"{result.path}: already in the current format; nothing to migrate, nothing written")
        return 0
    for line in result.changes:
        print(line)
    for note in result.notes:
        print(f"note: {note}")
    print(f"wrote {result.copy}; the original {result.path} is unchanged")
    return 0
