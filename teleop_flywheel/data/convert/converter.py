"""`teleop-flywheel convert BAG_OR_DIR... --dataset DATASET`: episode bags → a LeRobot v3.0 dataset, atomically.

Per bag, in parallel (`--workers/--executor`), `episode_frames.prepare_episode`: validate with the
shared checks (only PASSING episodes unless `--include-failed`), align on header stamps, convert
units through the episode's calibration, encode temporary mp4s. Then in this process: skip episodes
whose content id (v2, or v1 of datasets converted before) is already in the dataset (idempotent),
stage the append (one new data parquet, new video files remuxed back to back, the episodes table,
tasks, stats and info rewritten: `lerobot/append.py`) and commit it (`lerobot/commit.py`: a new
version, unchanged files hard-linked, published by one rename of the dataset's pointer). Episodes
with another camera set (schema drift) go to a dataset of their own schema beside it,
`<DATASET>__<cameras>`, and are reported — never dropped.

The episodes table gets every episode's curation scores in the same commit (`curation/curate.py`
`with_scores`: they are relative to the dataset, so each append recomputes them for all).

Atomic: a crash (kill -9, full disk) at any step leaves the dataset as it was or with the whole
append, and a reader sees one or the other, never a mix; a run first removes what an interrupted
commit left beside it, then refuses a dataset that is inconsistent (`lerobot/consistency.py`: run
`teleop-flywheel doctor DATASET`). One convert at a time per dataset (a lock file beside it).

Calibration (radians → LeRobot units) is the episode's own, by role (`EpisodeMeta.calibration`,
`{"leader": ..., "follower": ...}`; bags recorded before: the role read from the file stem).
An episode without one of the two is not converted: the error names the role and
`--calibration ROLE=FILE`, which supplies it for every episode that lacks it (a recorded one is
never replaced). Bags without episode metadata (`ros2 bag record` on another rig) take `--task`,
`--outcome` (else OUTCOME_UNSET) and `--calibration`. info.json `joint_limits` are the follower
calibrations' ranges (the union over the episodes converted into the dataset);
`teleop_flywheel_schema` is the version of our layout (`data/lerobot/flywheel_schema.py`: a
dataset of an older one is refused, naming `teleop-flywheel migrate`); `--repo-id` is
stored as info.json `repo_id`, where the card and the manifest read it (LeRobot keeps unknown info
keys; a camera-schema sibling gets `<repo_id>__<cameras>`).

Exit status: 0 ran (rejections are results), 1 some bags could not be converted (not a bag,
undecodable, calibration missing) or the run failed midway (disk full: the dataset is unchanged
or holds the whole append), 2 could not run (usage, no bags, inconsistent or busy dataset).
"""
from __future__ import annotations

import argparse
import contextlib
import errno
import os
import sys
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from teleop_flywheel.core.errors import (
    EXIT_OK,
    EXIT_PARTIAL,
    EXIT_USAGE,
    FlywheelError,
    PartialFailure,
    UsageError,
    error_line,
)
from teleop_flywheel.core.labels import TRIGGER_LABELS
from teleop_flywheel.data.convert.append_rules import check_append, feature_expectations
from teleop_flywheel.data.convert.calibrations import load_supplied, role_files, union_limits
from teleop_flywheel.data.convert.frames import (
    EFFORT,
    ConvertJob,
    FeatureSetError,
    Prepared,
    features_for,
    prepare_episode,
)
from teleop_flywheel.data.convert.refresh import recorded_ids, refresh, stale
from teleop_flywheel.data.curation.curate import with_scores
from teleop_flywheel.data.lerobot import commit, v3_layout
from teleop_flywheel.data.lerobot.append import Schema, existing_ids, read_info, schema_of, write_episodes
from teleop_flywheel.data.lerobot.consistency import problems
from teleop_flywheel.data.lerobot.dataset import DatasetError
from teleop_flywheel.data.lerobot.flywheel_schema import SCHEMA_KEY, SCHEMA_VERSION
from teleop_flywheel.data.parallel import ParallelJobError, add_arguments_to, parallel_map
from teleop_flywheel.data.validate.reasons import Supplied, ValidateConfig
from teleop_flywheel.data.validate.validator import EpisodeReport, add_supplied_arguments, display, load_inputs

