"""`teleop-flywheel stats`: intervention rates per checkpoint/week/label/operator."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from teleop_flywheel.core.errors import UsageError
from teleop_flywheel.data.reports.flywheel_stats import format_text, stats_for
from teleop_flywheel.data.reports.throughput import BREAK_S


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", type=Path, help="a LeRobot dataset, or bag directories / folders of bags")
    parser.add_argument("--clusters", type=int, default=4, help="start-state clusters (k-means k, default 4)")
    parser.add_argument("--break-s", type=float, default=BREAK_S,
                        help=f"a gap this long between one operator's episodes at a station ends a shift "
                             f"(default {BREAK_S:g} s)")
    parser.add_argument("--json", action="store_true", help="print the statistics as JSON")


def run(args: argparse.Namespace) -> int:
    if args.break_s <= 0:
        raise UsageError(f"--break-s must be > 0, got {args.break_s:g}")
    stats = stats_for(args.paths, args.clusters, args.break_s)  # DatasetError: one line, exit 2 (cli/)
    print(json.dumps(stats.to_dict(), indent=2) if args.json else format_text(stats))
    return 0
