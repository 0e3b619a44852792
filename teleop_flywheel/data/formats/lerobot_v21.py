"""A LeRobot v2.1 dataset → LeRobot v3.0, as LeRobot's own converter (0.4.x's
`lerobot/datasets/v30/convert_dataset_v21_to_v30.py`) writes it, but local, checked first and atomic.

v2.1 (LeRobot 0.1-0.3): `meta/info.json` (codebase_version "v2.1"), `meta/episodes.jsonl`
(episode_index, tasks, length), `meta/tasks.jsonl`, `meta/episodes_stats.jsonl` (per-episode stats,
no quantiles), one `data/chunk-C/episode_E.parquet` and one `videos/chunk-C/<key>/episode_E.mp4`
per episode and camera (the paths info.json's `data_path`/`video_path` give).

Every file is checked before anything is written: info.json says v2.1, each feature's names fit
its shape; the three jsonl files parse and list episodes 0..N-1 (info.json's total) with stats
for each; each episode's parquet is there with the features' columns and no others, `length`
rows of its episode, a vector as wide as its feature names (a dataset whose joints are not the
ones it names is refused) and known task indices; each camera's mp4 is there, opens, has the
episode's frame count and the feature's size and its camera's codec. The first bad file is one
error naming it and what is wrong, exit 1, and nothing is written. A dataset of any robot
migrates: the migration is of the format, it maps no joints (hdf5-aloha does, and refuses all but
the SO-101's).

Then, as LeRobot's converter: the data rows are copied unchanged, episode by episode, into
`data/chunk-XXX/file-XXX.parquet` (a new file once one reaches info's `data_files_size_in_mb`);
each camera's mp4s remuxed back to back (packets copied, never re-encoded: the frames are the
source's) into `videos/<key>/chunk-XXX/file-XXX.mp4` (a new file before one would reach
`video_files_size_in_mb`), each episode's `[from_timestamp, to_timestamp)` where its frames
landed; the episodes table is each episodes.jsonl row with its data and video places, its carried
stats (`stats/<feature>/<stat>`) and `meta/episodes/*` indices; tasks.parquet the tasks;
stats.json the stats aggregated as LeRobot aggregates them (quantiles only where every episode
has them: none for v2.1); info.json the source's with codebase_version "v3.0", the v3.0 paths and
file sizes, an integer fps, `fps` on each non-video feature, without total_chunks/total_videos,
plus `imported_from`. Where LeRobot's converter names the wrong data file for the episode that
starts a new one (it records the file before it rolls over), this names the file the rows are in.
Written as every dataset is (`data/lerobot/commit/`): staged, then published as OUT's first
version, so OUT is whole or absent.
"""
from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import av
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from teleop_flywheel.core.errors import UsageError
from teleop_flywheel.core.files import inside
from teleop_flywheel.core.progress import progress
from teleop_flywheel.data.errors import V21InputError
from teleop_flywheel.data.formats import ImportRequest
from teleop_flywheel.data.formats.common.format_options import PARALLEL_OPTIONS, refuse_options
from teleop_flywheel.data.formats.common.staged_output import Imported, refuse_existing
from teleop_flywheel.data.lerobot import commit, v3_layout

FORMAT = "lerobot-v2.1"
V21 = "v2.1"
INFO = "meta/info.json"
EPISODES = "meta/episodes.jsonl"
TASKS = "meta/tasks.jsonl"
EPISODES_STATS = "meta/episodes_stats.jsonl"
ALOHA_ONLY = ("task", "fps", "codec", "robot_type")  # import options a v2.1 dataset states itself
MB = 1024 * 1024


def _bad(path: Path, what: str) -> V21InputError:
    return V21InputError(f"{path}: {what}; nothing was written")


@dataclass
class Episode:
    """One checked episode: its episodes.jsonl row, carried stats, data file and videos."""

    index: int
    row: dict[str, Any]
    stats: dict[str, dict[str, Any]]
    data: Path
    rows: int
    data_bytes: int
    videos: dict[str, Path] = field(default_factory=dict)
    frames: dict[str, int] = field(default_factory=dict)  # video key -> frames in its mp4


@dataclass
class Source:
    root: Path
    info: dict[str, Any]
    tasks: dict[int, str]
    episodes: list[Episode]

    @property
    def video_keys(self) -> list[str]:
        return sorted(k for k, f in self.info["features"].items() if f["dtype"] == "video")


