"""`teleop-flywheel manifest episodes|materialize`: a frozen manifest turned into what training reads.

- `episodes MANIFEST`: the dataset's CURRENT episode indices of the manifest's episodes (matched by
  episode_id, so a dataset that gained or renumbered episodes still answers), in the form LeRobot's
  CLI takes: `--dataset.episodes='[0, 3, 4]'`;
- `materialize MANIFEST OUT [--resolution WxH]`: a standalone LeRobot v3.0 dataset of exactly those
  episodes, renumbered 0..N-1 in their current order: the data rows copied (positional columns
  renumbered), the episodes table with every column (ours included), the tasks they use, per-episode
  and dataset stats recomputed over the kept frames, `meta/sample_weights.parquet` (kept episodes,
  weights normalised again) when the source has one. Videos are remuxed (`format.remux`: packets
  copied, byte-identical) or, with `--resolution`, decoded and encoded once at that size with the
  converter's encoder (`format.VideoEncoder`). info.json `materialized_from` records the manifest
  (path, sha256, fingerprint) and the source dataset; `lineage which OUT` reads it. A source of an
  older layout of ours (`data/lerobot/flywheel_schema.py`: the leader's reading as
  `observation.leader_state`, a policy input) gives a dataset of the current one, as `migrate`
  would: training never sees the leader as an observation.

Both verify first (`manifest.verify`, as `verify --subset`: the dataset may hold more). Episodes
are found by id, not by the manifest's filter, which may name positions. A manifest episode missing
or changed (data rows, episodes-table fields, task text, video packets), a changed video file or
info.json is an error, one line per difference, exit 1. A data parquet changed as a whole is not:
renumbering rewrites the parquet that holds an episode, and the episode's own rows are proven by
their `data_sha256`.

Atomic as `convert` (`data/lerobot/commit/`): everything is written into the staging directory
of OUT's first version (under OUT's lock) and published at the end, OUT a pointer to it. An OUT that
exists is refused before anything is written; a crash leaves no OUT, and what it left beside it is
removed by the next run (or `teleop-flywheel doctor --repair OUT`).
"""
from __future__ import annotations

import datetime as dt
import json
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
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
from teleop_flywheel.data.errors import DatasetError, ManifestMismatch
from teleop_flywheel.data.lerobot import commit, v3_layout
from teleop_flywheel.data.lerobot.dataset import EPISODES_DIR, LeRobotDataset, episode_spans, score_columns, to_numpy
from teleop_flywheel.data.lerobot.flywheel_schema import SCHEMA_KEY, SCHEMA_VERSION, pending_renames, renamed_column
from teleop_flywheel.data.provenance.manifest import identities, load_manifest, verify
from teleop_flywheel.data.provenance.manifest_hash import manifest_sha256, video_file, video_keys

PROVENANCE_KEY = "materialized_from"
_RESOLUTION = re.compile(r"^(\d+)x(\d+)$")


@dataclass
class Located:
    """A verified manifest and its dataset: {episode_id: the episode's current index}."""

    path: Path
    manifest: dict[str, Any]
    ds: LeRobotDataset
    current: dict[str, int]

    @property
    def episodes(self) -> list[int]:
        return sorted(self.current.values())


def locate(manifest_path: Path, dataset: Path | None = None) -> Located:
    """Load the manifest, open its dataset (or `dataset`), verify it holds every manifest episode
    unchanged, and find each one's current index; ManifestMismatch naming every difference."""
    manifest = load_manifest(manifest_path)
    return _verified(manifest_path, manifest, LeRobotDataset.open(dataset or manifest["dataset"]))


@contextmanager
def located(manifest_path: Path, dataset: Path | None = None) -> Iterator[Located]:
    """`locate`, the dataset's current version pinned and leased until the block ends
    (`commit.pinned`): everything read through `Located.ds` (`ds.files`) is that one version, however
    long the block lasts and whatever commits follow; `ds.root` stays the dataset's path."""
    manifest = load_manifest(manifest_path)
    root = dataset or manifest["dataset"]
    with commit.pinned(root) as files:
        yield _verified(manifest_path, manifest, LeRobotDataset.open(root, files=files))


