"""How costs grow with the dataset (issue 38), at 10, 100, 1,000 and 10,000 episodes by default.

Every cost is timed the median of its repeats, per episode where the work is over every episode, and
its growth fitted (`growth`: the slope of log(cost) over log(N), least squares; its spread the
slope's standard error; flat is 0). The issue's target: the cost at the largest N within 1.3x of
its cost at 100 (`vs_100`).

- `lineage` (`--sizes`): a registry of N checkpoints (one `Registry(...).save()`, each trained on a
  manifest of `--episodes` episodes, one manifest per `--share` checkpoints), then `register` of one
  more checkpoint on a new manifest file, `which` of one in the middle, `list` (`Registry.listing`,
  per entry) and the registry's size on disk.
- `dataset` (`--episode-sizes`): a synthetic dataset of N episodes of `--frames` frames (numeric
  columns: what these verbs read) and, per episode, `manifest create`, `manifest verify`, `manifest
  episodes`, `audit`, `curate --no-weights`, `stats`, `card` (each verb in this process through
  `cli.main`, its output discarded: what the user runs, without the interpreter's start), or the
  verbs named by `--dataset-verbs`. At other than `DATASET_FRAMES` frames per episode the family is
  kept as `dataset_<frames>f` (10,000 episodes of 1,000 frames: the issue's 10 million frames), beside
  the default's.
- `review` (`--review-sizes`): a folder of N rejected episodes (`bench/review.py`'s: one recorded and
  validated bag, hard-linked N times with its record) and the review page's episode list
  (`ReviewSite.episodes`): the first scan (every bag's metadata read) and a rescan (nothing
  changed), per episode.
  Both families build every size first, then take `--dataset-repeat` calls of each cost round-robin
  over the sizes (`_round_robin`), wall and CPU time (`*_cpu_*`: this process and the children it
  waited for), the median of each.
- `bags` (`--bag-sizes`): N distinct recorded episodes (2.5 s, one 192x144 camera at 30 fps, joints
  at 100 Hz: content that validates) and, per bag, `validate` and `convert` (h264, one worker: the
  throughput of one core), then `ingest`'s append of one more episode into that dataset of N: the
  convert of one more bag (`append_s`), less the same bag's convert into an empty dataset
  (`over_empty_s`: what the N already there cost the append; the encode is the same in both). Wall
  time and the CPU time of this process (`*_cpu_*`: the encode, in the encoder's own process, is not
  in it), which a shared machine inflates much less.
- `append` (`--append-sizes`): the same append of one more episode into datasets of N grown at the
  table level (`grow`) from `--append-base` converted bags, median of `--append-repeat` appends taken
  round-robin over the sizes, wall and CPU time: N = 10,000 without converting 10,000 bags (about an
  hour here).
- `files` (`--files-sizes`): the files of N one-at-a-time ingests (per ingest one data parquet and
  one mp4 per camera, `--cameras`; 1,000 files a chunk; the episodes files, 1,000 rows each; the
  eight other metadata files), counted by kind, and the commit of one more ingest (its new data file
  and mp4s, its replaced metadata files staged; `commit.publish`), CPU and wall, median of
  `--files-repeat`: with closed chunks carried whole (`shared`) and with every file linked
  (`linked`: sharing turned off, the commit as it was before it), and the seal's walk
  (`consistency._checked`, run before and after each convert's append) of each layout.

Usage: `python bench/scale.py [--only lineage dataset review bags] [--sizes ...] [--episode-sizes ...]
[--review-sizes ...] [--bag-sizes ...] [--append-sizes ...] [--out bench/results/scale.json] [--update]
[--plot docs/images/scale.png]`
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import math
import os
import resource
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from result_file import RESULTS, load_average, write_result

from teleop_flywheel.cli import main as cli_main
from teleop_flywheel.data.convert.converter import convert
from teleop_flywheel.data.convert.refresh import update_record, update_weights
from teleop_flywheel.data.curation.curate import COVERAGE_KEY, COVERAGE_RULE
from teleop_flywheel.data.curation.stored_scores import score_file, with_scores
from teleop_flywheel.data.lerobot import commit, v3_layout
from teleop_flywheel.data.lerobot.append import place_rows
from teleop_flywheel.data.lerobot.commit import store
from teleop_flywheel.data.lerobot.consistency import write_seal
from teleop_flywheel.data.lerobot.dataset import LeRobotDataset, read_scores
from teleop_flywheel.data.lerobot.episode_table import START_STATE
from teleop_flywheel.data.provenance.lineage import Registry, register_checkpoint
from teleop_flywheel.data.provenance.manifest import FORMAT as MANIFEST_FORMAT
from teleop_flywheel.data.provenance.manifest import create, verify
from teleop_flywheel.data.provenance.manifest_hash import manifest_sha256
from teleop_flywheel.data.review.server import ReviewSite
from teleop_flywheel.data.validate.dataset_record import read_verdicts
from teleop_flywheel.data.validate.reasons import ValidateConfig
from teleop_flywheel.data.validate.validator import validate_paths
from teleop_flywheel.testing.synthetic_dataset import SyntheticSpec, write
from teleop_flywheel.testing.synthetic_session import SessionSpec, write_session

FAMILIES = ("lineage", "dataset", "review", "bags", "append", "files")
DATASET_VERBS = ("create", "verify", "episodes", "audit", "curate", "stats", "card")
DATASET_FRAMES = 100
SIZES = [10, 100, 1000, 10000]


def _hex(*parts: object) -> str:
    return hashlib.sha256(repr(parts).encode()).hexdigest()


def _spent(fn: Callable[[], Any]) -> tuple[float, float]:
    """Wall and CPU seconds of one call; CPU counts this process and any child it waited for (`_cpu`
    alone would miss work a verb hands to a worker process)."""
    def cpu() -> float:
        own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime

    w0, c0 = time.perf_counter(), cpu()
    fn()
    return time.perf_counter() - w0, cpu() - c0


def _round_robin(calls: dict[int, dict[str, Callable[[], Any]]], repeat: int) -> dict[int, dict[str, float]]:
    """Per size and cost: the median wall and CPU ms per episode (`<cost>_ms_per_episode`,
    `<cost>_cpu_ms_per_episode`) of `repeat` calls, taken round-robin over the sizes so that a shared
    machine's load drifting during the run falls on every size alike."""
    spent: dict[tuple[int, str], list[tuple[float, float]]] = {}
    for _ in range(repeat):
        for n, costs in calls.items():
            for name, fn in costs.items():
                spent.setdefault((n, name), []).append(_spent(fn))
    out: dict[int, dict[str, float]] = {n: {} for n in calls}
    for (n, name), runs in spent.items():
        out[n][f"{name}_ms_per_episode"] = round(1e3 * statistics.median(w for w, _ in runs) / n, 4)
        out[n][f"{name}_cpu_ms_per_episode"] = round(1e3 * statistics.median(c for _, c in runs) / n, 4)
    return out


