"""`teleop-flywheel migrate PATH [--output OUT]`: the one upgrade path from an older format of ours.

Readers of bags and manifests read the current format only and refuse an older one with a line
naming this command; a dataset of an older layout of ours is read by every reader as it is, and
refused only by `convert`, which never appends to it. PATH is a bag (directory or .mcap:
`recording/mcap/upgrade.py` knows its older formats), a manifest (JSON) or a LeRobot dataset
directory. The upgraded copy is written beside PATH (`<name>.migrated`,
a manifest `<stem>.migrated.json`) or to OUT, created exclusively; the original is never changed.
One line per kind of change says what was changed; a current PATH is said to be so and nothing is
written (exit 0).

What older manifests and datasets were is known here only:
- manifest formats 1 to 3 had simple filters only (`COLUMN OP VALUE`, the first operator of
  `!= >= <= = > <` found splitting it, the rest one value with its quotes stripped): each becomes the
  filter expression of the same meaning (`task == 'pick and place'`; `data/provenance/filter_expr.py`),
  and format 4's `filter_values` are the values the episodes have now.
- manifest format 3 is checked unchanged by its own rules (today's, before filter expressions).
- manifest format 2 hashed an episodes-table row without its nulls only in the columns converters
  added later (a fixed list, below); format 3 leaves out every null. Its episodes are found in the
  dataset by id, checked unchanged by format 2's own rules (ids, data rows, row, tasks, videos,
  files), and their row hashes recomputed.
- manifest format 1 froze ids v1 (over the messages only) and data rows. Its episodes are found by
  their v1 ids (`episode_id_v1`, or `episode_id` of rows converted before ids v2) and checked by
  their data rows; everything else format 3 covers is hashed as it is now, and the line says so.
  A manifest whose episodes no longer match its dataset is not migrated (it would launder the
  change): exit 1, naming the episodes.
- a dataset beside which a converter from before staging (`.convert-*` temp directories) crashed:
  the copy is the dataset without them (they hold temporary videos only).
- a dataset of an older layout of ours (`data/lerobot/flywheel_schema.py`; layout 1 had the leader
  arm's reading as `observation.leader_state`, an input LeRobot gives every policy): the copy has
  the features renamed in the data parquet files, info.json (with `teleop_flywheel_schema`),
  stats.json and the episodes table's stats columns, each where it was; the videos are the same
  files (hard-linked where the filesystem allows: they are never changed once written). Written
  as every dataset is (`data/lerobot/commit/`): staged, then published as the copy's first
  version, so the copy is whole or absent. Manifests frozen from the original verify against the original only.
"""
from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq

from teleop_flywheel.core.errors import FileExistsRefused
from teleop_flywheel.core.files import create_exclusive
from teleop_flywheel.data.errors import FrozenEpisodesChanged
from teleop_flywheel.data.lerobot import commit
from teleop_flywheel.data.lerobot.dataset import EPISODES_DIR, LeRobotDataset
from teleop_flywheel.data.lerobot.flywheel_schema import (
    SCHEMA_KEY,
    SCHEMA_VERSION,
    changes_since,
    pending_renames,
    renamed_column,
    schema_version,
)
from teleop_flywheel.data.lerobot.v3_layout import INFO_PATH, STATS_PATH, write_json
from teleop_flywheel.data.provenance.filter_expr import Compare, literal
from teleop_flywheel.data.provenance.manifest import (
    FORMAT_VERSION,
    format_version,
    freeze,
    identities,
    load_manifest,
    task_indices,
)
from teleop_flywheel.data.provenance.manifest_hash import (
    episode_parts,
    episode_rows,
    fields_sha256,
    file_sha256,
    row_fields,
    row_sha256,
)
from teleop_flywheel.data.reports.mashing import TABLE_COLUMNS as MASHING_COLUMNS
from teleop_flywheel.recording.mcap.exceptions import MigrateError
from teleop_flywheel.recording.mcap.upgrade import SUFFIX, migrate_bag

# The episodes-table columns converters added after manifest format 2 (data/validate/episode_columns.py).
_ADDED_AFTER_V2 = ("camera_lag_ms/", "camera_lag_stderr_ms/", "tracking_lag_ms", "dead_air_trimmed_", "corrections",
                   "tracking_outrun_share", "warnings", "task_spec_id", "outcome_check", *MASHING_COLUMNS)
_LEGACY_TEMPS = ".convert-*"
_SIMPLE_OPS = ("!=", ">=", "<=", "=", ">", "<")  # the order formats 1-3 looked for them in


@dataclass
class Migration:
    path: str
    copy: str | None = None
    changes: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _present(value: Any) -> bool:
    return value is not None and not (isinstance(value, float) and np.isnan(value)) and value != ""


