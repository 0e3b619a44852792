"""The episodes an export reads: a LeRobot v3.0 dataset's, or a manifest's (verified, found by id).

Every format's exporter reads through this module, so each reads the same frames in the same
order and records the same provenance:

- `open_source`: a dataset directory, or a manifest JSON verified against its dataset with
  `provenance.materialize.locate` (a changed episode is an error naming it);
- `episode_columns`: one episode's non-visual columns (current names, frame order), read with
  pyarrow's row-group filter so the other episodes' rows are skipped;
- `episode_frames`: one camera's frames of one episode, decoded one at a time with PyAV
  (`materialize.span_frames`, the rule manifests read episodes by): never a whole episode in memory;
  `episode_images`: every camera's frame t together, shapes and count checked against the episode;
- `rgb_jpeg`: a decoded frame as the JPEG every reader decodes back to that RGB;
- `so101_joints`: the column of the SO-101's state or action, an error for a dataset of another arm;
- `Source.provenance(row)`: what a written file came from (the episode's content id, the source
  dataset and index, and from a manifest its path, fingerprint and sha256).
"""
from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import av
import cv2
import numpy as np
import pyarrow.parquet as pq

from teleop_flywheel import __version__
from teleop_flywheel.core.errors import FlywheelError, UsageError
from teleop_flywheel.core.so101 import JOINT_NAMES
from teleop_flywheel.data.errors import DatasetError, ExportError, ForeignArmError
from teleop_flywheel.data.lerobot.dataset import INFO_PATH, LeRobotDataset, to_numpy
from teleop_flywheel.data.lerobot.flywheel_schema import pending_renames, renamed_column
from teleop_flywheel.data.provenance.manifest_hash import data_file, manifest_sha256, row_fields, video_file
from teleop_flywheel.data.provenance.materialize import locate, span_frames

POSITIONAL = ("index", "episode_index", "task_index", "frame_index", "timestamp")
IMAGE_PREFIX = "observation.images."
EFFORT_FEATURE = "observation.effort"
JOINT_FEATURE_NAMES = [f"{j}.pos" for j in JOINT_NAMES]  # the SO-101's state and action, LeRobot's names


@dataclass
class Source:
    """What to export: a dataset, the episodes (current indices, in order) and where they came from."""

    ds: LeRobotDataset
    episodes: list[int]
    attrs: dict[str, str]  # what every written file records (a manifest's ids; empty for a whole dataset)

    def rows(self) -> list[dict[str, Any]]:
        """The episodes-table rows of `episodes`, in their order."""
        by_index = {int(r["episode_index"]): r for r in self.ds.episodes.to_dict("records")}
        return [by_index[e] for e in self.episodes]

    def provenance(self, row: dict[str, Any]) -> dict[str, str | int]:
        """What a file holding the episode of `row` records about its origin."""
        return {"episode_id": str(row_fields(row).get("episode_id") or ""),
                "source_dataset": os.path.abspath(self.ds.root), "source_episode_index": int(row["episode_index"]),
                "teleop_flywheel_version": __version__, **self.attrs}


def open_source(path: Path, dataset: Path | None = None) -> Source:
    """A dataset directory, or a manifest JSON (verified against its dataset, or `dataset`)."""
    try:
        if path.is_file():
            loc = locate(path, dataset)
            if not loc.current:
                raise UsageError("the manifest lists no episodes", where=str(path), fix="create one that selects some")
            return Source(loc.ds, loc.episodes, {"manifest": str(path.resolve()),
                                                  "manifest_fingerprint": str(loc.manifest.get("fingerprint", "")),
                                                  "manifest_sha256": manifest_sha256(loc.manifest)})
        ds = LeRobotDataset.open(path)
    except ValueError as exc:
        if isinstance(exc, FlywheelError):
            raise
        raise UsageError(str(exc)) from exc
    return Source(ds, [int(e) for e in ds.episodes["episode_index"]], {})