def manifest(seed: int, episodes: int) -> dict[str, Any]:
    """A manifest of the shape `manifest create` writes, its content ids distinct per seed."""
    eps = [{"episode_index": i, "episode_id": _hex(seed, i, "id"), "data_sha256": _hex(seed, i, "data"),
            "length": 300, "task": "pick the cube"} for i in range(episodes)]
    return {"format": MANIFEST_FORMAT, "dataset": f"/data/pick{seed}", "fingerprint": _hex(seed, "fp"),
            "filter": [], "episode_count": episodes, "frame_count": 300 * episodes,
            "created": "2026-12-06T00:00:00+00:00", "episodes": eps}


def build(path: Path, n: int, episodes: int, share: int) -> None:
    checkpoints = {}
    for k in range(0, n, share):
        m = manifest(k, episodes)
        sha = manifest_sha256(m)
        for c in range(k, min(n, k + share)):
            checkpoints[f"ckpt-{c:06d}"] = {"checkpoint": f"ckpt-{c:06d}", "run": f"run{k}",
                                            "manifest_path": f"/runs/run{k}.json", "manifest_sha256": sha,
                                            "registered": "2026-12-06T00:00:00+00:00", "manifest": m}
    Registry(path, checkpoints).save()


def size_on_disk(path: Path) -> int:
    return sum(p.stat().st_size for p in (path, path.with_name(path.name + "-wal")) if p.exists())


