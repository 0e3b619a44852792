"""Append episodes to a LeRobot v3.0 dataset on disk, exactly as LeRobot 0.4.x lays it out.

Per call (one camera schema): one new data parquet for all the episodes given, each camera's
temporary mp4s remuxed back to back into new `videos/<key>/chunk-XXX/file-XXX.mp4` files (rolled
over at `video_files_size_in_mb`), the new rows of the episodes table (LeRobot's columns, flattened
per-episode stats, and the caller's own episode columns) added to its last file, new files started
at `EPISODES_PER_FILE` rows (`place_rows`: the files before the last are never rewritten, so an
append costs the same at 100 episodes as at 10,000), the scores file of the caller's columns relative to
the whole dataset (`scores`: `v3_layout.SCORES_PATH`), tasks, `stats.json`
(the dataset's merged with the new episodes': `_stats`) and `info.json` (totals, splits, video `info` blocks, plus the
caller's dataset-level keys such as `repo_id` — LeRobot keeps keys it does not know).
Nothing is written inside the dataset: every file goes to the staging directory at its relative
path and `commit.publish` (`data/lerobot/commit/`) makes it the dataset's next version.
Format details: `data/lerobot/v3_layout.py`.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from teleop_flywheel.core.files import inside
from teleop_flywheel.data.lerobot import v3_layout
from teleop_flywheel.data.lerobot.commit import fault
from teleop_flywheel.data.lerobot.dataset import SCORE_INPUT, SCORES_PATH

IMAGES = "observation.images."
Schema = tuple[tuple[str, int, int], ...]  # ((camera, height, width), ...) sorted


@dataclass
class EpisodeData:
    """One episode ready to write: per-frame columns (features + frame_index, timestamp), their
    per-episode stats, one temporary mp4 per camera, and extra episode-table columns."""

    task: str
    length: int
    columns: dict[str, np.ndarray]
    stats: dict[str, dict[str, np.ndarray]]
    videos: dict[str, tuple[str, int, int]] = field(default_factory=dict)  # camera -> (mp4, height, width)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def schema(self) -> Schema:
        return tuple(sorted((cam, h, w) for cam, (_, h, w) in self.videos.items()))


def read_info(root: Path) -> dict[str, Any] | None:
    path = root / v3_layout.INFO_PATH
    return json.loads(path.read_text()) if path.exists() else None


def episode_files(root: Path) -> list[Path]:
    """The episodes table's files, in order (`meta/episodes/chunk-XXX/file-XXX.parquet`)."""
    return sorted(root.glob("meta/episodes/*/*.parquet"))


ID_COLUMNS = ("episode_id", "episode_id_v1")


def existing_ids(root: Path) -> set[str]:
    """Every content id in the dataset's episodes table, v2 (`episode_id`) and v1 (`episode_id_v1`,
    and `episode_id` of datasets converted before v2): empty for a new dataset. Read from the scores
    file's copy of the id columns when it has one (one narrow file; each episodes file's footer costs
    as much to read as its rows: `SCORE_INPUT`), else from the id columns of every episodes file."""
    scores = root / SCORES_PATH
    copies = [SCORE_INPUT + c for c in ID_COLUMNS]
    if scores.is_file() and copies[0] in (names := pq.read_schema(scores).names):
        tables = [pq.read_table(scores, columns=[c for c in copies if c in names])]
    else:
        tables = [pq.read_table(p, columns=[c for c in ID_COLUMNS if c in pq.read_schema(p).names])
                  for p in episode_files(root)]
    out: set[str] = set()
    for table in tables:  # the id columns only: the stats and verdicts are most of the table
        for col in table.column_names:
            out.update(table.column(col).drop_null().to_pylist())
    out.discard("")
    return out


def read_episode_table(root: Path) -> pa.Table | None:
    """Every row of the episodes table, every column (None: no episodes file yet)."""
    files = episode_files(root)
    return pa.concat_tables([pq.read_table(p) for p in files], promote_options="permissive") if files else None


