"""`teleop-flywheel eval BAGS... [--protocol eval.yaml] [--json] [--html OUT] [--simulate OUT]`.

Success-rate tables with N and intervals from rollouts: reads the trial bags, builds the table
(`evaluation.report`) and prints it (or JSON), optionally an HTML page with a bar chart.
`--simulate OUT` first writes synthetic trial bags for the protocol (`evaluation.simulate`).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from teleop_flywheel.core.errors import FlywheelError, UsageError
from teleop_flywheel.evaluation.errors import EvalError
from teleop_flywheel.evaluation.protocol import load_protocol
from teleop_flywheel.evaluation.report import build_report, format_table, read_trial, write_html
from teleop_flywheel.evaluation.simulate import simulate_protocol
from teleop_flywheel.recording.recorder.verdict import DISCARDED_DIR


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("bags", nargs="*", type=Path, help="trial bag directories (or folders of them)")
    parser.add_argument("--protocol", type=Path, help="the protocol YAML the trials must belong to")
    parser.add_argument("--json", action="store_true", help="print the table as JSON")
    parser.add_argument("--html", type=Path, help="write an HTML report (and a PNG bar chart beside it)")
    parser.add_argument("--registry", type=Path, help="lineage registry (default: lineage's default)")
    parser.add_argument("--simulate", type=Path, metavar="OUT",
                        help="run the protocol unattended in the simulator, writing trial bags to OUT, then evaluate")
    parser.add_argument("--seed", type=int, default=0, help="with --simulate: the simulated failures' random seed")


def _expand(paths: list[Path]) -> list[Path]:
    out: list[Path] = []
    for p in paths:
        if p.is_dir() and not (p / "metadata.yaml").exists() and not list(p.glob("*.mcap")):
            out += sorted(d for d in p.iterdir() if d.is_dir() and d.name != DISCARDED_DIR)  # thrown away
        else:
            out.append(p)
    return out


def run(args: argparse.Namespace) -> int:
    try:
        protocol = load_protocol(args.protocol) if args.protocol else None
        bags = _expand(list(args.bags))
        if args.simulate:
            if protocol is None:
                raise EvalError("--simulate needs --protocol")
            bags += simulate_protocol(protocol, args.simulate, seed=args.seed)
        report = build_report([read_trial(b) for b in bags], protocol, args.registry)
    except ValueError as exc:  # EvalError/ProtocolError/BagReadError pass through: one line, exit 2 (cli/)
        if isinstance(exc, FlywheelError):
            raise
        raise UsageError(str(exc)) from exc
    print(json.dumps(report.to_dict(), indent=1, allow_nan=False) if args.json else format_table(report))
    if args.html:
        write_html(report, args.html)
    return 0