def measure(tmp: Path, sizes: list[int], episodes: int, share: int, repeat: int) -> list[dict[str, Any]]:
    """Every registry built first, then the repeats taken round-robin over the sizes, so the load
    of a shared machine drifting during the run weighs on every size alike."""
    paths, built = {}, {}
    for n in sizes:
        paths[n] = tmp / f"lineage{n}.sqlite"
        t0 = time.perf_counter()
        build(paths[n], n, episodes, share)
        built[n] = time.perf_counter() - t0
    register: dict[int, list[float]] = {n: [] for n in sizes}
    which: dict[int, list[float]] = {n: [] for n in sizes}
    listed: dict[int, list[float]] = {n: [] for n in sizes}
    for r in range(repeat):
        for n in sizes:
            mfile = tmp / f"new{n}_{r}.json"
            mfile.write_text(json.dumps(manifest(10**9 + r, episodes)))
            t0 = time.perf_counter()
            register_checkpoint(paths[n], f"new-{r}", mfile)
            register[n].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            entry = Registry.load(paths[n]).which(f"ckpt-{n // 2:06d}")
            which[n].append(time.perf_counter() - t0)
            assert entry["manifest"]["episode_count"] == episodes
            t0 = time.perf_counter()
            checkpoints, _ = Registry.load(paths[n]).listing()
            listed[n].append((time.perf_counter() - t0) / len(checkpoints))
            assert checkpoints[0]["episodes"] == episodes
    return [{"checkpoints": n, "build_s": round(built[n], 2),
             "register_ms": round(1e3 * statistics.median(register[n]), 2),
             "which_ms": round(1e3 * statistics.median(which[n]), 2),
             "list_ms_per_entry": round(1e3 * statistics.median(listed[n]), 4), "bytes": size_on_disk(paths[n])}
            for n in sizes]


def _quiet(argv: list[str]) -> None:
    """One verb through the CLI, in this process, its output discarded."""
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        code = cli_main(argv)
    assert code == 0, (argv, code)


def measure_datasets(tmp: Path, sizes: list[int], frames: int, repeat: int,
                     verbs: list[str]) -> list[dict[str, Any]]:
    calls: dict[int, dict[str, Callable[[], Any]]] = {}
    frame_counts = {}
    for n in sizes:  # every dataset first, then the verbs round-robin over them
        made = write(tmp / f"ds{n}", SyntheticSpec(episodes=n, min_length=frames, max_length=frames, seed=n))
        root, frame_counts[n] = made.root, made.frames
        every: dict[str, Callable[[], Any]] = {
            "audit": lambda root=root: _quiet(["audit", str(root), "--json"]),
            "curate": lambda root=root: _quiet(["curate", str(root), "--json", "--no-weights"]),
            "stats": lambda root=root: _quiet(["stats", str(root), "--json"]),
            "card": lambda root=root: _quiet(["card", str(root), "--force"]),
        }
        if {"create", "verify", "episodes"} & set(verbs):  # a manifest to verify and list: a pass over all data
            mfile = tmp / f"ds{n}.manifest.json"
            m = create(LeRobotDataset.open(root))
            mfile.write_text(json.dumps(m))
            result = verify(LeRobotDataset.open(root), m)
            assert m["episode_count"] == n and result.matched == n and not (result.added or result.changed)
            every.update({
                "create": lambda root=root: create(LeRobotDataset.open(root)),
                "verify": lambda root=root, m=m: verify(LeRobotDataset.open(root), m),
                "episodes": lambda mfile=mfile: _quiet(["manifest", "episodes", str(mfile)]),
            })
        calls[n] = {verb: every[verb] for verb in verbs}
    costs = _round_robin(calls, repeat)
    return [{"episodes": n, "frames": frame_counts[n], **costs[n]} for n in sizes]


def measure_review(tmp: Path, sizes: list[int], repeat: int) -> list[dict[str, Any]]:
    from review import build as review_folder  # noqa: PLC0415 - the review benchmark's folder

    calls: dict[int, dict[str, Callable[[], Any]]] = {}
    for n in sizes:
        root = tmp / f"review{n}"
        review_folder(root, n)
        site = ReviewSite(root / "out", "bench")
        assert len(site.episodes()) == n
        calls[n] = {"first_list": lambda root=root: ReviewSite(root / "out", "bench").episodes(),
                    "relist": site.episodes}
    costs = _round_robin(calls, repeat)
    return [{"episodes": n, **costs[n]} for n in sizes]


def _bags(folder: Path, n: int, first: int = 0) -> list[Path]:
    out = []
    for i in range(first, first + n):
        truth = write_session(folder / f"ep{i:05d}", SessionSpec(duration_s=2.5, width=192, height=144, seed=i,
                                                                session_time_s=60.0 * i))
        out.append(truth.bag)
    return out


