"""`teleop-flywheel convert BAG_OR_DIR... --dataset DATASET`: episode bags → a LeRobot v3.0 dataset, atomically.

Per bag, in parallel (`--workers/--executor`), `episode_frames.prepare_episode`: validate with the
shared checks (only PASSING episodes unless `--include-failed`), align on header stamps, convert
units through the episode's calibration, encode temporary mp4s. Then in this process: skip episodes
whose content id (v2, or v1 of datasets converted before) is already in the dataset (idempotent),
stage the append (one new data parquet, new video files remuxed back to back, the episodes table,
tasks, stats and info rewritten: `lerobot/append.py`) and commit it (`lerobot/commit/`: a new
version, unchanged files hard-linked, published by one rename of the dataset's pointer). Episodes
with another camera set (schema drift) go to a dataset of their own schema beside it,
`<DATASET>__<cameras>`, and are reported — never dropped.

Every episode's curation scores go to the dataset's scores file in the same commit (`curation/curate.py`
`score_table`: they are relative to the dataset, so each append recomputes them for all, from that file
and the new rows; the episodes files before the last are not rewritten).

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

import contextlib
import os
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from teleop_flywheel.core.labels import TRIGGER_LABELS
from teleop_flywheel.data.convert.append_rules import check_append, feature_expectations
from teleop_flywheel.data.convert.calibrations import load_supplied, union_limits
from teleop_flywheel.data.convert.frames import (
    OPTIONAL_FEATURES,
    ConvertJob,
    Prepared,
    features_for,
    prepare_episode,
)
from teleop_flywheel.data.convert.refresh import recorded_ids, refresh, stale
from teleop_flywheel.data.curation.curate import COVERAGE_KEY, COVERAGE_RULE
from teleop_flywheel.data.curation.stored_scores import score_table
from teleop_flywheel.data.errors import DatasetError, EncoderStalled, FeatureSetError, InconsistentDatasetError
from teleop_flywheel.data.lerobot import commit
from teleop_flywheel.data.lerobot.append import Schema, existing_ids, read_info, schema_of, write_episodes
from teleop_flywheel.data.lerobot.consistency import SEAL_PATH, problems, write_seal
from teleop_flywheel.data.lerobot.encoder_process import ENCODE_STALL_S
from teleop_flywheel.data.lerobot.flywheel_schema import SCHEMA_KEY, SCHEMA_VERSION
from teleop_flywheel.data.parallel import own_errors, parallel_map
from teleop_flywheel.data.provenance.reviews import ReviewDecision
from teleop_flywheel.data.validate.dataset_record import Record
from teleop_flywheel.data.validate.reasons import Supplied, ValidateConfig
from teleop_flywheel.data.validate.validator import EpisodeReport, display

__all__ = ["convert", "ConvertResult", "ConvertJob", "Prepared", "prepare_episode"]


def schema_root(out: Path, schema: Schema) -> Path:
    """Where episodes of another camera set go: `<DATASET>__<camera><w>x<h>+...` beside it."""
    tag = "+".join(f"{cam}{w}x{h}" for cam, h, w in schema) or "nocamera"
    return out.with_name(f"{out.name}__{tag}")


def _write(root: Path, stage: Path, eps: list[Prepared], fps: int, robot_type: str, repo_id: str | None,
           correction: bool) -> list[str]:
    """Stage one schema group; dataset-level info keys: trigger labels, joint limits, our layout's
    version (`flywheel_schema`), the rule of the stored coverage gains (`curate.COVERAGE_KEY`), repo_id.
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
                            "joint_limits": limits, SCHEMA_KEY: SCHEMA_VERSION, COVERAGE_KEY: COVERAGE_RULE}
    if repo_id:
        keys["repo_id"] = repo_id
    data = [e.data for e in eps if e.data is not None]
    shapes = {cam: (h, w) for cam, (_, h, w) in data[0].videos.items()}
    features = features_for(shapes, set(OPTIONAL_FEATURES).intersection(data[0].columns), correction=correction)
    _, new = write_episodes(root, stage, data, fps, robot_type, features, keys,
                            scores=lambda added: score_table(added, root, fps))
    write_seal(root, stage)
    commit.fault(f"stage {SEAL_PATH}")
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
        found = problems(root, trust_seal=True)
        if found:
            more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
            raise InconsistentDatasetError(f"{root}: dataset is inconsistent: {found[0].detail}{more}; "
                                           f"nothing was converted. Run `teleop-flywheel doctor {root}`")


def _refuse(p: Prepared, why: str, result: ConvertResult) -> None:
    p.status = "refused"
    result.refused.append(f"{display(p.name)}: {why}")