__all__ = ["convert", "ConvertResult", "ConvertJob", "Prepared", "prepare_episode", "InconsistentDatasetError",
           "add_arguments", "run"]


class InconsistentDatasetError(FlywheelError, ValueError):
    """The dataset on disk is inconsistent; convert never appends to it (run `teleop-flywheel doctor`)."""


def schema_root(out: Path, schema: Schema) -> Path:
    """Where episodes of another camera set go: `<DATASET>__<camera><w>x<h>+...` beside it."""
    tag = "+".join(f"{cam}{w}x{h}" for cam, h, w in schema) or "nocamera"
    return out.with_name(f"{out.name}__{tag}")


def _write(root: Path, stage: Path, eps: list[Prepared], fps: int, robot_type: str, repo_id: str | None,
           correction: bool) -> list[str]:
    """Stage one schema group; dataset-level info keys: trigger labels, joint limits, our layout's
    version (`flywheel_schema`), repo_id.
    Returns the new files (`commit.publish` refuses any that exist)."""
    info = read_info(root) or {}
    if info:
        have = {k for k in info["features"] if not k.startswith("observation.images.")}
        extra = sorted(set(eps[0].data.columns if eps[0].data else ()) - have - {"frame_index", "timestamp"})
        if extra:  # never drop a column the episodes carry: a feature-set change is a new dataset
            raise FeatureSetError(f"{root}: dataset has no {', '.join(extra)}: a feature-set change is a new dataset "
                                  "(convert these episodes into another --dataset)")
    limits: dict[str, list[float]] = dict(info.get("joint_limits") or {})
    for e in eps:
        limits = union_limits(limits, e.joint_limits)
    keys: dict[str, Any] = {"trigger_labels": {str(i + 1): name for i, name in enumerate(TRIGGER_LABELS)},
                            "joint_limits": limits, SCHEMA_KEY: SCHEMA_VERSION}
    if repo_id:
        keys["repo_id"] = repo_id
    data = [e.data for e in eps if e.data is not None]
    shapes = {cam: (h, w) for cam, (_, h, w) in data[0].videos.items()}
    features = features_for(shapes, effort=EFFORT in data[0].columns, correction=correction)
    _, new = write_episodes(root, stage, data, fps, robot_type, features, keys,
                            amend=lambda table: with_scores(table, root, fps))
    return new


def _repo_ids(out: Path, repo_id: str | None, roots: list[Path]) -> dict[Path, str | None]:
    """The repo id each dataset root gets; refuses to change one a dataset already has."""
    wanted: dict[Path, str | None] = {}
    for root in roots:
        rid = repo_id if root == out or repo_id is None else f"{repo_id}__{root.name.removeprefix(out.name + '__')}"
        old = (read_info(root) or {}).get("repo_id")
        if rid and old and old != rid:
            raise ValueError(f"{root}: dataset has repo_id {old!r}; refusing to change it to {rid!r}")
        wanted[root] = rid
    return wanted


@dataclass
class ConvertResult:
    episodes_in: int
    converted: dict[str, list[str]]  # dataset root -> episode ids
    duplicates: list[str]
    rejected: dict[str, list[str]]  # code -> bag names
    errors: list[str]
    recovered: list[str] | None = None  # what interrupted commits left, removed before this run
    refused: list[str] = field(default_factory=list)  # episodes whose features the dataset cannot hold
    reports: list[EpisodeReport] = field(default_factory=list)  # every verdict (warnings, camera lag, ...)
    refreshed: list[str] = field(default_factory=list)  # validation record, card, weights written after
    outcomes: dict[str, str] = field(default_factory=dict)  # bag -> converted|duplicate|rejected|refused|error
    reused_frames: dict[str, int] = field(default_factory=dict)  # bag -> camera frames from pre-encoded segments


def _siblings(out: Path) -> list[Path]:
    return [p for p in commit.related(out) if p != out and p.is_dir()]