def _jsonl(path: Path, fields: dict[str, type]) -> list[dict[str, Any]]:
    """The rows of a jsonl file, each with `fields` of their types."""
    if not path.is_file():
        raise _bad(path, "missing (a v2.1 dataset has meta/episodes.jsonl, tasks.jsonl and episodes_stats.jsonl)")
    out = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            raise _bad(path, f"line {n} is not JSON ({exc.msg})") from None
        if not isinstance(item, dict):
            raise _bad(path, f"line {n} is not a JSON object")
        for key, kind in fields.items():
            if not isinstance(item.get(key), kind) or isinstance(item.get(key), bool):
                raise _bad(path, f"line {n} has no {key!r} ({kind.__name__})")
        out.append(item)
    return out


def _read_info(root: Path) -> dict[str, Any]:
    path = root / INFO
    if not path.is_file():
        raise _bad(path, "missing: not a LeRobot dataset")
    try:
        info = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise _bad(path, f"not JSON ({exc.msg})") from None
    version = info.get("codebase_version")
    if version != V21:
        hint = {"v3.0": "it is v3.0 already: use it as it is",
                "v2.0": "LeRobot's convert_dataset_v20_to_v21 brings it to v2.1 first"}.get(str(version), "")
        raise _bad(path, f"codebase_version is {version!r}, not {V21!r}" + (f" ({hint})" if hint else ""))
    for key in ("fps", "features", "data_path", "chunks_size", "total_episodes"):
        if key not in info:
            raise _bad(path, f"no {key!r}")
    for name, f in info["features"].items():
        names, shape = f.get("names"), f.get("shape")
        if f.get("dtype") in ("video", "image") or not isinstance(names, list) or not shape:
            continue
        if len(shape) == 1 and len(names) != shape[0]:
            raise _bad(path, f"feature {name} names {len(names)} values {names} for a shape of {shape[0]}")
    return info


def _check_data(path: Path, ep: int, length: int, info: dict[str, Any], tasks: dict[int, str]) -> tuple[int, int]:
    """The episode's parquet holds the features' columns, `length` rows of episode `ep`, vectors as
    wide as their feature names, known task indices. Returns its rows and its columns' uncompressed
    bytes (what LeRobot's converter measures a data file by)."""
    if not path.is_file():
        raise _bad(path, f"missing (the data of episode {ep})")
    try:
        meta = pq.read_metadata(path)
        schema = pq.read_schema(path)
    except (OSError, pa.ArrowException) as exc:
        raise _bad(path, f"not a readable parquet file ({exc})") from None
    columns = {f: spec for f, spec in info["features"].items() if spec["dtype"] != "video"}
    if missing := sorted((set(columns) | {"episode_index", "task_index"}) - set(schema.names)):
        raise _bad(path, f"no column {', '.join(missing)} (info.json's features)")
    if extra := sorted(set(schema.names) - set(columns)):
        raise _bad(path, f"column {', '.join(extra)} is not a feature of info.json")
    if meta.num_rows != length:
        raise _bad(path, f"{meta.num_rows} rows, episodes.jsonl says episode {ep} has {length}")
    vectors = [f for f, spec in columns.items() if spec["dtype"] != "image" and len(spec.get("shape") or []) == 1
               and spec["shape"][0] > 1]
    table = pq.read_table(path, columns=[*vectors, "episode_index", "task_index"])
    for f in vectors:
        want, column = columns[f]["shape"][0], table.column(f)
        if not pa.types.is_list(column.type) and not pa.types.is_fixed_size_list(column.type):
            raise _bad(path, f"column {f} is {column.type}, info.json says {want} values a frame")
        widths = set(pc.list_value_length(column).to_pylist())
        if widths != {want}:
            names = columns[f].get("names")
            raise _bad(path, f"column {f} holds {sorted(w for w in widths if w is not None)} values a frame, "
                             f"info.json names {want}" + (f" ({', '.join(map(str, names))})" if names else "")
                       + ": the joints are not the ones the dataset names")
    if set(table.column("episode_index").to_pylist()) != {ep}:
        raise _bad(path, f"episode_index is not {ep} in every row")
    if unknown := set(table.column("task_index").to_pylist()) - set(tasks):
        raise _bad(path, f"task_index {sorted(unknown)} not in {TASKS}")
    size = sum(meta.row_group(g).column(c).total_uncompressed_size
               for g in range(meta.num_row_groups) for c in range(meta.num_columns))
    return int(meta.num_rows), size