def _verified(manifest_path: Path, manifest: dict[str, Any], ds: LeRobotDataset) -> Located:
    # Episodes are found by id, so the manifest's filter (which may name positions) is not applied
    # again, and whole-file hashes of data parquets are left out (module docstring).
    files = {rel: d for rel, d in (manifest.get("files") or {}).items() if not rel.startswith("data/")}
    result = verify(ds, dict(manifest, files=files, filter=[]), subset=True)
    if not result.ok:
        lines = result.lines()
        raise ManifestMismatch(f"{ds.root}: differs from manifest {manifest_path} in {len(lines)} place(s), "
                               "listed above; nothing was written", lines)
    wanted = {m["episode_id"] for m in manifest["episodes"]}
    current = {e.episode_id: e.episode_index for e in identities(ds) if e.episode_id in wanted}
    return Located(manifest_path, manifest, ds, current)


def lerobot_argument(episodes: list[int]) -> str:
    """The episode list as LeRobot's CLI (draccus) takes it."""
    return f"--dataset.episodes='{json.dumps(episodes)}'"


def parse_resolution(text: str) -> tuple[int, int]:
    """(width, height) of `WxH`; both even (yuv420p halves them for colour)."""
    m = _RESOLUTION.match(text.strip())
    if not m or int(m.group(1)) < 2 or int(m.group(2)) < 2 or int(m.group(1)) % 2 or int(m.group(2)) % 2:
        raise UsageError(f"bad resolution {text!r}", where="--resolution",
                         fix="give WIDTHxHEIGHT in pixels, both even, e.g. 224x224")
    return int(m.group(1)), int(m.group(2))


# --------------------------------------------------------------------------- materialize
@dataclass
class Materialized:
    root: Path
    episodes: int
    frames: int
    videos: str  # "remuxed" or "re-encoded at WxH"


def _episodes_table(ds: LeRobotDataset) -> pa.Table:
    """Every row of the episodes files, with the columns our scores file holds beside them (the curation
    scores: `dataset.score_columns`), which the materialized dataset's rows carry as they are."""
    files = sorted((ds.files / EPISODES_DIR).rglob("*.parquet"))
    table = pa.concat_tables([pq.read_table(p) for p in files], promote_options="permissive")
    for name, column in score_columns(ds.files, table.column("episode_index").to_numpy(), table.column_names).items():
        table = table.append_column(name, column)
    return table


def _lookup(order: list[int]) -> np.ndarray:
    """old index -> new index (-1: not kept)."""
    lut = np.full(max(order) + 1, -1, dtype=np.int64)
    lut[order] = np.arange(len(order))
    return lut


def _kept_rows(ds: LeRobotDataset, order: list[int]) -> tuple[pa.Table, list[str]]:
    """The kept episodes' data rows in the new order (frame order within), `episode_index`, `index`
    and `task_index` renumbered; and the task texts of the new task indices."""
    keep = pa.array(order, pa.int64())
    parts = []
    for path in ds.data_files():
        table = pq.read_table(path)
        parts.append(table.filter(pc.is_in(table["episode_index"], value_set=keep)))
    table = pa.concat_tables(parts, promote_options="permissive")
    new_ep = _lookup(order)[table["episode_index"].to_numpy()]
    frame = table["frame_index"].to_numpy() if "frame_index" in table.column_names else np.zeros(len(new_ep))
    perm = np.lexsort((frame, new_ep))
    table = table.take(pa.array(perm))
    columns = {"episode_index": new_ep[perm], "index": np.arange(len(perm), dtype=np.int64)}
    texts: list[str] = []
    if "task_index" in table.column_names:
        old_tasks = table["task_index"].to_numpy()
        used = np.unique(old_tasks)
        columns["task_index"] = np.searchsorted(used, old_tasks).astype(np.int64)
        texts = [ds.tasks.get(int(t), "") for t in used]
    for name, values in columns.items():
        if name in table.column_names:
            i = table.schema.get_field_index(name)
            table = table.set_column(i, table.schema.field(i), pa.array(values, type=table.schema.field(i).type))
    return table, texts