def _v1_ids(ds: LeRobotDataset) -> dict[str, int]:
    """{content id v1: episode}: `episode_id_v1` of rows converted since ids v2, `episode_id` before."""
    out: dict[str, int] = {}
    for row in ds.episodes.to_dict("records"):
        v2_row = _present(row.get("id_version")) and int(row["id_version"]) >= 2
        value = row.get("episode_id_v1") if v2_row else row.get("episode_id")
        if _present(value):
            out[str(value)] = int(row["episode_index"])
    return out


def _v2_row_sha256(row: dict[str, Any]) -> str:
    fields = row_fields(row)
    return fields_sha256({k: v for k, v in fields.items() if not (v is None and k.startswith(_ADDED_AFTER_V2))})


def simple_filter(text: str) -> str:
    """A filter of formats 1-3 as the expression of the same meaning."""
    for op in _SIMPLE_OPS:
        if op in text:
            key, value = text.split(op, 1)
            if key.strip():
                value = value.strip().strip("'\"")
                return str(Compare(key.strip(), "==" if op == "=" else op, (literal(value),), 0))
    raise MigrateError(f"bad filter {text!r} in an old manifest: no COLUMN OP VALUE")


def _matched(ds: LeRobotDataset, manifest: dict[str, Any], version: int) -> tuple[set[int], list[str]]:
    """(the dataset's episodes the manifest froze, what no longer matches), by that format's rules."""
    now = {e.episode_index: e for e in identities(ds)}
    by_id = _v1_ids(ds) if version == 1 else {e.episode_id: i for i, e in now.items()}
    by_id.update({e.data_sha256: i for i, e in now.items() if e.episode_id == e.data_sha256})  # no converter id
    found: dict[int, dict[str, Any]] = {}
    wrong = []
    for m in manifest["episodes"]:
        e = by_id.get(m["episode_id"])
        if e is None:
            wrong.append(f"episode {m['episode_index']} id {m['episode_id'][:12]} is not in the dataset")
        elif now[e].data_sha256 != m["data_sha256"]:
            wrong.append(f"episode {m['episode_index']} id {m['episode_id'][:12]}: data rows changed")
        else:
            found[e] = m
    if version >= 2 and found:
        parts, _ = episode_parts(ds, sorted(found), task_indices(ds))
        rows = {int(r["episode_index"]): r for r in episode_rows(ds).to_dict("records")}
        for e, m in sorted(found.items()):
            what = [k for k in ("task_sha256", "videos") if parts[e].get(k) != m.get(k)]
            row = rows.get(e, {})
            if (_v2_row_sha256(row) if version == 2 else row_sha256(row)) != m.get("row_sha256"):
                what.append("episodes-table row")
            if what:
                wrong.append(f"episode {m['episode_index']} id {m['episode_id'][:12]}: {', '.join(what)} changed")
        for rel, digest in sorted((manifest.get("files") or {}).items()):
            if not (ds.root / rel).is_file() or file_sha256(ds.root / rel) != digest:
                wrong.append(f"file {rel} changed or missing")
    return set(found), wrong


def migrate_manifest(path: Path, output: Path | None, dataset: Path | None) -> Migration:
    manifest = json.loads(path.read_text())
    version = format_version(manifest)
    report = Migration(str(path))
    if version == FORMAT_VERSION:
        load_manifest(path)  # a current manifest must read as one
        return report
    if version is None or not 1 <= version < FORMAT_VERSION or not isinstance(manifest.get("episodes"), list):
        raise MigrateError(f"{path}: not a teleop_flywheel manifest of a format this command knows")
    ds = LeRobotDataset.open(dataset if dataset is not None else manifest.get("dataset", ""))
    chosen, wrong = _matched(ds, manifest, version)
    if wrong:
        raise FrozenEpisodesChanged(f"{path}: dataset {ds.root} no longer holds what this manifest froze: "
                               + "; ".join(wrong[:5]) + (f" (and {len(wrong) - 5} more)" if len(wrong) > 5 else ""))
    filters = [simple_filter(str(f)) for f in manifest.get("filter", [])]
    upgraded = freeze(ds, chosen, filters, str(manifest.get("created", "")))
    n = len(chosen)
    if filters:
        report.changes.append(f"filter: {len(filters)} simple filter(s) written as expressions of the same meaning: "
                              + "; ".join(filters))
    if version == 3:
        report.changes.append(f"manifest: v3 -> v{FORMAT_VERSION}: {n} episodes checked unchanged by v3's rules; "
                              "the filter values of its episodes recorded")
    elif version == 1:
        report.changes.append(f"manifest: v1 -> v{FORMAT_VERSION}: {n} episodes found by their v1 ids with unchanged "
                              "data rows; ids now v2, and episodes-table rows, task texts, videos and files hashed "
                              "as they are now (v1 did not cover them)")
    else:
        report.changes.append(f"manifest: v{version} -> v{FORMAT_VERSION}: {n} episodes checked unchanged by "
                              f"v{version}'s rules; row hashes recomputed (every null left out, not only in "
                              "later-added columns)")
    dest = output if output is not None else path.with_name(f"{path.stem}{SUFFIX}{path.suffix}")
    create_exclusive(dest, json.dumps(upgraded, indent=1) + "\n")
    report.copy = str(dest)
    return report