_LOCATION = ("meta/episodes/chunk_index", "meta/episodes/file_index")


def _located(table: pa.Table, file_no: int, chunks: int) -> pa.Table:
    """`table` with every row's `meta/episodes/{chunk_index,file_index}` saying it is in the file-th file."""
    for name, value in zip(_LOCATION, v3_layout.chunk_file(file_no, chunks), strict=True):
        column = pa.array([value] * len(table), pa.int64())
        i = table.schema.get_field_index(name)
        table = table.set_column(i, name, column) if i >= 0 else table.append_column(name, column)
    return table


def _aligned(added: pa.Table, schema: pa.Schema) -> pa.Table | None:
    """The added rows in the files' schema (a column they lack: nulls), None when they do not fit it (a
    column the files lack, or values its type cannot hold): then every file is written again."""
    if not set(added.column_names) <= set(schema.names):
        return None
    columns = [added.column(f.name) if f.name in added.column_names else pa.nulls(len(added), f.type) for f in schema]
    try:
        return pa.table(columns, names=schema.names).cast(schema)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return None


def place_rows(root: Path, stage: Path, added: pa.Table, chunks: int, drop: list[str], rewrite: bool) -> list[str]:
    """Stage the episodes table with the `added` rows: into the last file while it has fewer than
    `EPISODES_PER_FILE` rows, then into new files, in the files' schema (LeRobot reads them all as one
    table). Every file is written again (`rewrite`, or rows that do not fit the files' schema), with the
    columns `drop` (the scores file's) left out of every row. Returns the files staged that did not exist."""
    files = episode_files(root)
    per = v3_layout.EPISODES_PER_FILE
    first = 0
    rows = None
    if files and not rewrite:
        full = pq.read_metadata(files[-1]).num_rows >= per  # a full file is never written again
        last = None if full else pq.read_table(files[-1])
        rows = _aligned(added.drop_columns([c for c in drop if c in added.column_names]),
                        pq.read_schema(files[-1]) if last is None else last.schema)
        if rows is not None:
            first = len(files) - (last is not None)
            rows = rows if last is None else pa.concat_tables([last, rows])
    if rows is None:  # every file: the rows of each, then the added ones, in one schema
        whole = read_episode_table(root)
        rows = added if whole is None else pa.concat_tables([whole, added], promote_options="permissive")
        rows = rows.drop_columns([c for c in drop if c in rows.column_names])
    out = []
    for k, start in enumerate(range(0, len(rows), per)):
        part = _located(rows.slice(start, per), first + k, chunks)
        ci, fi = v3_layout.chunk_file(first + k, chunks)
        rel = v3_layout.EPISODES_PATH.format(chunk_index=ci, file_index=fi)
        (stage / rel).parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(part, stage / rel)
        fault(f"stage {rel}")
        if not (root / rel).exists():
            out.append(rel)
    return out


def schema_of(root: Path) -> Schema | None:
    """The camera set of an existing dataset (None if there is none yet)."""
    info = read_info(root)
    if info is None:
        return None
    return tuple(sorted((k[len(IMAGES):], f["shape"][0], f["shape"][1]) for k, f in info["features"].items()
                        if k.startswith(IMAGES)))


def _tasks(root: Path) -> list[str]:
    if not (root / v3_layout.TASKS_PATH).exists():
        return []
    df = pd.read_parquet(root / v3_layout.TASKS_PATH)
    return [str(t) for t in df.sort_values("task_index").index]


def _next_file(root: Path, pattern: str, chunks: int) -> int:
    """The number of the next file of a kind: one past the highest (chunk, file) there is."""
    numbers = []
    for p in root.glob(pattern):
        try:
            numbers.append(int(p.parent.name.removeprefix("chunk-")) * chunks + int(p.stem.removeprefix("file-")))
        except ValueError:
            continue
    return max(numbers) + 1 if numbers else 0


