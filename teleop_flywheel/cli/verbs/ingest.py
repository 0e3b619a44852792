"""`teleop-flywheel ingest`: keep a dataset current: validate, quarantine or convert every closed bag."""
from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from teleop_flywheel.core.errors import UsageError
from teleop_flywheel.core.priority import lower_priority
from teleop_flywheel.data.convert.append_rules import check_append
from teleop_flywheel.data.convert.ingest_loop import GRACE_S, IngestConfig, ingest_once, segments_root
from teleop_flywheel.data.convert.preencode import PreEncoding
from teleop_flywheel.data.lerobot import v3_layout
from teleop_flywheel.data.parallel import add_arguments_to, add_encode_timeout_to
from teleop_flywheel.data.validate.reasons import ValidateConfig
from teleop_flywheel.data.validate.validator import display


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("watch", type=Path, nargs="+", metavar="WATCH_DIR",
                        help="the recorders' output folders (one per rig, or the one they share)")
    parser.add_argument("--dataset", type=Path, required=True, metavar="DS", help="dataset to append to (created)")
    moving = parser.add_mutually_exclusive_group()
    moving.add_argument("--quarantine", type=Path, metavar="DIR",
                        help="where rejected bags are moved (default: <first WATCH_DIR>/../quarantine)")
    moving.add_argument("--no-quarantine", action="store_true",
                        help="leave rejected bags where they are (the state file and the dataset's record say so)")
    parser.add_argument("--grace", type=float, default=GRACE_S, metavar="S",
                        help=f"take a bag this long after its verdict when the operator neither kept nor discarded it "
                             f"(default {GRACE_S:g})")
    parser.add_argument("--without-verdict", action="store_true",
                        help="also take closed bags without a verdict.json, once the grace period has passed")
    parser.add_argument("--once", action="store_true", help="ingest what is ready, then exit")
    parser.add_argument("--poll", type=float, default=1.0, metavar="S", help="seconds between looks (default 1)")
    parser.add_argument("--codec", choices=v3_layout.CODECS, default="libsvtav1", help="video codec of a new dataset")
    parser.add_argument("--fps", type=int, default=30, help="frames per second of a new dataset (default 30)")
    parser.add_argument("--repo-id", default=None, help="info.json repo_id of a new dataset")
    parser.add_argument("--config", metavar="FILE", help="validator thresholds YAML")
    parser.add_argument("--trim-dead-air", action="store_true", help="trim leading/trailing dead air, not reject")
    parser.add_argument("--admit-reviewed", action="store_true",
                        help="act on the review log of each WATCH_DIR (`review WATCH_DIR`): admit a rejection a "
                             "person overruled, reject a warning a person confirmed; the review goes into the "
                             "dataset's record")
    add_arguments_to(parser, workers=1)  # one worker: low impact beside a recording rig
    add_encode_timeout_to(parser)
    parser.add_argument("--no-pre-encode", action="store_true",
                        help="do not encode camera video while episodes are recorded (all of it then waits for the "
                             "keep)")
    parser.add_argument("--nice", type=int, default=10, help="niceness to run at (default 10; 0 keeps it)")
    drawing = parser.add_mutually_exclusive_group()
    drawing.add_argument("--audit", type=Path, metavar="OUT.html",
                         help="audit page to refresh after every append (default <DS>_audit.html beside the dataset)")
    drawing.add_argument("--no-audit", action="store_true", help="refresh no audit page")


def run(args: argparse.Namespace) -> int:
    watch = [Path(w) for w in args.watch]
    for folder in watch:
        if not folder.is_dir():
            raise UsageError("no such folder", where=str(folder), fix="give the recorder's output_dir")
    dataset = Path(os.path.abspath(args.dataset))
    moved_to = None if args.no_quarantine else (Path(args.quarantine) if args.quarantine
                                                else watch[0].resolve().parent / "quarantine")
    page = None if args.no_audit else (args.audit or dataset.with_name(dataset.name + "_audit.html"))
    cfg = IngestConfig(watch, dataset, moved_to, args.grace, args.codec, args.fps, ValidateConfig.load(args.config),
                       args.trim_dead_air, args.without_verdict, args.workers, args.executor, page, args.repo_id,
                       admit_reviewed=args.admit_reviewed, encode_stall_s=args.encode_timeout)
    check_append([dataset], args.fps, args.codec)  # a dataset this run cannot append to: refused now, not later
    lower_priority(args.nice)
    print(f"ingest: watching {', '.join(display(w) for w in watch)} -> {display(dataset)} (quarantine "
          f"{display(moved_to) if moved_to else 'off: rejected bags stay'}, grace {cfg.grace_s:g} s, "
          f"nice {os.nice(0)})", flush=True)
    def log(line: str) -> None:
        print(line, flush=True)

    # Between looks the pre-encoder works for about a poll period, then looks again at once if it is behind.
    pre = None if args.no_pre_encode else PreEncoding(segments_root(dataset), watch, cfg.fps, cfg.codec, log,
                                                      budget_s=args.poll, stall_s=cfg.encode_stall_s)
    while True:
        ingest_once(cfg, log, pre)
        if args.once:
            return 0
        if pre is None or not pre.behind:
            time.sleep(args.poll)
