"""`teleop-flywheel eval watch CHECKPOINTS_DIR --protocol eval.yaml [--out DIR] [--once]`: CI for checkpoints.

Every checkpoint directory that appears under CHECKPOINTS_DIR — or that a lineage entry names
(its `training.path`, as `train` registers it) — is evaluated unattended in the simulator against
the incumbent (the protocol's first checkpoint): one `run sim --unattended` walk per candidate
(`evaluation.watch` says under which protocol), trial bags in `OUT/<checkpoint>/bags/`, its table
printed and written as `OUT/<checkpoint>/report.html`, its figures (N, Wilson intervals, Fisher
and Holm against the incumbent) appended to the checkpoint's lineage entry (`lineage which`
shows them) and to `OUT/index.html`. A candidate significantly worse than the incumbent is
flagged: a `FLAGGED` line, and exit code 1 once the look is over. `--once` evaluates what is
there and exits; without it the folder is looked at every `--interval` seconds until Ctrl-C, a
checkpoint being taken once its files have not changed for `SETTLED_S`. A walk that stops
half-way is resumed at the next look (its trials are kept).
"""
from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

from teleop_flywheel.core.errors import EXIT_PARTIAL, PROG, UsageError, error_line
from teleop_flywheel.core.files import inside
from teleop_flywheel.core.signals import SignalStop
from teleop_flywheel.data.provenance import default_registry
from teleop_flywheel.data.provenance.lineage import Registry, add_evaluation
from teleop_flywheel.evaluation.errors import ProtocolError
from teleop_flywheel.evaluation.protocol import load_protocol
from teleop_flywheel.evaluation.report import build_report, read_trial, write_html
from teleop_flywheel.evaluation.watch import (
    Candidate,
    discover,
    evaluated,
    figures,
    incumbent_of,
    slug,
    write_candidate_protocol,
    write_index,
)
from teleop_flywheel.recording.recorder.verdict import DISCARDED_DIR

SETTLED_S = 10.0  # a checkpoint directory this long unchanged is complete (watching, not --once)


def _evaluate(args: argparse.Namespace, protocol_path: Path, candidate: Candidate, registry: Path) -> bool | None:
    """One candidate's walk, table, report and lineage figures; True if flagged, None if the walk failed."""
    from teleop_flywheel.ros.commands import run as run_command

    protocol = load_protocol(protocol_path)
    out = inside(args.out, slug(candidate.id))  # a folder per candidate, never beside --out
    derived = load_protocol(write_candidate_protocol(protocol, candidate, out))
    bags = out / "bags"
    print(f"eval watch: evaluating {candidate.id} ({candidate.directory}) against {incumbent_of(protocol)}",
          flush=True)
    walk = argparse.Namespace(kind="sim", protocol=Path(derived.path), unattended=True, resume=True, seconds=0.0,
                              arg=[*args.arg, f"output_dir={bags.resolve()}"], param_file=list(args.param_file))
    if run_command.run(walk) != 0:
        print(error_line("eval watch", f"the walk of {candidate.id} did not finish (see above); it resumes at the "
                         "next look", where=str(bags)), file=sys.stderr, flush=True)
        return None
    trials = [read_trial(b) for b in sorted(bags.iterdir()) if b.is_dir() and b.name != DISCARDED_DIR]
    report = build_report(trials, derived, registry)
    write_html(report, out / "report.html")
    record = figures(report, protocol, candidate, out / "report.html", bags)
    add_evaluation(registry, candidate.id, record)
    index = write_index(args.out, Registry.load(registry), protocol)
    print(f"eval watch: {candidate.id}: appended to lineage ({registry}); report {out / 'report.html'}; index {index}",
          flush=True)
    if record["flagged"]:
        worse = [c["sentence"] for c in record["comparisons"] if c["verdict"] == "worse"]
        print(f"eval watch: FLAGGED: {candidate.id} is significantly worse than {incumbent_of(protocol)}: "
              + " ".join(worse), flush=True)
    return bool(record["flagged"])


def run(args: argparse.Namespace) -> int:
    if not args.checkpoints.is_dir():
        raise UsageError("no such folder", where=str(args.checkpoints),
                         fix="name the folder train writes checkpoints to")
    if args.interval <= 0:
        raise UsageError(f"--interval must be > 0, got {args.interval:g}")
    protocol = load_protocol(args.protocol)  # ProtocolError: one line naming the file and the field
    if protocol.machine_check is None:
        raise ProtocolError(f"{protocol.path}: eval watch judges unattended trials: success.machine_check is needed")
    registry = Path(args.registry) if args.registry else default_registry()
    stop = threading.Event()
    flagged: list[str] = []
    failed: list[str] = []
    with SignalStop(stop):
        while not stop.is_set():
            reg = Registry.load(registry)
            settled = None if args.once else time.time() - SETTLED_S
            waiting = [c for c in discover(args.checkpoints, reg, settled)
                       if c.id != incumbent_of(protocol) and not evaluated(reg, c.id, protocol)]
            if args.once and not waiting:
                print(f"eval watch: nothing to evaluate under {args.checkpoints} (every checkpoint there has its "
                      f"figures for protocol {protocol.hash})", flush=True)
            for candidate in waiting:
                if stop.is_set():
                    break
                verdict = _evaluate(args, Path(protocol.path), candidate, registry)
                if verdict is None:
                    failed.append(candidate.id)
                elif verdict:
                    flagged.append(candidate.id)
            if args.once:
                break
            stop.wait(args.interval)
    if failed:
        print(error_line("eval watch", f"{len(failed)} checkpoint(s) not evaluated: {', '.join(failed)}",
                         fix=f"the lines above say why; {PROG} eval watch resumes them"), file=sys.stderr)
    if flagged:
        print(f"eval watch: {len(flagged)} checkpoint(s) FLAGGED as worse than the incumbent: {', '.join(flagged)}")
    return EXIT_PARTIAL if failed or flagged else 0