def _write_videos(root: Path, stage: Path, eps: list[EpisodeData], info: dict[str, Any],
                  rows: list[dict[str, Any]], new: list[str]) -> None:
    """Each camera's episode mp4s back to back, new files rolled over at the size limit."""
    fps, chunks = int(info["fps"]), int(info["chunks_size"])
    limit = int(info["video_files_size_in_mb"]) * 1024 * 1024
    for cam in sorted(eps[0].videos):
        key = IMAGES + cam
        file_no = _next_file(root, f"videos/{key}/chunk-*/file-*.mp4", chunks)
        groups: list[list[int]] = []
        group: list[int] = []
        size = 0
        for k, e in enumerate(eps):
            part = Path(e.videos[cam][0]).stat().st_size
            if group and size + part > limit:
                groups.append(group)
                group, size = [], 0
            group.append(k)
            size += part
        groups.append(group)
        for g in groups:
            ci, fi = v3_layout.chunk_file(file_no, chunks)
            rel = v3_layout.VIDEO_PATH.format(video_key=key, chunk_index=ci, file_index=fi)
            path = inside(stage, rel)  # the camera name is in `rel`: proven to stay in the staging folder
            v3_layout.concat_videos([Path(eps[k].videos[cam][0]) for k in g], path)
            new.append(rel)
            fault(f"stage {rel}")
            t = 0.0
            for k in g:
                rows[k].update({f"videos/{key}/chunk_index": ci, f"videos/{key}/file_index": fi,
                                f"videos/{key}/from_timestamp": t})
                t += eps[k].length / fps
                rows[k][f"videos/{key}/to_timestamp"] = t
            file_no += 1
            if "info" not in info["features"][key]:
                info["features"][key]["info"] = v3_layout.video_info(path)


def read_stats(root: Path) -> dict[str, dict[str, np.ndarray]] | None:
    """The dataset's stats.json as arrays; None when it is missing or unreadable."""
    try:
        doc = json.loads((root / v3_layout.STATS_PATH).read_text())
        return {k: {s: np.asarray(v) for s, v in d.items()} for k, d in doc.items()}
    except (OSError, ValueError, AttributeError):
        return None


def _stats(root: Path, added: list[dict[str, Any]], info: dict[str, Any]) -> dict[str, dict[str, np.ndarray]]:
    """stats.json after an append: the dataset's stats merged with the appended episodes' (counts
    weigh means, variances and quantiles, so the dataset's stats stand for all its episodes at once:
    equal to aggregating every row, to rounding), reading no other row. Every row of `table` is
    aggregated again (with the new ones) when there is no readable stats.json or the new episodes bring a
    feature it lacks."""
    features = list(info["features"])
    new = [v3_layout.stats_from_episode_row(r, features) for r in added]
    old = read_stats(root) if episode_files(root) else {}
    if old is None or any(k not in old or "count" not in old[k] for e in new for k in e):
        whole = read_episode_table(root)
        rows = [*(whole.to_pylist() if whole is not None else []), *added]
        return v3_layout.aggregate_stats([v3_layout.stats_from_episode_row(r, features) for r in rows])
    return v3_layout.aggregate_stats([old, *new] if old else new)


