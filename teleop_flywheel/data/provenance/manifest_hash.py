"""What a manifest hashes: everything training reads, per episode, so an append never invalidates
a manifest of earlier episodes and a change names the file and the episode.

Per episode (besides the data rows of `manifest.identities`):
- `row_sha256`: its row of the episodes table (`meta/episodes/*/*.parquet`: outcome, operator,
  tasks, length, per-episode stats, ids, ...), without the columns that only say where it is
  (`episode_index`, `dataset_from/to_index`, `data/*`, `videos/*`, `meta/episodes/*`), without the
  curation columns (`episode_table.CURATION_COLUMNS`: derived from the data rows and relative to the
  dataset, so an append rewrites them; a manifest made with a filter checks the values of the
  columns it used instead) and without its nulls: a parquet table gives every row every column, so
  appending an episode with a column the older rows lack (a later converter's, a new camera's lag)
  gives them nulls there, which must not change their hash;
- `task_sha256`: the task texts `meta/tasks.parquet` gives the task_index values of its rows;
- `videos`: per video feature, SHA-256 over the compressed packets (pts and bytes) of its range
  `[from_timestamp, to_timestamp)` in its mp4, read by demuxing (never decoded); the file is named.
Per dataset: `files` — every data parquet and mp4 holding a manifest episode, hashed whole and
streamed (they are never changed after they are written) — and `info_sha256` over the info.json
keys training depends on (fps, features, robot type, layout).
"""
from __future__ import annotations

import hashlib
import json
import math
from collections import defaultdict
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from teleop_flywheel.data.errors import DatasetError
from teleop_flywheel.data.lerobot.dataset import LeRobotDataset
from teleop_flywheel.data.lerobot.episode_table import CURATION_COLUMNS

LOCATION_PREFIXES = ("data/", "videos/", "meta/episodes/")
LOCATION_COLUMNS = ("episode_index", "dataset_from_index", "dataset_to_index")
INFO_KEYS = ("codebase_version", "robot_type", "fps", "features", "chunks_size", "data_path", "video_path")
DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def _plain(value: Any) -> Any:
    """A table cell as plain JSON, the same however pandas typed the column: appending a row with a
    null makes an int column float, so integral floats are ints and NaN is null."""
    if isinstance(value, np.ndarray):
        return [_plain(v) for v in value.tolist()]
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float):
        if math.isnan(value):
            return None
        if value.is_integer() and abs(value) < 2**53:
            return int(value)
    if value is pd.NA:
        return None
    return value


def episode_rows(ds: LeRobotDataset) -> pd.DataFrame:
    """The whole episodes table (with the stats columns the reader skips), by episode_index."""
    frames = []
    for path in sorted((ds.files / "meta" / "episodes").rglob("*.parquet")):
        try:
            frames.append(pq.read_table(path).to_pandas())
        except Exception as exc:  # noqa: BLE001
            raise DatasetError(f"{path}: unreadable episodes table: {exc}") from None
    return pd.concat(frames, ignore_index=True).set_index("episode_index", drop=False)


def row_fields(row: dict[str, Any]) -> dict[str, Any]:
    """An episodes-table row as plain JSON, without the columns that say where the episode is and
    the curation columns (derived, rewritten at every append; a filter's are checked by value)."""
    return {k: _plain(v) for k, v in sorted(row.items())
            if k not in LOCATION_COLUMNS and not k.startswith(LOCATION_PREFIXES) and k not in CURATION_COLUMNS}


def plain(value: Any) -> Any:
    """A value as the manifest stores it (JSON; NaN as null, integral floats as ints)."""
    return _plain(value)


def fields_sha256(fields: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(fields, sort_keys=True, default=str).encode()).hexdigest()


def row_sha256(row: dict[str, Any]) -> str:
    return fields_sha256({k: v for k, v in row_fields(row).items() if v is not None})


def task_sha256(texts: list[str]) -> str:
    return hashlib.sha256("\x00".join(texts).encode()).hexdigest()


def manifest_sha256(manifest: dict[str, Any]) -> str:
    """A manifest's own digest (its JSON with sorted keys, whatever its file's whitespace): what the
    lineage registry and a materialized dataset file it under."""
    return hashlib.sha256(json.dumps(manifest, sort_keys=True).encode()).hexdigest()