def rename_features(root: Path, renames: dict[str, str], info_keys: dict[str, Any]) -> int:
    """Rename features of the dataset at `root` in place, each where it was: data parquet columns,
    info.json features (and `info_keys` set), stats.json, the episodes table's stats columns; videos
    are not touched. Files are rewritten one by one: for a private copy only. Returns the number of
    data files rewritten."""
    data = sorted((root / "data").rglob("*.parquet"))
    for path in [*data, *sorted((root / EPISODES_DIR).rglob("*.parquet"))]:
        table = pq.read_table(path)
        pq.write_table(table.rename_columns([renamed_column(c, renames) for c in table.column_names]), path)
    info = json.loads((root / INFO_PATH).read_text())
    info["features"] = {renames.get(k, k): v for k, v in info["features"].items()}
    write_json(root / INFO_PATH, {**info, **info_keys})
    if (root / STATS_PATH).is_file():
        stats = json.loads((root / STATS_PATH).read_text())
        write_json(root / STATS_PATH, {renames.get(k, k): v for k, v in stats.items()})
    return len(data)


def _copy_file(videos: Path, src: str, dst: str) -> str:
    """Videos are linked where the filesystem allows (never changed once written), the rest copied."""
    if Path(src).is_relative_to(videos):
        with contextlib.suppress(OSError):
            os.link(src, dst)
            return dst
    return str(shutil.copy2(src, dst))


def _upgraded_copy(root: Path, dest: Path, renames: dict[str, str]) -> int:
    """The dataset (the version it is now) copied to `dest` with `renames` applied, whole or not at
    all (`commit.publish`: `dest` is a new dataset's first version); data files rewritten."""
    dest = Path(os.path.abspath(dest))
    if dest.exists() or dest.is_symlink():
        raise FileExistsRefused(f"{dest}: already exists; refusing to overwrite it (choose another --output)")
    source = commit.snapshot(root)
    with commit.new_dataset(dest) as stage:
        copy = functools.partial(_copy_file, source / "videos")
        shutil.copytree(source, stage, symlinks=True, dirs_exist_ok=True, copy_function=copy)
        for rel in commit.shared_links(source):  # a chunk directory versions share: its files, in the copy's own
            (stage / rel).unlink()
            shutil.copytree(source / rel, stage / rel, copy_function=copy)
        return rename_features(stage, renames, {SCHEMA_KEY: SCHEMA_VERSION}) if renames else 0


def migrate_dataset(root: Path, output: Path | None) -> Migration:
    ds = LeRobotDataset.open(root)  # a dataset the reader opens, or its one-line error
    report = Migration(str(root))
    temps = sorted(p for p in root.parent.glob(_LEGACY_TEMPS) if p.is_dir() and not p.is_symlink())
    version = schema_version(ds.info)
    renames = pending_renames(ds.info)
    if not temps and not renames:
        return report
    dest = output if output is not None else root.with_name(root.name + SUFFIX)
    rewritten = _upgraded_copy(root, dest, renames)
    if temps:
        report.changes.append(f"temps: {len(temps)} temporary directories of a convert from before staging beside "
                              f"the dataset left out of the copy ({', '.join(p.name for p in temps)}; temporary videos "
                              "only: remove them once the copy is checked)")
    if version is not None and renames:
        report.changes.append(f"layout: {version} -> {SCHEMA_VERSION}: {'; '.join(changes_since(version))} "
                              f"({', '.join(f'{old} -> {new}' for old, new in renames.items())} in {rewritten} data "
                              "files, info.json, stats.json and the episodes table; videos unchanged)")
        report.notes.append("manifests frozen from the original verify against the original only: freeze a new one "
                            "from the copy; a checkpoint trained on the original takes the leader's reading as an "
                            "input and must be trained again")
    report.copy = str(dest)
    return report


def migrate(path: Path, output: Path | None = None, dataset: Path | None = None) -> Migration:
    """Upgrade whatever PATH is (see the module docstring)."""
    if path.is_file() and path.suffix == ".json":
        return migrate_manifest(path, output, dataset)
    if (path / INFO_PATH).is_file():
        return migrate_dataset(path, output)
    bag = migrate_bag(path, output)
    return Migration(bag.bag, bag.copy, bag.changes, bag.notes)