def episode_columns(ds: LeRobotDataset, row: dict[str, Any]) -> dict[str, np.ndarray]:
    """Every non-visual data column of one episode (current names), in frame order."""
    rel = data_file(row)
    paths = [ds.root / rel] if rel else ds.data_files()
    e = int(row["episode_index"])
    renames = pending_renames(ds.info)
    out: dict[str, list[np.ndarray]] = {}
    for path in paths:
        try:  # row-group statistics let pyarrow skip the other episodes' rows
            table = pq.read_table(path, filters=[("episode_index", "=", e)])
        except (OSError, ValueError) as exc:
            raise DatasetError(f"{path}: unreadable parquet: {exc}") from None
        for name in table.column_names:
            out.setdefault(renamed_column(name, renames), []).append(to_numpy(table[name], name))
    columns = {k: np.concatenate(v) for k, v in out.items()}
    if len(columns.get("frame_index", ())) != int(row["length"]):
        raise DatasetError(f"{ds.root}: episode {e} has {len(columns.get('frame_index', ()))} data rows, "
                           f"its length is {int(row['length'])}")
    order = np.argsort(columns["frame_index"], kind="stable")
    return {k: v[order] for k, v in columns.items()}


def episode_frames(ds: LeRobotDataset, row: dict[str, Any], key: str) -> Iterator[np.ndarray]:
    """One camera's frames of an episode as (H, W, 3) uint8 RGB, decoded one at a time."""
    rel = video_file(row, key)
    if rel is None:
        raise DatasetError(f"{ds.root}: episode {int(row['episode_index'])} has no {key} video in the episodes table")
    lo, hi = float(row[f"videos/{key}/from_timestamp"]), float(row[f"videos/{key}/to_timestamp"])
    try:
        for frame in span_frames(ds.root / rel, lo, hi):
            yield frame.to_ndarray(format="rgb24")
    except av.FFmpegError as exc:
        raise ExportError(f"{ds.root / rel}: unreadable video ({exc}); nothing was written") from None


def so101_joints(ds: LeRobotDataset, feature: str, fmt: str) -> str:
    """The column of the SO-101 joint vector `feature` (state or action); an error for any other arm."""
    name = ds.feature_name(feature)
    if name is None:
        raise ForeignArmError(f"{ds.root / INFO_PATH}: no {feature} feature; {fmt} needs the SO-101's "
                              f"state and action")
    f = ds.features[name]
    if f.width != len(JOINT_FEATURE_NAMES) or (f.names and list(f.names) != JOINT_FEATURE_NAMES):
        raise ForeignArmError(f"{ds.root / INFO_PATH}: {feature} has joints {list(f.names or [])} (width {f.width}), "
                              f"not the SO-101's {JOINT_FEATURE_NAMES}; their units cannot be converted")
    return name


def episode_images(ds: LeRobotDataset, row: dict[str, Any], cameras: list[str], n: int) -> Iterator[list[np.ndarray]]:
    """Frame t of every camera in `cameras`, t = 0..n-1, each checked against its feature's shape;
    an error if the videos hold fewer frames than the episode's `n` rows."""
    shapes = [(*ds.features[key].shape[:2], 3) for key in cameras]
    count = 0
    for t, images in enumerate(zip(*(episode_frames(ds, row, key) for key in cameras), strict=False)):
        if t >= n:
            break
        for key, shape, rgb in zip(cameras, shapes, images, strict=True):
            if rgb.shape != shape:
                raise DatasetError(f"{ds.root}: {key} frame {t} of episode {int(row['episode_index'])} is "
                                   f"{rgb.shape}, the feature says {shape}")
        yield list(images)
        count = t + 1
    if cameras and count != n:
        raise ExportError(f"{ds.root}: episode {int(row['episode_index'])} has {count} decodable frames in "
                          f"its videos, its length is {n}; nothing was written")


def rgb_jpeg(rgb: np.ndarray, quality: int, where: str) -> bytes:
    """An (H, W, 3) RGB frame as JPEG at `quality`; `where`: the frame, named in the error if encoding fails."""
    # A JPEG stores YCbCr decoded to RGB by every reader: OpenCV encodes from BGR, so swap first.
    ok, encoded = cv2.imencode(".jpg", np.ascontiguousarray(rgb[..., ::-1]), [int(cv2.IMWRITE_JPEG_QUALITY), quality])
    if not ok:
        raise ExportError(f"{where}: JPEG encoding failed on a {rgb.shape} frame; nothing was written")
    return encoded.tobytes()


def task_of(ds: LeRobotDataset, columns: dict[str, np.ndarray]) -> str:
    """The task text of an episode's columns (its first frame's task index)."""
    tasks = columns.get("task_index")
    return ds.tasks.get(int(tasks[0]), "") if tasks is not None and len(tasks) else ""