def measure_bags(tmp: Path, sizes: list[int]) -> list[dict[str, Any]]:
    cfg = ValidateConfig.load()
    extra = _bags(tmp / "extra", 1, first=10**6)
    empty = tmp / "empty" / "dataset"
    t0 = time.perf_counter()
    convert(extra, empty, codec="h264", workers=1, progress=False)
    alone = time.perf_counter() - t0
    points = []
    for n in sizes:
        bags = _bags(tmp / f"bags{n}", n)
        t0, c0 = time.perf_counter(), _cpu()
        reports = validate_paths(bags, cfg, workers=1)
        validated, validated_cpu = time.perf_counter() - t0, _cpu() - c0
        assert all(r.passed for r in reports), [r.line() for r in reports if not r.passed][:3]
        ds = tmp / f"out{n}" / "dataset"
        t0, c0 = time.perf_counter(), _cpu()
        res = convert(bags, ds, codec="h264", workers=1, progress=False)
        converted, converted_cpu = time.perf_counter() - t0, _cpu() - c0
        assert sum(len(v) for v in res.converted.values()) == n, res.errors
        t0 = time.perf_counter()
        res = convert(extra, ds, codec="h264", workers=1, progress=False)
        append = time.perf_counter() - t0
        assert sum(len(v) for v in res.converted.values()) == 1
        points.append({"episodes": n, "validate_ms_per_episode": round(1e3 * validated / n, 2),
                       "convert_ms_per_episode": round(1e3 * converted / n, 2),
                       "validate_cpu_ms_per_episode": round(1e3 * validated_cpu / n, 2),
                       "convert_cpu_ms_per_episode": round(1e3 * converted_cpu / n, 2), "append_s": round(append, 3),
                       "append_into_empty_s": round(alone, 3), "over_empty_s": round(append - alone, 3)})
        shutil.rmtree(tmp / f"bags{n}")
        shutil.rmtree(tmp / f"out{n}")
    return points