def _check_video(path: Path, ep: int, key: str, length: int, feature: dict[str, Any]) -> tuple[int, str]:
    """(frames, codec) of one episode's mp4 of camera `key`."""
    if not path.is_file():
        raise _bad(path, f"missing (the {key} video of episode {ep})")
    try:
        with av.open(str(path)) as c:
            if not c.streams.video:
                raise _bad(path, "no video stream")
            s = c.streams.video[0]
            frames, codec, size = int(s.frames), s.codec_context.codec.name, (s.height, s.width)
    except (av.error.FFmpegError, OSError) as exc:
        raise _bad(path, f"not a readable video ({exc})") from None
    if frames != length:
        raise _bad(path, f"{frames} frames, episodes.jsonl says episode {ep} has {length}")
    if tuple(feature["shape"][:2]) != size:
        raise _bad(path, f"{size[1]}x{size[0]}, info.json says {key} is {feature['shape'][1]}x{feature['shape'][0]}")
    return frames, codec


def read_source(root: Path) -> Source:
    """Check every file of the v2.1 dataset at `root` (footers, headers, the index columns); the
    first bad one is a V21InputError naming it."""
    if not root.is_dir():
        raise UsageError("not a directory", where=str(root), fix="give the root of a LeRobot v2.1 dataset")
    info = _read_info(root)
    tasks = {t["task_index"]: t["task"] for t in _jsonl(root / TASKS, {"task_index": int, "task": str})}
    legacy = sorted(_jsonl(root / EPISODES, {"episode_index": int, "tasks": list, "length": int}),
                    key=lambda r: int(r["episode_index"]))
    indices = [r["episode_index"] for r in legacy]
    if indices != list(range(len(legacy))) or len(legacy) != int(info["total_episodes"]):
        raise _bad(root / EPISODES, f"episodes {indices[:5]}{'...' if len(indices) > 5 else ''}: not 0..N-1 "
                                    f"for info.json's total_episodes {info['total_episodes']}")
    stats = {s["episode_index"]: s["stats"]
             for s in _jsonl(root / EPISODES_STATS, {"episode_index": int, "stats": dict})}
    chunks = int(info["chunks_size"])
    codecs: dict[str, str] = {}
    episodes = []
    for row in legacy:
        ep = int(row["episode_index"])
        if ep not in stats:
            raise _bad(root / EPISODES_STATS, f"no stats of episode {ep}")
        places = {"episode_chunk": ep // chunks, "episode_index": ep}
        # paths from a foreign info.json: below its folder by name (its files may be links into a cache)
        data = inside(root, info["data_path"].format(**places), follow_symlinks=False)
        e = Episode(ep, row, stats[ep], data, *_check_data(data, ep, int(row["length"]), info, tasks))
        for key in sorted(k for k, f in info["features"].items() if f["dtype"] == "video"):
            mp4 = inside(root, info["video_path"].format(video_key=key, **places), follow_symlinks=False)
            e.frames[key], codec = _check_video(mp4, ep, key, e.rows, info["features"][key])
            if codecs.setdefault(key, codec) != codec:
                raise _bad(mp4, f"codec {codec}, episode 0's {key} video is {codecs[key]}: one file cannot hold both")
            e.videos[key] = mp4
        episodes.append(e)
    return Source(root, info, tasks, episodes)


def _groups(sizes: list[int], limit_mb: float) -> list[list[int]]:
    """Consecutive runs of episodes per file, as LeRobot's converter cuts them: a new file before
    the episode that would bring the current one to the limit (data: the parquet columns'
    uncompressed bytes; video: the mp4's bytes)."""
    limit = limit_mb * MB
    groups: list[list[int]] = [[]]
    size = 0
    for k, part in enumerate(sizes):
        if groups[-1] and size + part >= limit:
            groups.append([])
            size = 0
        groups[-1].append(k)
        size += part
    return groups


def _write_data(src: Source, stage: Path, rows: list[dict[str, Any]], limit_mb: float, bar: Any) -> None:
    """Each episode's rows, unchanged, appended to the data file it falls in (one episode in memory)."""
    cursor = 0
    groups = _groups([e.data_bytes for e in src.episodes], limit_mb)
    for number, group in enumerate(groups):
        ci, fi = v3_layout.chunk_file(number)
        rel = v3_layout.DATA_PATH.format(chunk_index=ci, file_index=fi)
        (stage / rel).parent.mkdir(parents=True, exist_ok=True)
        writer: pq.ParquetWriter | None = None
        try:
            for k in group:
                e = src.episodes[k]
                table = pq.read_table(e.data)
                if writer is None:
                    writer = pq.ParquetWriter(stage / rel, table.schema)
                writer.write_table(table.cast(writer.schema))
                rows[k].update({"data/chunk_index": ci, "data/file_index": fi, "dataset_from_index": cursor,
                                "dataset_to_index": cursor + e.rows})
                cursor += e.rows
                bar.update(1)
        finally:
            if writer is not None:
                writer.close()


def _write_videos(src: Source, stage: Path, key: str, rows: list[dict[str, Any]], limit_mb: float, bar: Any) -> None:
    """One camera's episode mp4s remuxed back to back; each episode's span where its frames landed."""
    fps = int(src.info["fps"])
    groups = _groups([e.videos[key].stat().st_size for e in src.episodes], limit_mb)
    for number, group in enumerate(groups):
        ci, fi = v3_layout.chunk_file(number)
        v3_layout.concat_videos([src.episodes[k].videos[key] for k in group],
                         inside(stage, v3_layout.VIDEO_PATH.format(video_key=key, chunk_index=ci, file_index=fi)))
        t = 0.0
        for k in group:
            end = t + src.episodes[k].frames[key] / fps
            rows[k].update({f"videos/{key}/chunk_index": ci, f"videos/{key}/file_index": fi,
                            f"videos/{key}/from_timestamp": t, f"videos/{key}/to_timestamp": end})
            t = end
        bar.update(len(group))


def v30_info(src: Source) -> dict[str, Any]:
    """info.json as LeRobot's `convert_info` makes it, plus where it came from."""
    info = copy.deepcopy(src.info)
    info["codebase_version"] = v3_layout.CODEBASE_VERSION
    info.pop("total_chunks", None)
    info.pop("total_videos", None)
    info["data_files_size_in_mb"] = v3_layout.DEFAULT_DATA_FILE_SIZE_IN_MB
    info["video_files_size_in_mb"] = v3_layout.DEFAULT_VIDEO_FILE_SIZE_IN_MB
    info["data_path"] = v3_layout.DATA_PATH
    info["video_path"] = v3_layout.VIDEO_PATH if info.get("video_path") is not None else None
    info["fps"] = int(info["fps"])
    for feature in info["features"].values():
        if feature["dtype"] != "video":
            feature["fps"] = info["fps"]
    info["imported_from"] = {"format": FORMAT, "directory": str(src.root.resolve())}
    return info


def _write_meta(src: Source, stage: Path, info: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    for row, e in zip(rows, src.episodes, strict=True):
        row.update(e.row)
        for feature, stats in e.stats.items():
            row.update({f"stats/{feature}/{name}": value for name, value in stats.items()})
        row.update({"meta/episodes/chunk_index": 0, "meta/episodes/file_index": 0})
    episodes = stage / v3_layout.EPISODES_PATH.format(chunk_index=0, file_index=0)
    episodes.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), episodes)
    order = sorted(src.tasks)
    pd.DataFrame({"task_index": order}, index=pd.Index([src.tasks[i] for i in order], name="task")) \
        .to_parquet(stage / v3_layout.TASKS_PATH)
    per_episode = [{f: {s: np.asarray(v) for s, v in st.items()} for f, st in e.stats.items()} for e in src.episodes]
    v3_layout.write_json(stage / v3_layout.STATS_PATH, v3_layout.stats_to_json(v3_layout.aggregate_stats(per_episode)))
    v3_layout.write_json(stage / v3_layout.INFO_PATH, info)


