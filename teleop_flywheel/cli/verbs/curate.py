"""`teleop-flywheel curate`: per-episode scores, coverage and where to send operators."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from teleop_flywheel.core.errors import FlywheelError, UsageError
from teleop_flywheel.data.curation.curate import (
    DURATION_TOLERANCE,
    TARGETS,
    curate,
    drop_plan,
    format_drop_plan,
    format_text,
    write_plot,
)
from teleop_flywheel.data.curation.stored_scores import store
from teleop_flywheel.data.curation.weights import (
    HALF_LIFE_DAYS,
    INTERVENTION_WEIGHT,
    WEIGHTS_PATH,
    WeightRule,
    write_weights,
)
from teleop_flywheel.data.lerobot.dataset import LeRobotDataset


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dataset", type=Path, help="LeRobot v3.0 dataset directory")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument(
        "--plot", type=Path, metavar="OUT", help="write the score scatter matrix PNG (and <OUT>_starts.png)"
    )
    parser.add_argument("--targets", type=int, default=TARGETS, help=f"start poses to suggest (default {TARGETS})")
    parser.add_argument(
        "--box",
        choices=("visited", "available"),
        default="visited",
        help="joint-range box for target poses: ranges visited in the data (default) or available limits",
    )
    parser.add_argument("--vary", help="comma-separated joints the target poses vary (others at the median start)")
    parser.add_argument(
        "--duration-tolerance",
        type=float,
        default=DURATION_TOLERANCE,
        help=f"flag episodes more than this factor off their task median (default {DURATION_TOLERANCE})",
    )
    parser.add_argument("--intervention-weight", type=float, default=INTERVENTION_WEIGHT,
                        help=f"weight of episodes with an intervention (default {INTERVENTION_WEIGHT}; seeds: 2-3)")
    parser.add_argument("--half-life", type=float, default=HALF_LIFE_DAYS,
                        help=f"recency half-life in days (default {HALF_LIFE_DAYS:g})")
    parser.add_argument("--weights-out", type=Path, help=f"where to write the weights (default DATASET/{WEIGHTS_PATH})")
    parser.add_argument("--no-weights", action="store_true", help="do not write the sample-weights file")
    parser.add_argument("--store", action="store_true",
                        help="write the scores into the dataset's episodes table (atomically; convert does this at "
                             "every append) so `manifest create --filter` can use them")
    parser.add_argument("--drop-plan", action="store_true",
                        help="only say which episodes --filter would drop, why, and the start-state coverage lost")
    parser.add_argument("--filter", action="append", default=[], metavar="EXPR",
                        help="with --drop-plan: the episodes to keep, as for `manifest create --filter`, e.g. "
                             "\"jerk_z < 2 and duration_ratio between 0.67 and 1.5 and outcome == success\"")


def run(args: argparse.Namespace) -> int:
    if args.filter and not args.drop_plan:
        raise UsageError("--filter is for --drop-plan", fix="add --drop-plan, or use `manifest create --filter`")
    if args.drop_plan:
        if not args.filter:
            raise UsageError("--drop-plan needs --filter EXPR", fix="e.g. --filter 'jerk_z < 2'")
        plan = drop_plan(LeRobotDataset.open(args.dataset), args.filter)  # FilterError/DatasetError: exit 2
        print(json.dumps(plan.to_dict(), indent=2) if args.json else format_drop_plan(plan))
        return 0
    if args.store:
        for rel in store(args.dataset):
            print(f"wrote the scores into {args.dataset / rel}", file=sys.stderr)
    try:
        rule = WeightRule(args.intervention_weight, args.half_life)
        ds = LeRobotDataset.open(args.dataset)
        vary = [v.strip() for v in args.vary.split(",")] if args.vary else None
        report = curate(ds, rule, args.targets, args.box, args.duration_tolerance, vary)
    except ValueError as exc:  # a DatasetError as it is; a bad option value as a usage error (cli/ prints it)
        if isinstance(exc, FlywheelError):
            raise
        raise UsageError(str(exc)) from exc
    print(json.dumps(report.to_dict(), indent=2) if args.json else format_text(report))
    if not args.no_weights:
        print(f"wrote {write_weights(ds, report.episodes, report.rule, args.weights_out)}", file=sys.stderr)
    if args.plot:
        for path in write_plot(report, args.plot):
            print(f"wrote {path}", file=sys.stderr)
    return 0