def _refuse_inconsistent(roots: list[Path]) -> None:
    for root in roots:
        found = problems(root)
        if found:
            more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
            raise InconsistentDatasetError(f"{root}: dataset is inconsistent: {found[0].detail}{more}; "
                                           f"nothing was converted. Run `teleop-flywheel doctor {root}`")


def _refuse(p: Prepared, why: str, result: ConvertResult) -> None:
    p.status = "refused"
    result.refused.append(f"{display(p.name)}: {why}")


def _group(prepared: list[Prepared], result: ConvertResult, effort: bool | None) -> dict[Schema, list[Prepared]]:
    """Episodes by camera schema. `effort`: whether the dataset has observation.effort (None: a new
    dataset, which takes what most of this batch has; the others are refused)."""
    ok = [p for p in prepared if p.status == "ok" and p.data is not None]
    if effort is None and ok:
        with_effort = sum(EFFORT in p.data.columns for p in ok if p.data is not None)
        effort = with_effort * 2 >= len(ok)
    seen: set[str] = set()
    groups: dict[Schema, list[Prepared]] = {}
    for p in prepared:
        if p.status == "duplicate" or (p.status == "ok" and p.episode_id in seen):
            p.status = "duplicate"
            result.duplicates.append(display(p.name))
        elif p.status == "ok" and p.data is not None:
            if (EFFORT in p.data.columns) != effort:
                _refuse(p, f"{'has' if not effort else 'lacks'} observation.effort, unlike the rest of the dataset: "
                        "a feature-set change is a new dataset (convert it into another --dataset)", result)
                continue
            seen.add(p.episode_id or "")
            groups.setdefault(p.data.schema, []).append(p)
        elif p.status == "rejected":
            for code in sorted({r.code for r in p.reasons}):
                result.rejected.setdefault(code, []).append(display(p.name))
        elif p.status == "refused":
            result.refused.append(f"{display(p.name)}: " + "; ".join(r.detail for r in p.reasons))
        else:
            result.errors.append(f"{display(p.name)}: " + "; ".join(map(str, p.reasons)))
    return groups


def convert(paths: list[Path], out: Path, fps: int = 30, codec: str = "libsvtav1", task: str | None = None,
            include_failed: bool = False, robot_type: str = "so101_follower", workers: int | None = None,
            executor: str = "local", validate: ValidateConfig | None = None, progress: bool = True,
            repo_id: str | None = None, calibrations: Mapping[str, str | Path] | None = None,
            supplied: Supplied | None = None, trim_dead_air: bool = False, refresh_after: bool = True,
            segments: Mapping[str, Path] | None = None, wait: bool = False) -> ConvertResult:
    """`calibrations`: {role: calibration file} for the episodes that recorded none for that role;
    `supplied`: task/outcome of bags that carry no episode metadata; `trim_dead_air`: cut leading and
    trailing dead air instead of rejecting it; `refresh_after`: update the validation record, data
    card and sample weights of every dataset appended to (`data/convert/refresh.py`); `segments`: {bag:
    folder of its pre-encoded video segments} (`ingest`: `data/convert/segments.py`); `wait`: take the dataset
    after whoever holds it (another convert, a curate, a doctor) instead of refusing it as busy (`ingest`)."""
    cfg = validate or ValidateConfig.load()
    cfg.fps = fps
    cals = load_supplied(calibrations or {})
    out = Path(os.path.abspath(out))
    with commit.locked_dataset(out, wait=wait):
        recovered = commit.recover_all(out)
        siblings = _siblings(out)
        _refuse_inconsistent([out, *siblings])
        _repo_ids(out, repo_id, [out, *siblings])  # refuse before any work
        check_append([out, *siblings], fps, codec)
        effort, correction = feature_expectations(out)
        known = set().union(existing_ids(out), *(existing_ids(s) for s in siblings))
        recorded = frozenset().union(*(recorded_ids(r) for r in [out, *siblings]))
        work = commit.new_stage(out) / ".work"
        try:
            work.mkdir()
            jobs = [ConvertJob(str(p), fps, codec, str(work), task, include_failed, None, cfg, frozenset(known), cals,
                               supplied, trim_dead_air, effort, correction, recorded,
                               str(segments[str(p)]) if segments and str(p) in segments else None) for p in paths]
            try:
                prepared = parallel_map(prepare_episode, jobs, workers=workers, executor=executor,
                                        desc="convert" if progress else None)
            except ParallelJobError as exc:
                if isinstance(exc.__cause__, OSError):
                    raise exc.__cause__ from None  # the disk is full: not one bag's fault
                raise
            result = ConvertResult(len(paths), {}, [], {}, [], recovered)
            result.reports = [p.report for p in prepared if p.report is not None]
            groups = _group(prepared, result, effort)
            primary = schema_of(out)
            if primary is None and groups:
                counts = Counter({s: len(g) for s, g in groups.items()})
                primary = max(groups, key=lambda s: counts[s])
            roots = {schema: out if schema == primary else schema_root(out, schema) for schema in groups}
            repo_ids = _repo_ids(out, repo_id, list(roots.values()))
            staged = []
            for schema, eps in groups.items():
                root = roots[schema]
                stage = commit.staging_path(out) if root == out else commit.new_stage(root)
                try:
                    new = _write(root, stage, eps, fps, robot_type, repo_ids[root], correction)
                except FeatureSetError as exc:
                    for e in eps:
                        _refuse(e, str(exc), result)
                    continue
                staged.append((root, new, [e.episode_id or "" for e in eps]))
            for root, new, ids in sorted(staged, key=lambda s: s[0] == out):  # the primary last
                commit.publish(root, new)
                result.converted[str(root)] = ids
            result.outcomes = {p.bag: "converted" if p.status == "ok" else p.status for p in prepared}
            result.reused_frames = {p.bag: p.reused_frames for p in prepared if p.reused_frames}
            if refresh_after:
                _refresh(out, result, prepared, roots)
            return result
        finally:
            with contextlib.suppress(OSError):  # e.g. still no space: the next run finishes it
                commit.recover_all(out)  # a staging directory not published: removed