def write_episodes(root: Path, stage: Path, eps: list[EpisodeData], fps: int, robot_type: str,
                   features: dict[str, Any], info_keys: dict[str, Any] | None = None,
                   scores: Callable[[pa.Table], pa.Table] | None = None) -> tuple[list[int], list[str]]:
    """Stage an append of episodes of one camera schema to the dataset at `root` (created if new):
    every file is written under `stage` at its path relative to the dataset. Returns (their episode
    indices, the new files) for `commit.publish`; the episodes and tasks tables, stats and info replace
    the current ones. `features` are the non-default
    features of a new dataset; `info_keys` are set in info.json as given; `scores`: given the added rows,
    the scores file's table over every episode (columns that depend on every episode, such as curation
    scores: `v3_layout.SCORES_PATH`), whose columns the rows are then written without (a dataset whose rows
    hold them, converted before the scores file, has every file written again once without them)."""
    info = read_info(root)
    if info is None:
        info = v3_layout.new_info(fps, robot_type, features)
    elif info["fps"] != fps:
        raise ValueError(f"{root}: dataset is at {info['fps']} fps, not {fps}")
    ep0, frame0 = int(info["total_episodes"]), int(info["total_frames"])
    task_index = {t: i for i, t in enumerate(_tasks(root))}
    for e in eps:
        task_index.setdefault(e.task, len(task_index))
    data_ci, data_fi = v3_layout.chunk_file(_next_file(root, "data/chunk-*/file-*.parquet", int(info["chunks_size"])),
                                     int(info["chunks_size"]))
    order = [f for f in info["features"] if info["features"][f]["dtype"] != "video"]
    rows: list[dict[str, Any]] = []
    tables = []
    cursor = frame0
    for k, e in enumerate(eps):
        n = e.length
        c = dict(e.columns)
        c["episode_index"] = np.full(n, ep0 + k, np.int64)
        c["index"] = np.arange(cursor, cursor + n, dtype=np.int64)
        c["task_index"] = np.full(n, task_index[e.task], np.int64)
        for key in ("episode_index", "index", "task_index"):
            e.stats[key] = v3_layout.feature_stats(c[key])
        tables.append(pa.table({f: v3_layout.arrow_column(c[f], info["features"][f]["dtype"]) for f in order}))
        rows.append({"episode_index": ep0 + k, "tasks": [e.task], "length": n, "data/chunk_index": data_ci,
                     "data/file_index": data_fi, "dataset_from_index": cursor, "dataset_to_index": cursor + n})
        cursor += n
    data_rel = v3_layout.DATA_PATH.format(chunk_index=data_ci, file_index=data_fi)
    (stage / data_rel).parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.concat_tables(tables), stage / data_rel)
    new = [data_rel]
    fault(f"stage {data_rel}")
    _write_videos(root, stage, eps, info, rows, new)
    for row, e in zip(rows, eps, strict=True):
        for feat, st in e.stats.items():
            for s in v3_layout.STAT_NAMES:
                row[f"stats/{feat}/{s}"] = np.asarray(st[s]).tolist()
        row.update(e.extra)
    added = pa.Table.from_pylist(rows)
    drop: list[str] = []
    rewrite = False
    if scores is not None:
        side = scores(added)
        drop = [c for c in side.column_names if c != "episode_index"]
        rewrite = not (root / v3_layout.SCORES_PATH).is_file()  # rows that hold the scores: without them
        (stage / v3_layout.SCORES_PATH).parent.mkdir(parents=True, exist_ok=True)
        # rewritten whole at every append: no dictionaries (its ids and floats are all distinct: 11 -> 6 ms
        # of CPU at 10,000 episodes, the same size)
        pq.write_table(side, stage / v3_layout.SCORES_PATH, use_dictionary=False)
        fault(f"stage {v3_layout.SCORES_PATH}")
    new += place_rows(root, stage, added, int(info["chunks_size"]), drop, rewrite)
    ordered = sorted(task_index, key=lambda t: task_index[t])
    pd.DataFrame({"task_index": [task_index[t] for t in ordered]},
                 index=pd.Index(ordered, name="task")).to_parquet(stage / v3_layout.TASKS_PATH)
    fault(f"stage {v3_layout.TASKS_PATH}")
    v3_layout.write_json(stage / v3_layout.STATS_PATH, v3_layout.stats_to_json(_stats(root, rows, info)))
    fault(f"stage {v3_layout.STATS_PATH}")
    total = ep0 + len(eps)
    info.update(total_episodes=total, total_frames=cursor, total_tasks=len(task_index), splits={"train": f"0:{total}"})
    info.update(info_keys or {})
    v3_layout.write_json(stage / v3_layout.INFO_PATH, info)
    fault(f"stage {v3_layout.INFO_PATH}")
    return list(range(ep0, total)), new
