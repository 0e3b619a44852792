"""A LeRobot v3.0 dataset (or a manifest's episodes) → one ALOHA/ACT `episode_N.hdf5` per episode.

Per episode, in the dataset's episode order (a manifest: its episodes, verified and found by id
with `provenance.materialize.locate`), numbered 0..N-1 as ACT's loader counts them:

- `/observations/qpos` ← observation.state, `/action` ← action, in ALOHA's units
  (`episode_file`: radians, gripper 0..1; float64);
- `/observations/effort` ← observation.effort where the dataset has it, else zeros with the
  attribute `absent` = True; `/observations/qvel`: zeros with `absent` = True (our datasets record
  no joint velocity, and ACT reads but never uses it);
- `/observations/images/<camera>` ← observation.images.<camera>, decoded with PyAV one frame at a
  time (`materialize.span_frames`, the rule manifests read episodes by) and written as uint8
  (T, H, W, 3) RGB, one HDF5 chunk per frame; with `jpeg_quality`, as ALOHA's recorder compresses:
  `compress` = True, JPEG rows zero-padded to the longest (the row width grows as frames come, so
  nothing but one frame is held), and `/compress_len`;
- `/teleop_flywheel/frames/<feature>`: every other per-frame column (blend weight, intervention,
  trigger, correction, the leader's and the policy's commands...) as the dataset stores it, with
  its dtype and names as attributes; `/teleop_flywheel` attributes: the episode's row of the
  episodes table (JSON) and the dataset's trigger labels and joint limits;
- root attributes: `sim` = False, `compress`, `fps`, `task`, `joint_names`, `qpos_units`,
  `episode_id` (the content id), `source_dataset`, `source_episode_index`, and from a manifest
  `manifest`, `manifest_fingerprint` and `manifest_sha256` — what the file came from.

Read with `formats.common.export_source` (one episode, one frame at a time); written with
`formats.common.episode_export`: one episode per job, in `workers` processes (or Ray tasks), each
file written into a stage renamed to OUT at the end (OUT is whole or absent), and the export
recorded in the lineage registry.
"""
from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from teleop_flywheel.data.errors import DatasetError
from teleop_flywheel.data.formats import ExportRequest
from teleop_flywheel.data.formats.aloha import episode_file
from teleop_flywheel.data.formats.common.episode_export import EpisodeJob, Exported, export_episodes
from teleop_flywheel.data.formats.common.export_source import (
    EFFORT_FEATURE,
    IMAGE_PREFIX,
    POSITIONAL,
    Source,
    episode_columns,
    episode_images,
    open_source,
    so101_joints,
    task_of,
)
from teleop_flywheel.data.formats.common.format_options import jpeg_quality as jpeg_quality_of
from teleop_flywheel.data.formats.common.staged_output import refuse_existing
from teleop_flywheel.data.lerobot.dataset import ACTION, STATE, LeRobotDataset
from teleop_flywheel.data.provenance.manifest_hash import row_fields, video_keys

JPEG_ROW_SLACK = 1.25  # an HDF5 chunk of JPEG rows: the first frame's size and this margin (ALOHA: one padded row)