def _numeric_stats(info: dict[str, Any], table: pa.Table, spans: list[tuple[int, int]]
                   ) -> list[dict[str, dict[str, np.ndarray]]]:
    """Per-episode stats of every non-visual feature, over the kept rows."""
    names = [f for f, spec in info["features"].items()
             if spec.get("dtype") not in ("video", "image", "string") and f in table.column_names]
    arrays = {f: to_numpy(table[f], f) for f in names}
    return [{f: v3_layout.feature_stats(a[lo:hi]) for f, a in arrays.items()} for lo, hi in spans]


def _groups(sizes: list[float], limit: float) -> list[list[int]]:
    """Consecutive items into groups of at most `limit` (an item larger than it stands alone)."""
    groups: list[list[int]] = [[]]
    total = 0.0
    for k, size in enumerate(sizes):
        if groups[-1] and total + size > limit:
            groups.append([])
            total = 0.0
        groups[-1].append(k)
        total += size
    return groups


def _write_data(stage: Path, info: dict[str, Any], table: pa.Table, spans: list[tuple[int, int]],
                rows: list[dict[str, Any]]) -> None:
    limit = int(info["data_files_size_in_mb"]) * 1024 * 1024
    chunks = int(info["chunks_size"])
    for file_no, group in enumerate(_groups([table.slice(lo, hi - lo).nbytes for lo, hi in spans], limit)):
        ci, fi = v3_layout.chunk_file(file_no, chunks)
        rel = v3_layout.DATA_PATH.format(chunk_index=ci, file_index=fi)
        (stage / rel).parent.mkdir(parents=True, exist_ok=True)
        lo, hi = spans[group[0]][0], spans[group[-1]][1]
        pq.write_table(table.slice(lo, hi - lo), stage / rel)
        commit.fault(f"stage {rel}")
        for k in group:
            rows[k].update({"data/chunk_index": ci, "data/file_index": fi,
                            "dataset_from_index": spans[k][0], "dataset_to_index": spans[k][1]})


def span_frames(path: Path, lo: float, hi: float) -> Iterator[av.VideoFrame]:
    """The decoded frames whose pts lies in [lo, hi) seconds of an mp4 (the rule `format.remux` copies by)."""
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        tb = stream.time_base
        if tb is None:
            raise DatasetError(f"{path}: video stream without a time base")
        container.seek(int(lo / tb), stream=stream, backward=True, any_frame=False)
        for frame in container.decode(stream):
            if frame.pts is None:
                continue
            t = float(frame.pts * tb)
            if t >= hi - 1e-6:
                return
            if t >= lo - 1e-6:
                yield frame


def _reencode(parts: list[tuple[Path, float, float, int]], path: Path, size: tuple[int, int], fps: int,
              codec: str, tick: Any) -> tuple[list[int], list[dict[str, np.ndarray]]]:
    """Decode each part's span, scale it to `size` and encode all back to back into `path` with the
    converter's encoder; (frames per part, image stats per part: LeRobot's sampled frames)."""
    width, height = size
    enc = v3_layout.VideoEncoder(path, width, height, fps, codec)
    counts, stats = [], []
    try:
        for src, lo, hi, length in parts:
            sample = set(v3_layout.sample_indices(length).tolist())
            images = []
            count = 0
            for frame in span_frames(src, lo, hi):
                scaled = frame.reformat(width=width, height=height, format="yuv420p")
                enc.add_i420(scaled.to_ndarray())
                if count in sample:
                    images.append(v3_layout.downsample(scaled.to_ndarray(format="rgb24")))
                count += 1
            counts.append(count)
            stats.append(v3_layout.image_stats(images) if images else {})
            tick(1)
    finally:
        enc.close()
    return counts, stats


