"""`teleop-flywheel doctor DATASET [--repair] [--json]`: is a dataset consistent, and if not, why and
what can be repaired.

It reports (`data/lerobot/consistency.py`): an append interrupted by a crash (a journal or staging
directory beside the dataset), temp directories of older converters, orphan data/video files, info
totals or stats that disagree with the episodes table, and what cannot be repaired (an unreadable
table, a referenced file missing or cut). With `--repair` (the consent) it applies the repairs
that lose nothing — roll the append forward or back, move orphans to `<DATASET>.orphans/`,
recompute totals and stats — under the dataset's lock, so never beside a running convert.

Exit status: 0 consistent (after repair, if asked), 1 problems remain, 2 not a dataset / usage.
"""
from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from teleop_flywheel.core.errors import EXIT_USAGE, FlywheelError, UsageError
from teleop_flywheel.data.lerobot import commit
from teleop_flywheel.data.lerobot.consistency import problems, repair
from teleop_flywheel.data.validate import display


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dataset", type=Path, help="LeRobot v3.0 dataset directory (made by convert)")
    parser.add_argument("--repair", action="store_true",
                        help="apply the repairs that lose nothing (roll an interrupted append forward/back, move "
                             "orphan files aside, recompute totals and stats)")
    parser.add_argument("--json", action="store_true", help="print the findings as JSON")


def run(args: argparse.Namespace) -> int:
    root = Path(os.path.abspath(args.dataset))
    if not root.exists() and not commit.pending(root):
        raise UsageError("no such dataset (and no interrupted append beside it)", where=display(root),
                         fix="give a dataset's root folder, the one `teleop-flywheel convert --out` wrote")
    done: list[str] = []
    try:
        with commit.locked_dataset(root):
            if args.repair:
                done, found = repair(root)
            else:
                found = problems(root)
    except FlywheelError as exc:  # one line on stderr, exit 2 (cli.py)
        exc.exit_code = EXIT_USAGE
        raise
    if not found and not done and not (root / "meta" / "info.json").is_file():
        raise UsageError("not a LeRobot dataset (no meta/info.json)", where=display(root),
                         fix="give a dataset's root folder, the one `teleop-flywheel convert --out` wrote")
    if args.json:
        print(json.dumps({"dataset": display(root), "repaired": done, "problems": [p.to_dict() for p in found],
                          "consistent": not found}, indent=2))
    else:
        for line in done:
            print(f"repaired: {display(line)}")
        for p in found:
            fix = f"\n    repair: {p.repair} (run with --repair)" if p.repair else \
                "\n    not repairable here: the episodes named are lost; re-convert their bags into a new dataset"
            print(f"problem: {display(p.detail)}{fix}")
        print(f"{display(root)}: " + ("consistent" if not found else f"{len(found)} problem(s)"
                                     + (f", {sum(1 for p in found if p.repair)} repairable with --repair"
                                        if not args.repair else "")))
    return 0 if not found else 1