def import_v21(root: Path, out: Path, show_progress: bool = True) -> Imported:
    """Migrate the v2.1 dataset at `root` to a v3.0 dataset at `out` (which must not exist), atomically."""
    out = refuse_existing(out)
    src = read_source(root)
    info = v30_info(src)
    rows: list[dict[str, Any]] = [{"episode_index": e.index} for e in src.episodes]
    steps = len(src.episodes) * (1 + len(src.video_keys))
    with commit.new_dataset(out) as stage, \
            progress(steps, "import" if show_progress else None, unit="file") as bar:
        _write_data(src, stage, rows, float(info["data_files_size_in_mb"]), bar)
        for key in src.video_keys:
            _write_videos(src, stage, key, rows, float(info["video_files_size_in_mb"]), bar)
        _write_meta(src, stage, info, rows)
    return Imported(out, len(src.episodes), sum(e.rows for e in src.episodes))


def run_import(req: ImportRequest) -> Imported:
    """`import --from lerobot-v2.1 SRC OUT` (cli/verbs/import_.py)."""
    refuse_options(req, (*ALOHA_ONLY, *PARALLEL_OPTIONS), FORMAT,
                   "leave it out: a v2.1 dataset states its tasks, fps, codec and robot type, and its videos are "
                   "remuxed in this process, not re-encoded (as fast as LeRobot's own converter)")
    return import_v21(req.source, req.out)