class _JpegRows:
    """ALOHA's compressed camera: JPEG rows zero-padded to the longest so far (the width grows)."""

    def __init__(self, group: Any, name: str, length: int, quality: int) -> None:
        self.group, self.name = group, name
        self.data: Any = None
        self.params = [int(cv2.IMWRITE_JPEG_QUALITY), quality]
        self.lengths = np.zeros(length, dtype=np.float32)

    def write(self, t: int, rgb: np.ndarray) -> None:
        # ALOHA encodes its arrays as they are and decodes them the same way: the channel order
        # of what goes in (RGB here) is what `cv2.imdecode` gives back.
        ok, encoded = cv2.imencode(".jpg", rgb, self.params)
        if not ok:
            raise DatasetError(f"JPEG encoding failed at frame {t}")
        n = len(encoded)
        if self.data is None:  # one HDF5 chunk holds a row a little longer than the first frame's
            chunk = -(-int(n * JPEG_ROW_SLACK) // 4096) * 4096
            self.data = self.group.create_dataset(self.name, (len(self.lengths), n), maxshape=(len(self.lengths), None),
                                                  dtype="uint8", chunks=(1, chunk))
        elif n > self.data.shape[1]:
            self.data.resize((self.data.shape[0], n))
        row = np.zeros(self.data.shape[1], dtype=np.uint8)
        row[:n] = encoded.reshape(-1)
        self.data[t] = row
        self.lengths[t] = n


def _write_episode(ds: LeRobotDataset, job: EpisodeJob, cameras: list[str], jpeg_quality: int | None) -> int:
    """One episode's file (in a worker process: everything it needs is in `job`)."""
    h5 = episode_file.h5py_module()
    row = job.row
    cols = episode_columns(ds, row)
    state, action = (cols.pop(so101_joints(ds, f, "an ALOHA file")) for f in (STATE, ACTION))
    n = len(state)
    effort = cols.pop(ds.feature_name(EFFORT_FEATURE) or EFFORT_FEATURE, None)
    episode_row = row_fields(row)
    with h5.File(job.path, "w") as f:
        f.attrs.update({
            "sim": False, "compress": jpeg_quality is not None, "fps": ds.fps, "task": task_of(ds, cols),
            "joint_names": episode_file.json_attr(list(episode_file.JOINT_NAMES)),
            "qpos_units": episode_file.QPOS_UNITS, "format": episode_file.FORMAT,
            **job.provenance,
        })
        zeros = np.zeros((n, len(episode_file.JOINT_NAMES)))
        for key, joints in ((episode_file.QPOS, state), (episode_file.ACTION, action)):
            f.create_dataset(key, data=episode_file.to_aloha(joints)).attrs["units"] = episode_file.QPOS_UNITS
        f.create_dataset(episode_file.QVEL, data=zeros).attrs[episode_file.ABSENT] = True
        eff = f.create_dataset(episode_file.EFFORT, data=zeros if effort is None else effort)
        eff.attrs[episode_file.ABSENT] = effort is None
        eff.attrs["units"] = episode_file.EFFORT_UNITS
        extras = f.create_group(episode_file.FRAMES)
        for name, values in sorted(cols.items()):
            if name in POSITIONAL:
                continue
            feature = ds.features.get(name)
            d = extras.create_dataset(name, data=values)
            d.attrs["dtype"] = feature.dtype if feature else str(values.dtype)
            d.attrs["names"] = episode_file.json_attr(list(feature.names) if feature and feature.names else None)
        f[episode_file.EXTRAS].attrs.update({
            "episode": episode_file.json_attr(episode_row),
            "trigger_labels": episode_file.json_attr(ds.info.get("trigger_labels")),
            "joint_limits": episode_file.json_attr(ds.info.get("joint_limits")),
            "robot_type": ds.robot_type,
        })
        _write_images(f.require_group(episode_file.IMAGES), ds, row, cameras, n, jpeg_quality, f)
    return n


def _write_images(group: Any, ds: LeRobotDataset, row: dict[str, Any], cameras: list[str], n: int,
                  jpeg_quality: int | None, root: Any) -> None:
    writers: list[Any] = []
    for key in cameras:
        cam = key.removeprefix(IMAGE_PREFIX)
        h, w = ds.features[key].shape[:2]
        if jpeg_quality is None:
            writers.append(group.create_dataset(cam, (n, h, w, 3), dtype="uint8", chunks=(1, h, w, 3)))
        else:
            writers.append(_JpegRows(group, cam, n, jpeg_quality))
    for t, images in enumerate(episode_images(ds, row, cameras, n)):
        for writer, rgb in zip(writers, images, strict=True):
            if isinstance(writer, _JpegRows):
                writer.write(t, rgb)
            else:
                writer[t] = rgb
    if jpeg_quality is not None:
        root.create_dataset(episode_file.COMPRESS_LEN, data=np.stack([w.lengths for w in writers]) if writers
                            else np.zeros((0, n), np.float32))


def export(src: Source, out: Path, jpeg_quality: int | None = None, show_progress: bool = True,
           workers: int | None = None, executor: str = "local", registry: Path | None = None) -> Exported:
    """Write `src`'s episodes as `out/episode_N.hdf5` (out must not exist), atomically, `workers` at a time."""
    episode_file.h5py_module()
    cameras = sorted(video_keys(src.ds))  # /compress_len rows in h5py's (name) order of the cameras
    write = functools.partial(_write_episode, cameras=cameras, jpeg_quality=jpeg_quality)
    return export_episodes(src, out, episode_file.FORMAT, write, episode_file.EPISODE_FILE,
                           workers=workers, executor=executor, registry=registry, options={"jpeg": jpeg_quality},
                           show_progress=show_progress)


def run_export(req: ExportRequest) -> int:
    """The `export --to hdf5-aloha` verb's work: one line saying what was written."""
    jpeg_quality = jpeg_quality_of(req.jpeg, None, "give 1..100 (ALOHA: 50)")
    refuse_existing(req.out)
    episode_file.h5py_module()
    made = export(open_source(req.source, req.dataset), req.out, jpeg_quality, workers=req.workers,
                  executor=req.executor, registry=req.registry)
    print(f"wrote {made.out}: {made.episodes} episode files (episode_0..{made.episodes - 1}.hdf5), {made.frames} "
          f"frames; ACT reads them with dataset_dir={str(made.out)!r}, num_episodes={made.episodes}; lineage "
          f"export {made.export_id}")
    return 0
