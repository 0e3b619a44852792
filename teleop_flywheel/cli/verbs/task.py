"""`teleop-flywheel task`: task spec: `task init` writes a template from a dataset."""
from __future__ import annotations

import argparse
from pathlib import Path

import yaml

from teleop_flywheel.core.calibration import load_calibration
from teleop_flywheel.core.errors import FileExistsRefused, UsageError
from teleop_flywheel.core.files import create_exclusive
from teleop_flywheel.core.task_spec import parse_task_spec
from teleop_flywheel.data.lerobot.dataset import LeRobotDataset
from teleop_flywheel.data.reports.audit import audit
from teleop_flywheel.data.reports.task_init import render, template_of


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True)
    i = sub.add_parser("init", help="write a commented task spec template from a dataset's audit")
    i.add_argument("dataset", type=Path, help="LeRobot v3.0 dataset directory")
    i.add_argument("--out", type=Path, required=True, help="task spec YAML to write (never overwritten)")
    i.add_argument("--calibration", type=Path, metavar="FILE",
                   help="the follower's calibration (ours or LeRobot's JSON): puts the gripper in radians")
    i.add_argument("--state", help="state feature (default observation.state)")


def run(args: argparse.Namespace) -> int:
    if args.out.exists() or args.out.is_symlink():
        raise UsageError("task spec already exists", where=str(args.out), fix="choose a new name: it is never "
                         "overwritten")
    cal = load_calibration(args.calibration) if args.calibration else None
    ds = LeRobotDataset.open(args.dataset)
    text = render(template_of(ds, audit(ds, args.state), cal))
    parse_task_spec(yaml.safe_load(text), str(args.out))  # what is written must be a spec
    try:
        create_exclusive(args.out, text)
    except FileExistsRefused as exc:
        raise UsageError(str(exc), fix="choose a new name") from None
    print(f"wrote {args.out}")
    return 0
