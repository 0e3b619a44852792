"""An export run one episode per job in worker processes, and every export recorded in lineage.

- `export_episodes`: for a format that writes one file (or directory) per episode (ALOHA's
  `episode_N.hdf5`, a rosbag2 bag directory per episode). The format gives its per-episode
  writer, `write(ds, job) -> frames`, a module-level function (or a `functools.partial` of one)
  so it pickles. The jobs run through `data.parallel.parallel_map`: inline with `workers=1`, else
  a pool of worker processes (default one per CPU, as `convert`), or Ray tasks with
  `executor="ray"` on a cluster that shares the file system. Each worker opens the source
  dataset once and writes its own file into the stage; episode N is file N whichever worker
  wrote it, so the output is byte for byte the one a single process writes. A failed episode
  stops the export with its own error (exit 1) and OUT is not written (`staged_output`).
- `record_export`: registers the finished output in the lineage registry (`provenance.lineage`:
  format, where, the sha256 of every file and their fingerprint, the episodes' content ids, the
  manifest), so a checkpoint another stack trains on it can be traced back. `export_episodes` calls
  it; a format that writes its output another way calls it once OUT is in place.
"""
from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from teleop_flywheel.core.errors import FlywheelError
from teleop_flywheel.data.formats.common.export_source import Source
from teleop_flywheel.data.formats.common.staged_output import staged_output
from teleop_flywheel.data.lerobot.dataset import LeRobotDataset
from teleop_flywheel.data.parallel import own_errors, parallel_map
from teleop_flywheel.data.provenance import default_registry
from teleop_flywheel.data.provenance.lineage import content_files, register_export


@dataclass(frozen=True)
class EpisodeJob:
    """One episode to write: the source dataset's root, its episodes-table row, the file or directory
    to write (inside the stage) and what that file records about its origin (`Source.provenance`)."""

    root: str
    row: dict[str, Any]
    path: str
    provenance: dict[str, str | int]

    def __repr__(self) -> str:  # what a failed job is called in an error
        return f"episode {int(self.row['episode_index'])} -> {Path(self.path).name}"


@dataclass
class Exported:
    out: Path
    episodes: int
    frames: int
    export_id: str


EpisodeWriter = Callable[[LeRobotDataset, EpisodeJob], int]

_OPEN: dict[str, LeRobotDataset] = {}  # per process: the source dataset, opened once


def _write_job(write: EpisodeWriter, job: EpisodeJob) -> tuple[int, dict[str, str]]:
    """Frames written and the sha256 of each file written (relative to the stage) for lineage, taken
    here while the files are hot in this worker's cache (hashing is as dear as writing for
    uncompressed frames: bench/export.py)."""
    ds = _OPEN.get(job.root)
    if ds is None:
        ds = _OPEN[job.root] = LeRobotDataset.open(Path(job.root))
    frames = write(ds, job)
    path = Path(job.path)
    return frames, {"/".join(filter(None, (path.name, rel))): sha for rel, sha in content_files(path).items()}


def export_episodes(src: Source, out: Path, fmt: str, write: EpisodeWriter, file_name: str, *,
                    workers: int | None = None, executor: str = "local", registry: Path | None = None,
                    options: dict[str, Any] | None = None, show_progress: bool = True) -> Exported:
    """Write `src`'s episodes as `out/<file_name.format(index=k)>` (k = 0..N-1, out must not
    exist), atomically, `workers` at a time; then record the export in lineage."""
    root = str(src.ds.root)
    names = [file_name.format(index=k) for k in range(len(src.episodes))]
    with staged_output(out) as stage:
        jobs = [EpisodeJob(root, row, str(stage / name), src.provenance(row)) for name, row in zip(names, src.rows(),
                                                                                                  strict=True)]
        _OPEN[root] = src.ds  # inline jobs use the dataset already open; workers open their own
        try:
            with own_errors(FlywheelError, OSError):
                done = parallel_map(functools.partial(_write_job, write), jobs, workers, executor,
                                    desc="export" if show_progress else None, unit="episode")
        finally:
            _OPEN.pop(root, None)
    out = Path(os.path.abspath(out))
    digests = {rel: sha for _, files in done for rel, sha in files.items()}
    entry = record_export(src, out, fmt, registry, options, names, digests)
    return Exported(out, len(jobs), sum(n for n, _ in done), entry["export"])


def record_export(src: Source, out: Path, fmt: str, registry: Path | None = None,
                  options: dict[str, Any] | None = None, names: list[str] | None = None,
                  digests: dict[str, str] | None = None) -> dict[str, Any]:
    """Register the export written at `out`. `names`: for a file (or directory) per episode, each
    episode's, in episode order; `digests`: sha256 of files taken as they were written (relative
    POSIX path → hex); any other file of `out` is hashed here."""
    episodes = []
    for k, row in enumerate(src.rows()):
        p = src.provenance(row)
        episodes.append({"episode_id": p["episode_id"], "source_episode_index": p["source_episode_index"]}
                        | ({"file": names[k]} if names else {}))
    manifest = src.attrs.get("manifest")
    return register_export(registry or default_registry(), fmt, out, episodes, os.path.abspath(src.ds.root),
                           Path(manifest) if manifest else None, options, digests)
