"""`teleop-flywheel audit`: dataset audit from numeric columns."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from teleop_flywheel.core.errors import FlywheelError, UsageError
from teleop_flywheel.data.lerobot.dataset import ACTION, STATE, LeRobotDataset
from teleop_flywheel.data.reports.audit import audit, format_text, write_html


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dataset", type=Path, help="LeRobot v3.0 dataset directory")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--html", type=Path, metavar="OUT", help="also write an HTML page with PNG plots")
    parser.add_argument("--state", help=f"state feature (default {STATE})")
    parser.add_argument("--action", help=f"action feature (default {ACTION})")


def run(args: argparse.Namespace) -> int:
    try:  # DatasetError: one line on stderr, exit 2 (cli/)
        report = audit(LeRobotDataset.open(args.dataset), args.state, args.action)
    except ValueError as exc:
        if isinstance(exc, FlywheelError):
            raise
        raise UsageError(str(exc), where=str(args.dataset)) from exc
    print(json.dumps(report.to_dict(), indent=2) if args.json else format_text(report))
    if args.html:
        path = write_html(report, args.html)
        print(f"wrote {path}", file=sys.stderr)
    return 0