def info_sha256(info: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps({k: info.get(k) for k in INFO_KEYS}, sort_keys=True).encode()).hexdigest()


def data_file(row: dict[str, Any]) -> str | None:
    if "data/chunk_index" in row and "data/file_index" in row:
        return DATA_PATH.format(chunk_index=int(row["data/chunk_index"]), file_index=int(row["data/file_index"]))
    return None


def video_keys(ds: LeRobotDataset) -> list[str]:
    return [k for k, f in ds.features.items() if f.dtype == "video"]


def video_file(row: dict[str, Any], key: str) -> str | None:
    ci, fi = row.get(f"videos/{key}/chunk_index"), row.get(f"videos/{key}/file_index")
    if ci is None or fi is None:
        return None
    return VIDEO_PATH.format(video_key=key, chunk_index=int(ci), file_index=int(fi))


def video_hashes(root: Path, rel: str, ranges: dict[int, tuple[float, float]]) -> dict[int, str]:
    """{episode: sha256 of the packets whose pts lies in its [from, to) seconds} of one mp4."""
    hashes = {e: hashlib.sha256() for e in ranges}
    order = sorted(ranges.items(), key=lambda kv: kv[1][0])
    with av.open(str(root / rel)) as container:
        stream = container.streams.video[0]
        tb = stream.time_base
        if tb is None:
            raise DatasetError(f"{rel}: video stream without a time base")
        for packet in container.demux(stream):
            if packet.pts is None or packet.size == 0:
                continue
            t = float(Fraction(packet.pts) * tb)
            for e, (lo, hi) in order:
                if lo - 1e-6 <= t < hi - 1e-6:
                    hashes[e].update(f"{packet.pts}|{packet.size}|".encode())
                    hashes[e].update(bytes(packet))
                    break
    return {e: h.hexdigest() for e, h in hashes.items()}


def episode_parts(ds: LeRobotDataset, episodes: list[int], task_indices: dict[int, list[int]]
                  ) -> tuple[dict[int, dict[str, Any]], dict[str, str]]:
    """({episode: row_sha256, task_sha256, data_file, videos {key: {file, sha256}}}, {file: sha256})."""
    rows = episode_rows(ds)
    out: dict[int, dict[str, Any]] = {}
    files: set[str] = set()
    per_file: dict[tuple[str, str], dict[int, tuple[float, float]]] = defaultdict(dict)
    for e in episodes:
        row = rows.loc[e].to_dict() if e in rows.index else {}
        texts = [ds.tasks.get(i, f"<task_index {i} missing>") for i in task_indices.get(e, [])]
        part: dict[str, Any] = {"row_sha256": row_sha256(row), "task_sha256": task_sha256(texts), "videos": {}}
        if (rel := data_file(row)) is not None:
            part["data_file"] = rel
            files.add(rel)
        for key in video_keys(ds):
            vrel = video_file(row, key)
            lo, hi = row.get(f"videos/{key}/from_timestamp"), row.get(f"videos/{key}/to_timestamp")
            if vrel is None or lo is None or hi is None:
                continue
            files.add(vrel)
            part["videos"][key] = {"file": vrel}
            per_file[(key, vrel)][e] = (float(lo), float(hi))
        out[e] = part
    for (key, vrel), ranges in per_file.items():
        try:
            digests = video_hashes(ds.files, vrel, ranges)
        except (DatasetError, OSError, av.error.FFmpegError, ValueError) as exc:
            digests = {e: f"unreadable: {exc}" for e in ranges}
        for e, digest in digests.items():
            out[e]["videos"][key]["sha256"] = digest
    hashed = {rel: (file_sha256(ds.files / rel) if (ds.files / rel).is_file() else "missing") for rel in sorted(files)}
    return out, hashed


def compare_parts(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """What differs between an episode's frozen parts and its current ones, naming the file."""
    out = []
    if old.get("row_sha256") != new.get("row_sha256"):
        out.append("episodes-table fields (meta/episodes: outcome, operator, tasks, stats, ...)")
    if old.get("task_sha256") != new.get("task_sha256"):
        out.append("task text (meta/tasks.parquet)")
    for key, v in sorted((old.get("videos") or {}).items()):
        now = (new.get("videos") or {}).get(key, {})
        if now.get("sha256") != v.get("sha256") or now.get("file") != v.get("file"):
            out.append(f"video {key} ({now.get('file') or v.get('file')})")
    return out