def _refresh(out: Path, result: ConvertResult, prepared: list[Prepared], roots: dict[Schema, Path]) -> None:
    """Each dataset appended to (now, or by the append a crash left and this run finished) gets its
    verdicts recorded, its card and weights written again, and so does one whose record, card or
    weights are behind its episodes; the verdicts of episodes not converted go to the main dataset's
    record (when it exists)."""
    where = {p.episode_id: roots[p.data.schema] for p in prepared if p.status == "ok" and p.data is not None}
    related = [out, *_siblings(out)]
    where.update({i: root for root in related for i in existing_ids(root)} if any(
        p.status == "duplicate" and p.report is not None for p in prepared) else {})
    by_root: dict[Path, list[EpisodeReport]] = {}
    for p in prepared:
        if p.report is not None:
            by_root.setdefault(where.get(p.episode_id, out), []).append(p.report)
    todo = set(by_root) | {Path(r) for r in result.converted} | {r for r in related if result.recovered or stale(r)}
    for root in sorted(todo):
        if read_info(root) is None:
            continue
        try:
            result.refreshed += refresh(root, by_root.get(root, []))
        except (DatasetError, OSError, ValueError) as exc:
            result.refreshed.append(f"{display(root)}: not refreshed: {exc}")


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


def _published(out: Path) -> str | None:
    """Which version `out` is: its pointer's version, "plain" (a dataset from before versions), None (none)."""
    try:
        version = commit.current(Path(os.path.abspath(out)))
    except commit.CommitError:
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
    cfg, paths, path_errors = load_inputs(args, "convert")  # UsageError (exit 2) when it cannot run at all
    out = Path(args.dataset)
    try:
        calibrations = role_files(args.calibration)
        supplied = Supplied(task=args.task, outcome=args.outcome)
    except ValueError as exc:
        if isinstance(exc, FlywheelError):
            raise
        raise UsageError(str(exc)) from exc
    before = _published(out)
    try:
        res = convert(paths, out, args.fps, args.codec, args.task, args.include_failed, args.robot_type,
                      args.workers, args.executor, cfg, repo_id=args.repo_id, calibrations=calibrations,
                      supplied=supplied, trim_dead_air=args.trim_dead_air)
    except commit.CommitError as exc:  # it ran and failed midway: the message says what state the dataset is in
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