def _write_videos(loc: Located, stage: Path, info: dict[str, Any], order: list[int], lengths: list[int],
                  rows: list[dict[str, Any]], per_episode: list[dict[str, dict[str, np.ndarray]]],
                  resolution: tuple[int, int] | None, codec: str, tick: Any) -> None:
    """Each video feature's kept episodes back to back into new files (rolled over at the size limit)."""
    src_rows = {int(r["episode_index"]): r for r in _episodes_table(loc.ds).to_pylist()}
    fps, chunks = int(info["fps"]), int(info["chunks_size"])
    limit = int(info["video_files_size_in_mb"]) * 1024 * 1024
    for key in video_keys(loc.ds):
        frames_in: dict[str, int] = {}
        for r in src_rows.values():
            if (rel := video_file(r, key)) is not None:
                frames_in[rel] = frames_in.get(rel, 0) + int(r["length"])
        parts: list[tuple[Path, float, float, int]] = []
        sizes = []
        for e, n in zip(order, lengths, strict=True):
            row = src_rows[e]
            rel = video_file(row, key)
            if rel is None:
                raise DatasetError(f"{loc.ds.root}: episode {e} has no {key} video in the episodes table")
            parts.append((loc.ds.files / rel, float(row[f"videos/{key}/from_timestamp"]),
                          float(row[f"videos/{key}/to_timestamp"]), n))
            sizes.append((loc.ds.files / rel).stat().st_size * n / max(frames_in[rel], 1))
        for file_no, group in enumerate(_groups(sizes, limit)):
            ci, fi = v3_layout.chunk_file(file_no, chunks)
            rel = v3_layout.VIDEO_PATH.format(video_key=key, chunk_index=ci, file_index=fi)
            inside(stage, rel)  # the video key is the source dataset's info.json
            chosen = [parts[k] for k in group]
            if resolution is None:
                counts = v3_layout.remux([(src, (lo, hi)) for src, lo, hi, _ in chosen], stage / rel)
                tick(len(group))
            else:
                counts, image_stats = _reencode(chosen, stage / rel, resolution, fps, codec, tick)
                for k, st in zip(group, image_stats, strict=True):
                    per_episode[k][key] = st
            commit.fault(f"stage {rel}")
            t = 0.0
            for k, count in zip(group, counts, strict=True):
                if count != lengths[k]:
                    raise DatasetError(f"{parts[k][0]}: episode {order[k]} has {count} frames of {key} in "
                                       f"[{parts[k][1]:.3f}, {parts[k][2]:.3f}) s, its length is {lengths[k]}")
                rows[k].update({f"videos/{key}/chunk_index": ci, f"videos/{key}/file_index": fi,
                                f"videos/{key}/from_timestamp": t})
                t += lengths[k] / fps
                rows[k][f"videos/{key}/to_timestamp"] = t
            if file_no == 0:
                feature = info["features"][key]
                feature["info"] = v3_layout.video_info(stage / rel)
                feature["shape"] = [feature["info"]["video.height"], feature["info"]["video.width"], 3]


def _write_episodes(stage: Path, source: pa.Table, order: list[int], rows: list[dict[str, Any]],
                    per_episode: list[dict[str, dict[str, np.ndarray]]]) -> None:
    """The kept rows of the source's episodes table (every column), renumbered, stats replaced."""
    for k, row in enumerate(rows):
        row.update({"episode_index": k, "meta/episodes/chunk_index": 0, "meta/episodes/file_index": 0})
        for feat, st in per_episode[k].items():
            for s in v3_layout.STAT_NAMES:
                row[f"stats/{feat}/{s}"] = np.asarray(st[s]).tolist()
    added = sorted({c for r in rows for c in r} - set(source.schema.names))
    schema = source.schema
    if added:
        for f in pa.Table.from_pylist([{c: r.get(c) for c in added} for r in rows]).schema:
            schema = schema.append(f)
    rel = v3_layout.EPISODES_PATH.format(chunk_index=0, file_index=0)
    (stage / rel).parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), stage / rel)
    commit.fault(f"stage {rel}")


def _write_weights(ds: LeRobotDataset, stage: Path, order: list[int]) -> bool:
    """The source's sample weights of the kept episodes, renumbered, normalised to sum to 1 again
    (the ratios, hence the sampling, unchanged); False if the source has none."""
    src = ds.files / v3_layout.SAMPLE_WEIGHTS_PATH
    if not src.is_file():
        return False
    table = pq.read_table(src)
    old = table["episode_index"].to_numpy()
    kept = np.flatnonzero(np.isin(old, order))
    new = _lookup(order)[old[kept]]
    table = table.take(pa.array(kept[np.argsort(new, kind="stable")]))
    columns = {"episode_index": np.sort(new)}
    if "weight" in table.column_names:
        w = table["weight"].to_numpy()
        columns["weight"] = w / w.sum() if w.sum() > 0 else w
    for name, values in columns.items():
        i = table.schema.get_field_index(name)
        table = table.set_column(i, table.schema.field(i), pa.array(values, type=table.schema.field(i).type))
    pq.write_table(table.replace_schema_metadata(pq.read_schema(src).metadata), stage / v3_layout.SAMPLE_WEIGHTS_PATH)
    return True