def _group(prepared: list[Prepared], result: ConvertResult, optional: frozenset[str] | None
           ) -> dict[Schema, list[Prepared]]:
    """Episodes by camera schema. `optional`: the OPTIONAL_FEATURES the dataset has (None: a new
    dataset, which takes, feature by feature, what most of this batch has; the others are refused)."""
    ok = [p for p in prepared if p.status == "ok" and p.data is not None]
    if optional is None:
        optional = frozenset(name for name in OPTIONAL_FEATURES
                             if 2 * sum(name in p.data.columns for p in ok if p.data is not None) >= len(ok) > 0)
    seen: set[str] = set()
    groups: dict[Schema, list[Prepared]] = {}
    for p in prepared:
        if p.status == "duplicate" or (p.status == "ok" and p.episode_id in seen):
            p.status = "duplicate"
            result.duplicates.append(display(p.name))
        elif p.status == "ok" and p.data is not None:
            differ = sorted(optional.symmetric_difference(set(OPTIONAL_FEATURES).intersection(p.data.columns)))
            if differ:
                _refuse(p, f"{'lacks' if differ[0] in optional else 'has'} {differ[0]}, unlike the rest of the "
                        "dataset: a feature-set change is a new dataset (convert it into another --dataset)", result)
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
            segments: Mapping[str, Path] | None = None, wait: bool = False,
            reviews: Mapping[str, ReviewDecision] | None = None, admit_reviewed: bool = False,
            encode_stall_s: float = ENCODE_STALL_S) -> ConvertResult:
    """`calibrations`: {role: calibration file} for the episodes that recorded none for that role;
    `supplied`: task/outcome of bags that carry no episode metadata; `trim_dead_air`: cut leading and
    trailing dead air instead of rejecting it; `refresh_after`: update the validation record, data
    card and sample weights of every dataset appended to (`data/convert/refresh.py`); `segments`: {bag:
    folder of its pre-encoded video segments} (`ingest`: `data/convert/segments.py`); `wait`: take the dataset
    after whoever holds it (another convert, a curate, a doctor) instead of refusing it as busy (`ingest`);
    `reviews`: {episode_id: its latest review} (`provenance.reviews.decisions`), recorded with each verdict
    and, with `admit_reviewed`, acted on: an overruled rejection admitted, a confirmed warning rejected;
    `encode_stall_s`: an encode that makes no progress this long is killed and the run stops
    (`EncoderStalled`, naming the bag and camera; nothing published)."""
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
        optional, correction = feature_expectations(out)
        known = set().union(existing_ids(out), *(existing_ids(s) for s in siblings))
        # Each record read once: for the ids it holds now, and to merge this run's verdicts into after the
        # append (which leaves it as it is: hard-linked into the new version).
        records = {r: _record(r) for r in [out, *siblings]}
        recorded = frozenset().union(*(recorded_ids(r, rec) for r, rec in records.items()))
        work = commit.new_stage(out) / ".work"
        try:
            work.mkdir()
            jobs = [ConvertJob(str(p), fps, codec, str(work), task, include_failed, None, cfg, frozenset(known), cals,
                               supplied, trim_dead_air, optional, correction, recorded,
                               str(segments[str(p)]) if segments and str(p) in segments else None,
                               dict(reviews or {}), admit_reviewed, encode_stall_s) for p in paths]
            # A full disk or a stalled encoder: not one bag's fault, the run stops with its line.
            with own_errors(OSError, EncoderStalled):
                prepared = parallel_map(prepare_episode, jobs, workers=workers, executor=executor,
                                        desc="convert" if progress else None)
            result = ConvertResult(len(paths), {}, [], {}, [], recovered)
            result.reports = [p.report for p in prepared if p.report is not None]
            groups = _group(prepared, result, optional)
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
                _refresh(out, result, prepared, roots, records)
            return result
        finally:
            with contextlib.suppress(OSError):  # e.g. still no space: the next run finishes it
                commit.recover_all(out)  # a staging directory not published: removed


def _record(root: Path) -> Record | None:
    """The validation record of `root` (None: unreadable; `refresh` then says so)."""
    try:
        return Record.read(root)
    except DatasetError:
        return None


def _refresh(out: Path, result: ConvertResult, prepared: list[Prepared], roots: dict[Schema, Path],
             records: dict[Path, Record | None]) -> None:
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
            result.refreshed += refresh(root, by_root.get(root, []), record=records.get(root))
        except (DatasetError, OSError, ValueError) as exc:
            result.refreshed.append(f"{display(root)}: not refreshed: {exc}")
