"""`teleop-flywheel convert`: bags → LeRobot v3.0 dataset (validated episodes only)."""
from __future__ import annotations

import argparse
import errno
import os
import sys
from pathlib import Path

from teleop_flywheel.core.errors import (
    EXIT_OK,
    EXIT_PARTIAL,
    EXIT_USAGE,
    FlywheelError,
    PartialFailure,
    UsageError,
    error_line,
)
from teleop_flywheel.data.convert.calibrations import role_files
from teleop_flywheel.data.convert.converter import convert
from teleop_flywheel.data.errors import CommitError
from teleop_flywheel.data.lerobot import commit, v3_layout
from teleop_flywheel.data.lerobot.append import read_info
from teleop_flywheel.data.parallel import add_arguments_to, add_encode_timeout_to
from teleop_flywheel.data.provenance.reviews import LOG_FILE, decisions, review_folders
from teleop_flywheel.data.validate.reasons import Supplied
from teleop_flywheel.data.validate.validator import add_supplied_arguments, display, load_inputs


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "paths", nargs="+", metavar="BAG_OR_DIR", help="bag directories, .mcap files or folders of bags"
    )
    parser.add_argument("--dataset", required=True, metavar="DATASET", help="dataset root (created or appended to)")
    parser.add_argument("--fps", type=int, default=30,
                        help="frames per second of the dataset's grid; every stream is sampled onto it (default 30)")
    parser.add_argument("--repo-id", default=None,
                        help="stored as info.json repo_id (card, manifest; LeRobot loads by repo_id + root)")
    parser.add_argument("--codec", choices=v3_layout.CODECS, default="libsvtav1",
                        help="video codec: libsvtav1 (AV1, LeRobot's default) or h264 (faster to encode)")
    parser.add_argument("--task", default=None, help="task text for every episode (default: the recorded task)")
    parser.add_argument("--include-failed", action="store_true", help="also convert episodes that fail validation")
    parser.add_argument("--admit-reviewed", action="store_true",
                        help="act on the review log (reviews.jsonl) of each folder named (`review DIR` writes it): "
                             "admit a rejection a person overruled, reject a warning a person confirmed; the review "
                             "goes into the dataset's validation record and its `review` column")
    parser.add_argument("--trim-dead-air", action="store_true",
                        help="cut leading and trailing dead air beyond the validator's bounds instead of rejecting the "
                             "episode (what was cut goes into the episodes table and the data card)")
    parser.add_argument("--robot-type", default="so101_follower",
                        help="info.json robot_type, as LeRobot names the robot (default so101_follower)")
    parser.add_argument("--config", metavar="FILE", help="validator thresholds YAML")
    parser.add_argument("--calibration", action="append", default=[], metavar="ROLE=FILE",
                        help="calibration YAML of the leader or follower arm for the episodes that recorded none "
                             "for that role (repeatable; a recorded calibration is never replaced)")
    add_supplied_arguments(parser)
    add_arguments_to(parser)
    add_encode_timeout_to(parser)


def _published(out: Path) -> str | None:
    """Which version `out` is: its pointer's version, "plain" (a dataset from before versions), None (none)."""
    try:
        version = commit.current(Path(os.path.abspath(out)))
    except CommitError:
        return None
    return version.name if version is not None else "plain" if out.is_dir() else None


def _failure(exc: OSError, out: Path, before: str | None) -> PartialFailure:
    """The run failed midway on the disk: what, where, and what state the dataset is in (`before`:
    its version when the run started; upgrading a plain directory to version 0 changes nothing)."""
    after = _published(out)
    unchanged = after == before or (before == "plain" and after == "v000000")
    state = "the dataset was not changed" if unchanged else "the dataset holds the whole append"
    where = f"writing {exc.filename}" if exc.filename else display(out)
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return PartialFailure(f"disk full ({exc.strerror or exc}); {state}", where, "free disk space and run it again")
    return PartialFailure(f"{exc.strerror or exc}; {state}", where, "run it again once the disk is healthy")