def grow(src: Path, out: Path, n: int) -> None:
    """A dataset of `n` episodes at `out`, grown from the converted dataset `src` at the table level:
    its K episodes repeated in turn, each copy with its own episode index and id, frame indices,
    place in the one data file and the one video file (the layout one convert of `n` bags writes),
    its own verdict in the validation record; the curation scores computed over the n episodes (as a
    convert of them writes them); stats.json aggregated over every row; `src`'s card; the version sealed
    as a convert seals it (`consistency.write_seal`).
    Sample weights as a refresh writes them.
    What an append's cost depends on — rows, verdicts, frames, the box of start states — is there
    at `n`; only the content repeats."""
    base = commit.snapshot(src)
    rows = pq.read_table(base / v3_layout.EPISODES_PATH.format(chunk_index=0, file_index=0)).to_pylist()
    own = {r["episode_index"]: r for r in read_scores(base).to_pylist()}  # each row's jerk and start state
    rows = [{**r, "jerk": own[r["episode_index"]]["jerk"], START_STATE: own[r["episode_index"]][START_STATE]}
            for r in rows]
    data = pq.read_table(base / v3_layout.DATA_PATH.format(chunk_index=0, file_index=0))
    info = json.loads((base / v3_layout.INFO_PATH).read_text())
    fps, k = int(info["fps"]), len(rows)
    verdicts = {e["episode_id"]: e for e in read_verdicts(base)}
    cams = [f for f, v in info["features"].items() if v["dtype"] == "video"]
    grown, tables, record = [], [], []
    cursor, t = 0, {cam: 0.0 for cam in cams}
    for i in range(n):
        row = dict(rows[i % k])
        old_id, new_id = row["episode_id"], _hex("episode", i)
        part = data.filter(pc.equal(data["episode_index"], row["episode_index"]))
        length = part.num_rows
        part = part.set_column(part.schema.get_field_index("episode_index"), "episode_index",
                               pa.array([i] * length, pa.int64()))
        part = part.set_column(part.schema.get_field_index("index"), "index",
                               pa.array(range(cursor, cursor + length), pa.int64()))
        tables.append(part)
        row.update({"episode_index": i, "episode_id": new_id, "episode_id_v1": _hex("v1", i),
                    "source_bag": f"ep{i:05d}", "dataset_from_index": cursor, "dataset_to_index": cursor + length,
                    "recorded_wall_ns": int(row["recorded_wall_ns"]) + i * 60 * 10**9})
        for cam in cams:
            row.update({f"videos/{cam}/chunk_index": 0, f"videos/{cam}/file_index": 0,
                        f"videos/{cam}/from_timestamp": t[cam], f"videos/{cam}/to_timestamp": t[cam] + length / fps})
            t[cam] += length / fps
        for stat in ("episode_index", "index"):
            values = np.arange(cursor, cursor + length) if stat == "index" else np.full(length, i)
            row.update({f"stats/{stat}/{name}": np.asarray(v).tolist()
                        for name, v in v3_layout.feature_stats(values).items()})
        grown.append(row)
        record.append({**verdicts[old_id], "episode_id": new_id, "name": f"ep{i:05d}",
                       "path": f"bags/ep{i:05d}"})
        cursor += length
    with commit.new_dataset(out) as stage:
        for rel in (v3_layout.TASKS_PATH, "README.md"):
            (stage / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(base / rel, stage / rel)
        scored = with_scores(pa.Table.from_pylist(grown), out, fps)  # every score over the n, as a convert writes them
        path = stage / v3_layout.DATA_PATH.format(chunk_index=0, file_index=0)
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.concat_tables(tables), path)
        side = score_file(scored)  # the scores file and the episodes files as a convert lays them out
        pq.write_table(side, stage / v3_layout.SCORES_PATH)
        place_rows(out, stage, scored, int(info["chunks_size"]), side.column_names[1:], rewrite=False)
        for cam in cams:
            rel = v3_layout.VIDEO_PATH.format(video_key=cam, chunk_index=0, file_index=0)
            v3_layout.remux([(base / rel, None)] * -(-n // k), stage / rel)  # whole copies; the last beyond n unused
        stats = [v3_layout.stats_from_episode_row(r, list(info["features"])) for r in grown]
        v3_layout.write_json(stage / v3_layout.STATS_PATH, v3_layout.stats_to_json(v3_layout.aggregate_stats(stats)))
        info.update(total_episodes=n, total_frames=cursor, splits={"train": f"0:{n}"}, **{COVERAGE_KEY: COVERAGE_RULE})
        v3_layout.write_json(stage / v3_layout.INFO_PATH, info)
        write_seal(out, stage)  # as a convert's commit seals its version
    update_record(out, record)
    update_weights(LeRobotDataset.open(out))


def _cpu() -> float:
    """CPU seconds of this process: the append's own work, which a shared, loaded machine inflates much
    less than wall time (the encode runs in the encoder's process, forked by its server: not counted)."""
    return time.process_time()


def measure_append(tmp: Path, sizes: list[int], base: int, repeat: int) -> list[dict[str, Any]]:
    """`ingest`'s append of one more episode into a dataset of N grown from `base` converted bags (`grow`):
    the median of `repeat` appends, each into its own copy of the grown dataset (hard links); wall time
    and CPU time (`_cpu`). Every dataset is grown first, then the repeats are taken round-robin over
    the sizes and the append into an empty dataset, so a shared machine's load drifting during the run
    weighs on every size alike."""
    src = tmp / "src" / "dataset"
    convert(_bags(tmp / "bags", base), src, codec="h264", workers=1, progress=False)
    extra = _bags(tmp / "extra", 1, first=10**6)
    built = {}
    for n in sizes:
        t0 = time.perf_counter()
        grow(src, tmp / f"grown{n}" / "dataset", n)
        built[n] = time.perf_counter() - t0
    wall: dict[int, list[float]] = {n: [] for n in [0, *sizes]}
    cpu: dict[int, list[float]] = {n: [] for n in [0, *sizes]}
    for r in range(repeat):
        for n in [0, *sizes]:  # 0: into an empty dataset
            copy = tmp / f"grown{n}.{r}"
            if n:
                shutil.copytree(tmp / f"grown{n}", copy, symlinks=True, copy_function=os.link)
            t0, c0 = time.perf_counter(), _cpu()
            res = convert(extra, copy / "dataset", codec="h264", workers=1, progress=False)
            wall[n].append(time.perf_counter() - t0)
            cpu[n].append(_cpu() - c0)
            assert sum(len(v) for v in res.converted.values()) == 1, res.errors
            assert len(LeRobotDataset.open(copy / "dataset").episodes) == n + 1
            shutil.rmtree(copy)
    alone, alone_cpu = statistics.median(wall[0]), statistics.median(cpu[0])
    points = []
    for n in sizes:
        append, append_cpu = statistics.median(wall[n]), statistics.median(cpu[n])
        points.append({"episodes": n, "grow_s": round(built[n], 1), "grown_append_s": round(append, 3),
                       "grown_append_cpu_s": round(append_cpu, 3), "append_into_empty_s": round(alone, 3),
                       "append_into_empty_cpu_s": round(alone_cpu, 3), "over_empty_s": round(append - alone, 3),
                       "over_empty_cpu_s": round(append_cpu - alone_cpu, 3)})
        shutil.rmtree(tmp / f"grown{n}")
    return points


KINDS = ("data", "videos", "meta/episodes", "meta (other)")
# the costs fitted: the commit as it is; `linked_*` (every file linked, as before closed chunks were shared) are
# the comparison in the points
FILES_FITTED = ["shared_commit_cpu_s", "shared_commit_s", "shared_seal_cpu_s"]


def _ingested_files(root: Path, n: int, cameras: int) -> None:
    """The files N one-at-a-time ingests leave, by the writer's rule (`append.write_episodes`), as
    tiny files: a commit's cost is per file, not per byte."""
    chunks = v3_layout.DEFAULT_CHUNK_SIZE
    for i in range(n):
        ci, fi = v3_layout.chunk_file(i, chunks)
        rels = [v3_layout.DATA_PATH.format(chunk_index=ci, file_index=fi)] + [
            v3_layout.VIDEO_PATH.format(video_key=f"observation.images.cam{c}", chunk_index=ci, file_index=fi)
            for c in range(cameras)]
        for rel in rels:
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_bytes(b"x")
    for k in range(-(-n // v3_layout.EPISODES_PER_FILE)):
        rel = v3_layout.EPISODES_PATH.format(chunk_index=0, file_index=k)
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(b"x")
    for rel in (v3_layout.INFO_PATH, v3_layout.STATS_PATH, v3_layout.TASKS_PATH, v3_layout.SCORES_PATH,
                v3_layout.SAMPLE_WEIGHTS_PATH, "meta/validation.json", "meta/.consistency_seal", "README.md"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(b"x")


def _count(version: Path) -> dict[str, int]:
    """Files of a version by kind (through the chunk symlinks, as a reader sees them)."""
    out = dict.fromkeys(KINDS, 0)
    for path in version.glob("**/*"):
        if path.is_dir():
            continue
        rel = path.relative_to(version).as_posix()
        kind = next((k for k in KINDS[:3] if rel.startswith(k + "/")), KINDS[3])
        out[kind] += 1
    return out


def _one_ingest(root: Path, n: int, cameras: int) -> None:
    """Commit what the ingest of episode n stages: its data file and mp4s, the metadata it replaces."""
    stage = commit.new_stage(root)
    ci, fi = v3_layout.chunk_file(n, v3_layout.DEFAULT_CHUNK_SIZE)
    new = [v3_layout.DATA_PATH.format(chunk_index=ci, file_index=fi)] + [
        v3_layout.VIDEO_PATH.format(video_key=f"observation.images.cam{c}", chunk_index=ci, file_index=fi)
        for c in range(cameras)]
    last = v3_layout.EPISODES_PATH.format(chunk_index=0, file_index=n // v3_layout.EPISODES_PER_FILE)
    for rel in [*new, last, v3_layout.INFO_PATH, v3_layout.STATS_PATH, v3_layout.TASKS_PATH, v3_layout.SCORES_PATH,
                "meta/.consistency_seal"]:
        (stage / rel).parent.mkdir(parents=True, exist_ok=True)
        (stage / rel).write_bytes(b"y")
    commit.publish(root, new)


def measure_files(tmp: Path, sizes: list[int], cameras: int, repeat: int) -> list[dict[str, Any]]:
    """`files` (module docstring): per N, the files by kind and one more ingest's commit, shared and linked."""
    from teleop_flywheel.data.lerobot import consistency  # noqa: PLC0415 - the seal's file walk

    points = []
    real_shares = store._shares
    for n in sizes:
        built = {}
        for mode in ("linked", "shared"):
            root = tmp / f"files{n}{mode}" / "dataset"
            with commit.new_dataset(root) as stage:
                _ingested_files(stage, n, cameras)
            built[mode] = root
        counted = _count(commit.snapshot(built["shared"]))
        times: dict[str, list[tuple[float, float]]] = {"linked": [], "shared": []}
        links: dict[str, int] = {}
        seal: dict[str, list[float]] = {"linked": [], "shared": []}
        for r in range(repeat + 1):  # the first commit with sharing links the closed chunks once: not timed
            for mode in ("linked", "shared"):
                store._shares = real_shares if mode == "shared" else (lambda rel_dir, name: False)
                made = [0]
                real_link = os.link

                def counting(a: Any, b: Any, _real: Any = real_link, _made: list[int] = made) -> None:
                    _made[0] += 1
                    _real(a, b)

                os.link = counting  # type: ignore[assignment]
                try:
                    t0, c0 = time.perf_counter(), _cpu()
                    _one_ingest(built[mode], n + r, cameras)
                    wall, cpu = time.perf_counter() - t0, _cpu() - c0
                finally:
                    os.link = real_link
                    store._shares = real_shares
                if r:
                    times[mode].append((cpu, wall))
                    links[mode] = made[0]
            for mode in ("linked", "shared"):  # linked: every chunk a directory, each file stat'ed as before
                version = commit.snapshot(built[mode])
                whole = {} if mode == "linked" else {  # what the seal keys by one stat: each closed chunk
                    f"{parent}/{name}": version / parent / name
                    for parent in ["data", *(f"videos/{k}" for k in os.listdir(version / "videos"))]
                    for name in sorted(os.listdir(version / parent))[:-1]}
                c0 = _cpu()
                consistency._checked(built[mode], whole)
                seal[mode].append(_cpu() - c0)
        point: dict[str, Any] = {"episodes": n, "files": sum(counted.values()),
                                 "files_by_kind": counted, "cameras": cameras}
        for mode in ("linked", "shared"):
            point[f"{mode}_links"] = links[mode]
            point[f"{mode}_commit_cpu_s"] = round(statistics.median(c for c, _ in times[mode]), 4)
            point[f"{mode}_commit_s"] = round(statistics.median(w for _, w in times[mode]), 4)
            point[f"{mode}_seal_cpu_s"] = round(statistics.median(seal[mode]), 4)
        points.append(point)
        shutil.rmtree(tmp / f"files{n}linked")
        shutil.rmtree(tmp / f"files{n}shared")
    return points


def growth(points: list[dict[str, Any]], key: str, size: str = "checkpoints") -> dict[str, float]:
    """Slope of log(cost) on log(N) and its standard error."""
    xs = [math.log(p[size]) for p in points]
    ys = [math.log(max(p[key], 1e-6)) for p in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx if sxx else 0.0
    resid = [y - (my + slope * (x - mx)) for x, y in zip(xs, ys, strict=True)]
    spread = math.sqrt(sum(e * e for e in resid) / (len(xs) - 2) / sxx) if len(xs) > 2 and sxx else 0.0
    return {"exponent": round(slope, 3), "spread": round(spread, 3)}


def fits(points: list[dict[str, Any]], keys: list[str], size: str) -> dict[str, dict[str, Any]]:
    """Per cost: its growth, and its value at the largest N over its value at 100 (the target's
    1.3x; None when 100 or a larger N was not run)."""
    out: dict[str, dict[str, Any]] = {}
    at = {p[size]: p for p in points}
    for key in keys:
        fit: dict[str, Any] = growth(points, key, size) if len(points) > 1 else {"exponent": None, "spread": None}
        largest = max(at)
        ratio = at[largest][key] / at[100][key] if 100 in at and largest > 100 and at[100][key] > 0 else None
        out[key] = {**fit, "largest": largest,
                    "vs_100": None if ratio is None else round(ratio, 2),
                    "within_1_3x": None if ratio is None else ratio <= 1.3}
    return out


def plot(result: dict[str, Any], out: Path) -> None:
    """Every per-episode (per-entry) cost over N, log-log, one panel per family."""
    import matplotlib  # noqa: PLC0415 - only for the figure

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    panels = [(name, family) for name, family in result.items() if isinstance(family, dict) and "fits" in family]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.6), squeeze=False)
    for ax, (name, family) in zip(axes[0], panels, strict=True):
        size = family["size"]
        for key, fit in family["fits"].items():
            xs = [p[size] for p in family["points"]]
            ys = [p[key] for p in family["points"]]
            ax.plot(xs, ys, marker="o", label=f"{key} ({fit['exponent']:+.2f})" if fit["exponent"] is not None
                    else key)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(size)
        ax.set_ylabel("ms (per episode or entry; s for append, files)")
        ax.set_title(name)
        ax.legend(fontsize=6)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="+", choices=FAMILIES, default=list(FAMILIES))
    parser.add_argument("--sizes", type=int, nargs="+", default=SIZES)
    parser.add_argument("--episodes", type=int, default=1000)
    parser.add_argument("--share", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--episode-sizes", type=int, nargs="+", default=SIZES)
    parser.add_argument("--frames", type=int, default=DATASET_FRAMES, help="frames per episode (synthetic datasets)")
    parser.add_argument("--dataset-verbs", nargs="+", choices=DATASET_VERBS, default=list(DATASET_VERBS))
    parser.add_argument("--dataset-repeat", type=int, default=3)
    parser.add_argument("--review-sizes", type=int, nargs="+", default=SIZES)
    parser.add_argument("--bag-sizes", type=int, nargs="+", default=SIZES)
    parser.add_argument("--append-sizes", type=int, nargs="+", default=SIZES)
    parser.add_argument("--append-base", type=int, default=10, help="bags the grown datasets repeat")
    parser.add_argument("--append-repeat", type=int, default=3)
    parser.add_argument("--files-sizes", type=int, nargs="+", default=SIZES)
    parser.add_argument("--cameras", type=int, default=1)
    parser.add_argument("--files-repeat", type=int, default=5)
    parser.add_argument("--out", type=Path, default=RESULTS / "scale.json")
    parser.add_argument("--update", action="store_true", help="keep the families of --out not run now")
    parser.add_argument("--plot", type=Path, default=Path(__file__).resolve().parent.parent / "docs" / "images"
                        / "scale.png")
    args = parser.parse_args()
    result: dict[str, Any] = {"benchmark": "scale", "what": "per-episode costs at N episodes (issue 38)",
                              "load_average_before": load_average()}
    if args.update and args.out.exists():  # the families not run now are kept as they were
        result = {**json.loads(args.out.read_text()), "load_average_before": result["load_average_before"]}
    runs: dict[str, Callable[[Path], dict[str, Any]]] = {
        "lineage": lambda tmp: _family(measure(tmp, args.sizes, args.episodes, args.share, args.repeat),
                                       ["register_ms", "which_ms", "list_ms_per_entry"], "checkpoints",
                                       episodes_per_manifest=args.episodes, checkpoints_per_manifest=args.share,
                                       repeat=args.repeat),
        "dataset": lambda tmp: _family(measure_datasets(tmp, args.episode_sizes, args.frames, args.dataset_repeat,
                                                        args.dataset_verbs),
                                       None, "episodes", frames_per_episode=args.frames, repeat=args.dataset_repeat),
        "review": lambda tmp: _family(measure_review(tmp, args.review_sizes, args.dataset_repeat),
                                      None, "episodes",
                                      repeat=args.dataset_repeat),
        "bags": lambda tmp: _family(measure_bags(tmp, args.bag_sizes),
                                    ["validate_ms_per_episode", "convert_ms_per_episode", "validate_cpu_ms_per_episode",
                                     "convert_cpu_ms_per_episode", "append_s"], "episodes"),
        "append": lambda tmp: _family(measure_append(tmp, args.append_sizes, args.append_base, args.append_repeat),
                                      ["grown_append_s", "grown_append_cpu_s"], "episodes",
                                      base_bags=args.append_base,
                                      repeat=args.append_repeat),
        "files": lambda tmp: _family(measure_files(tmp, args.files_sizes, args.cameras, args.files_repeat),
                                     FILES_FITTED, "episodes",
                                     cameras=args.cameras, repeat=args.files_repeat),
    }
    for name in args.only:  # each family's result written as soon as it is measured
        key = f"dataset_{args.frames}f" if name == "dataset" and args.frames != DATASET_FRAMES else name
        with tempfile.TemporaryDirectory() as tmp:
            result[key] = runs[name](Path(tmp))
        result["load_average_after"] = load_average()
        write_result(args.out, result)
    try:
        plot(result, args.plot)
    except ImportError:
        print("matplotlib is not installed: no plot")


def _family(points: list[dict[str, Any]], keys: list[str] | None, size: str, **about: Any) -> dict[str, Any]:
    """One family's result: what it ran, its points, each cost's fit (`keys` None: every per-episode cost)."""
    keys = keys or [k for k in points[0] if k.endswith("_ms_per_episode")]
    return {"size": size, **about, "points": points, "fits": fits(points, keys, size)}


if __name__ == "__main__":
    main()