def _write_all(loc: Located, stage: Path, resolution: tuple[int, int] | None, codec: str, show: bool) -> Materialized:
    ds, order = loc.ds, loc.episodes
    info = json.loads(json.dumps(ds.info))
    table, texts = _kept_rows(ds, order)
    source = _episodes_table(ds)
    renames = pending_renames(info)  # training reads this dataset: always our current layout
    if renames:
        table = table.rename_columns([renamed_column(c, renames) for c in table.column_names])
        source = source.rename_columns([renamed_column(c, renames) for c in source.column_names])
        info["features"] = {renamed_column(k, renames): v for k, v in info["features"].items()}
        info[SCHEMA_KEY] = SCHEMA_VERSION
    spans_ = episode_spans(table["episode_index"].to_numpy())
    spans = list(zip(spans_.start.tolist(), spans_.stop.tolist(), strict=True))
    lengths = [hi - lo for lo, hi in spans]
    position = {int(e): i for i, e in enumerate(source["episode_index"].to_pylist())}
    rows = source.take(pa.array([position[e] for e in order])).to_pylist()
    per_episode = _numeric_stats(info, table, spans)
    for k, row in enumerate(rows):  # image stats of remuxed frames stay the source's (the same frames)
        per_episode[k].update(v3_layout.stats_from_episode_row(row, video_keys(ds)))
    _write_data(stage, info, table, spans, rows)
    keys = video_keys(ds)
    with progress(len(keys) * len(order), "materialize" if show and keys else None, unit="episode") as bar:
        _write_videos(loc, stage, info, order, lengths, rows, per_episode, resolution, codec, bar.update)
    _write_episodes(stage, source, order, rows, per_episode)
    pd.DataFrame({"task_index": list(range(len(texts)))}, index=pd.Index(texts, name="task")).to_parquet(
        stage / v3_layout.TASKS_PATH)
    v3_layout.write_json(stage / v3_layout.STATS_PATH, v3_layout.stats_to_json(v3_layout.aggregate_stats(per_episode)))
    weights = _write_weights(ds, stage, order)
    n, frames = len(order), int(sum(lengths))
    info.update(total_episodes=n, total_frames=frames, total_tasks=len(texts), splits={"train": f"0:{n}"})
    info[PROVENANCE_KEY] = {
        "manifest": str(loc.path.resolve()), "manifest_sha256": manifest_sha256(loc.manifest),
        "fingerprint": loc.manifest["fingerprint"], "dataset": os.path.abspath(ds.root),
        "source_episodes": order, "videos": "remuxed" if resolution is None else f"re-encoded {codec}",
        "resolution": None if resolution is None else f"{resolution[0]}x{resolution[1]}",
        "sample_weights": weights, "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }
    v3_layout.write_json(stage / v3_layout.INFO_PATH, info)
    commit.fault(f"stage {v3_layout.INFO_PATH}")
    what = "remuxed" if resolution is None else f"re-encoded at {resolution[0]}x{resolution[1]}"
    return Materialized(stage, n, frames, what if keys else "none")


def materialize(loc: Located, out: Path, resolution: tuple[int, int] | None = None, codec: str = "libsvtav1",
                show_progress: bool = True) -> Materialized:
    """Write the dataset of `loc`'s episodes at `out` (which must not exist), atomically."""
    out = Path(os.path.abspath(out))
    if not loc.current:
        raise UsageError("the manifest lists no episodes", where=str(loc.path), fix="create one that selects some")
    if os.path.lexists(out):
        raise UsageError("output already exists", where=str(out),
                         fix="choose a new OUT: a materialized dataset is written whole, never over anything")
    with commit.new_dataset(out) as stage:
        made = _write_all(loc, stage, resolution, codec, show_progress)
    made.root = out
    return made


def provenance(root: Path) -> dict[str, Any] | None:
    """The `materialized_from` record of a dataset, None if it was not materialized."""
    record = LeRobotDataset.open(root).info.get(PROVENANCE_KEY)
    return record if isinstance(record, dict) else None