def run(args: argparse.Namespace) -> int:
    # UsageError (exit 2) when it cannot run at all
    cfg, paths, path_errors = load_inputs(args.config, args.paths, "convert")
    out = Path(args.dataset)
    try:
        calibrations = role_files(args.calibration)
        supplied = Supplied(task=args.task, outcome=args.outcome)
    except ValueError as exc:
        if isinstance(exc, FlywheelError):
            raise
        raise UsageError(str(exc)) from exc
    folders = review_folders([Path(p) for p in args.paths])
    if args.admit_reviewed and not folders:
        raise UsageError(f"--admit-reviewed: no review log ({LOG_FILE}) in {', '.join(map(display, args.paths))}; "
                         "`teleop-flywheel review DIR` writes one in DIR")
    before = _published(out)
    try:
        res = convert(paths, out, args.fps, args.codec, args.task, args.include_failed, args.robot_type,
                      args.workers, args.executor, cfg, repo_id=args.repo_id, calibrations=calibrations,
                      supplied=supplied, trim_dead_air=args.trim_dead_air, reviews=decisions(folders),
                      admit_reviewed=args.admit_reviewed, encode_stall_s=args.encode_timeout)
    except CommitError as exc:  # it ran and failed midway: the message says what state the dataset is in
        exc.exit_code = EXIT_PARTIAL
        raise
    except (FlywheelError, OSError) as exc:
        if isinstance(exc, OSError) and not isinstance(exc, FlywheelError):
            raise _failure(exc, out, before) from exc
        raise  # an inconsistent or busy dataset, a bad argument: one line, exit 2
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    for line in res.recovered or []:
        print(f"  recovered: {line}")
    n_conv = sum(len(v) for v in res.converted.values())
    print(f"episodes in: {res.episodes_in}; converted: {n_conv}; already in the dataset: {len(res.duplicates)}; "
          f"rejected: {sum(len(v) for v in res.rejected.values())}; errors: {len(res.errors) + len(path_errors)}")
    for root, ids in res.converted.items():
        note = (
            "" if Path(root) == Path(os.path.abspath(out)) else "  (different camera set: a dataset of its own schema)"
        )
        repo = (read_info(Path(root)) or {}).get("repo_id") or f"local/{Path(root).name}"
        print(f"  {display(root)}: +{len(ids)} episodes{note}; load with "
              f"LeRobotDataset({repo!r}, root={display(root)!r}, video_backend='pyav')")
    for code, names in res.rejected.items():
        print(f"  rejected {code}: {len(names)} ({', '.join(names)})")
    for r in res.reports:
        if r.overruled and r.review and res.outcomes.get(r.path) == "converted":
            print(f"  admitted by review: {display(r.name)}: {', '.join(sorted({x.code for x in r.overruled}))} "
                  f"overruled by {r.review['reviewer']} at {r.review['time']}")
    warned = [r for r in res.reports if r.passed and r.warnings]
    for r in warned:
        print(f"  warning {display(r.name)}: " + "; ".join(map(str, r.warnings)))
    for line in res.refreshed:
        print(f"  refreshed {line}")
    sys.stdout.flush()
    for line in res.refused:  # a feature-set change: these bags were not converted (exit 1)
        print(error_line("convert", line, fix="convert them into another --dataset"), file=sys.stderr)
    for err in res.errors:  # one line each, the last lines on stderr
        fix = ("supply it with --calibration ROLE=FILE" if "--calibration" in err else
               "teleop-flywheel info BAG says what it holds; teleop-flywheel recover BAG repairs a crashed one")
        print(error_line("convert", err, fix=fix), file=sys.stderr)
    unreadable = sum("NOT_A_BAG(" in e or "CORRUPT(unreadable" in e for e in res.errors)
    if res.episodes_in and unreadable == res.episodes_in:
        return EXIT_USAGE  # nothing could be read
    return EXIT_PARTIAL if res.errors or path_errors or res.refused else EXIT_OK
