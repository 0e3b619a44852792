"""`teleop-flywheel validate`: PASS/FAIL per episode with reason codes; quarantine rejects."""
from __future__ import annotations

import argparse
import json
import shutil
import sys
from dataclasses import replace
from pathlib import Path

from teleop_flywheel.core.errors import EXIT_OK, EXIT_PARTIAL, EXIT_USAGE, error_line
from teleop_flywheel.core.task_spec import load_task_spec
from teleop_flywheel.data.parallel import add_arguments_to
from teleop_flywheel.data.validate.reasons import Supplied
from teleop_flywheel.data.validate.validator import (
    add_supplied_arguments,
    display,
    load_inputs,
    quarantine,
    summary,
    validate_batch,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", metavar="PATH", help="bag directories, .mcap files or folders of bags")
    parser.add_argument("--json", action="store_true", help="one JSON document instead of text lines")
    parser.add_argument("--quarantine", metavar="DIR", help="move rejected bags to DIR/<reason>/ (never deletes)")
    parser.add_argument("--config", metavar="FILE", help="thresholds YAML (default: the shipped config/validate.yaml)")
    parser.add_argument("--task", metavar="TASK_YAML", default=None,
                        help="task spec (docs/task_spec.md) judging bags recorded without one; its instruction is "
                             "the task of bags without episode metadata. A bag recorded under another spec is an "
                             "error line")
    parser.add_argument("--trust-operator", action="store_true",
                        help="keep episodes whose outcome disagrees with the spec's success predicate "
                             "(OUTCOME_MISMATCH becomes a warning)")
    add_supplied_arguments(parser)
    add_arguments_to(parser)


def run(args: argparse.Namespace) -> int:
    qroot = Path(args.quarantine) if args.quarantine else None
    spec = load_task_spec(args.task) if args.task else None
    cfg, paths, errors = load_inputs(args.config, args.paths, "validate", qroot)
    if args.trust_operator:
        cfg = replace(cfg, trust_operator=True)
    supplied = Supplied(task=spec.instruction if spec else None, outcome=args.outcome, task_spec=spec)
    reports, fits = validate_batch(paths, cfg, args.workers, args.executor, None if args.json else "validate",
                                   supplied)
    moved_errors: list[str] = []
    if qroot is not None:  # deepest first: a bag named inside another moves before its parent
        for r in sorted((r for r in reports if not r.passed and r.error is None),
                        key=lambda r: -len(Path(r.path).parts)):
            try:
                quarantine(r, qroot)
            except (OSError, ValueError, shutil.Error) as exc:
                moved_errors.append(f"quarantine: {display(r.path)}: {exc}")
    s = summary(reports, fits)
    unprocessed = [r.error for r in reports if r.error is not None] + moved_errors
    if args.json:
        print(json.dumps({"episodes": [r.to_dict() for r in reports], "summary": s,
                          "errors": [display(e) for e in errors + unprocessed]}, indent=2))
    else:
        for r in reports:
            if r.error is None:
                print(r.line() + (f" -> {display(r.quarantined_to)}" if r.quarantined_to else ""))
        breakdown = ", ".join(f"{c} {n}" for c, n in s["reasons"].items())
        print(f"{s['rejected']}/{s['episodes']} rejected ({100 * s['rejection_rate']:.1f} %)"
              + (f": {breakdown}" if breakdown else "")
              + (f"; {s['warned']} passed with warnings: " + ", ".join(f"{c} {n}" for c, n in s["warnings"].items())
                 if s["warned"] else ""))
    if s["episodes"] and not s["rejected"]:
        print("WARNING: nothing was rejected. On a real recording session a 0 % rejection rate means the "
              "checks are not checking: look at the thresholds in config/validate.yaml.", file=sys.stderr)
    for e in unprocessed:  # one line each, the last lines on stderr
        print(error_line("validate", display(e)), file=sys.stderr)
    if not s["episodes"]:
        return EXIT_USAGE
    return EXIT_PARTIAL if errors or unprocessed else EXIT_OK
