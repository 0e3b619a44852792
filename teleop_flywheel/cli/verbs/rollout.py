"""`teleop-flywheel rollout`: stage a checkpoint across rigs: advance, hold or roll back on the recorded numbers."""
from __future__ import annotations

import argparse
import datetime as dt
import json
from pathlib import Path

from teleop_flywheel.core.errors import FileExistsRefused, UsageError
from teleop_flywheel.core.files import create_exclusive
from teleop_flywheel.data.provenance.episode_sources import records_for
from teleop_flywheel.evaluation.rollout import METRICS, Plan, decide, load_plan, parse_stages


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True)
    p = sub.add_parser("plan", help="write a staged rollout plan for a checkpoint")
    p.add_argument("checkpoint", help="the candidate checkpoint id (as the policy node tags its commands)")
    p.add_argument("--rigs", required=True, help="rig ids in rollout order, comma-separated (rig_a,rig_b,...)")
    p.add_argument("--stages", default="1,all", help="cumulative rig counts per stage, e.g. 1,3,all (default 1,all)")
    p.add_argument("--incumbent", help="the checkpoint to beat (default: the latest other one the rigs recorded)")
    p.add_argument("--metric", choices=METRICS, default="intervention",
                   help="intervention: episodes with a takeover; failure: failed outcomes (default intervention)")
    p.add_argument("--min-episodes", type=int, default=30, help="episodes a stage needs before it can advance")
    p.add_argument("--alpha", type=float, default=0.05, help="Fisher test level for rolling back (default 0.05)")
    p.add_argument("--margin", type=float, default=0.05,
                   help="non-inferiority margin on the rate (default 0.05: at most 5 points worse)")
    p.add_argument("--out", type=Path, required=True, help="plan JSON to write (never overwritten)")
    s = sub.add_parser("status", help="advance, hold or roll back, from the fleet's recorded episodes")
    s.add_argument("plan", type=Path, help="plan JSON written by rollout plan")
    s.add_argument("episodes", nargs="+", type=Path, help="bag folders, or a LeRobot dataset made by convert")
    s.add_argument("--json", action="store_true", help="print the decision as JSON")


def run(args: argparse.Namespace) -> int:
    if args.action == "plan":
        rigs = tuple(r.strip() for r in args.rigs.split(",") if r.strip())
        if not rigs or len(set(rigs)) != len(rigs):
            raise UsageError(f"--rigs {args.rigs!r}: give distinct rig ids, comma-separated")
        if args.min_episodes < 1 or not 0 < args.alpha < 1 or not 0 <= args.margin < 1:
            raise UsageError("--min-episodes must be >= 1, --alpha in (0, 1), --margin in [0, 1)")
        plan = Plan(args.checkpoint, args.incumbent, rigs, parse_stages(args.stages, len(rigs)), args.metric,
                    args.min_episodes, args.alpha, args.margin)
        doc = {**plan.to_dict(), "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds")}
        try:
            create_exclusive(args.out, json.dumps(doc, indent=1) + "\n")
        except FileExistsRefused:
            raise UsageError("plan already exists", where=str(args.out), fix="choose a new name") from None
        print(f"wrote {args.out}: {plan.checkpoint} over " + " -> ".join(
            ", ".join(plan.stage_rigs(i)) for i in range(len(plan.stages))))
        return 0
    plan = load_plan(args.plan)
    decision = decide(plan, records_for(args.episodes), ", ".join(map(str, args.episodes)))
    if args.json:
        print(json.dumps({"checkpoint": plan.checkpoint, "metric": plan.metric, **decision.to_dict()}, indent=2))
    else:
        print(f"{plan.checkpoint}: stage {decision.stage + 1} of {len(plan.stages)} ({', '.join(decision.rigs)}): "
              f"{decision.decision.upper()}: {decision.reason}")
        for rig in plan.rigs:
            print(f"  {rig:<12} candidate {decision.candidate.rigs.get(rig, 0):>4} episodes   "
                  f"incumbent {decision.incumbent.rigs.get(rig, 0):>4}")
    return 0
