"""A LeRobot v3.0 dataset (or a manifest's episodes) → an RLDS dataset directory, as Open X-Embodiment's.

OUT is a TFDS dataset directory that `tfds.builder_from_directory(OUT)` reads: tfrecord shards
`teleop_flywheel_so101-train.tfrecord-NNNNN`, `dataset_info.json` (splits, shard lengths),
`features.json` (the feature spec) and `metadata.json` (the dataset's joint order, units, fps,
labels, source). One split, `train`; one example per episode, in the dataset's episode order (a
manifest: its episodes, verified and found by id with `provenance.materialize.locate`):

- `steps` (RLDS's step, frame t): `observation` {`state` (6,) float32 ← observation.state,
  `effort` (6,) float32 ← observation.effort where the dataset has it, `image_<camera>` (H, W, 3)
  uint8 JPEG ← observation.images.<camera>}, `action` (6,) float32 ← action, both bit for bit in
  the dataset's own units (LeRobot's SO-101: degrees, gripper 0..100); `reward` float32 (1 on the
  last step of an episode whose outcome is success, else 0), `discount` 1, `is_first`, `is_last`,
  `is_terminal` (the last step: a demonstration ends where the task ended), `language_instruction`
  (the frame's task), and `teleop_flywheel` {every other numeric per-frame column, as stored:
  blend weight, intervention, trigger, the leader's and the policy's commands...};
- `episode_metadata`: `episode_id` (the content id), `source_dataset`, `source_episode_index`,
  `manifest`, `manifest_fingerprint`, `manifest_sha256` (empty for a whole dataset), `task`,
  `episode` (its row of the episodes table, JSON) and `teleop_flywheel_version`.

Written with TFDS's own `SequentialWriter` (its feature encoders, serializer and metadata), into
`formats.common.staged_output`: OUT is whole or absent. Frames are decoded one at a time
(`formats.common.export_source`) and JPEG-encoded at once; an episode is one record, so its JPEG
bytes and numbers are held until it is written, never its decoded frames.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from teleop_flywheel import __version__
from teleop_flywheel.core.errors import UsageError
from teleop_flywheel.core.progress import progress
from teleop_flywheel.core.so101 import JOINT_NAMES
from teleop_flywheel.data.formats import ExportRequest
from teleop_flywheel.data.formats.common.episode_export import Exported, record_export
from teleop_flywheel.data.formats.common.export_source import (
    EFFORT_FEATURE,
    IMAGE_PREFIX,
    POSITIONAL,
    Source,
    episode_columns,
    episode_images,
    open_source,
    rgb_jpeg,
    so101_joints,
)
from teleop_flywheel.data.formats.common.format_options import (
    PARALLEL_OPTIONS,
    SEQUENTIAL_FIX,
    jpeg_quality,
    refuse_options,
)
from teleop_flywheel.data.formats.common.staged_output import refuse_existing, staged_output
from teleop_flywheel.data.lerobot.dataset import ACTION, STATE, LeRobotDataset
from teleop_flywheel.data.lerobot.flywheel_schema import pending_renames, renamed_column
from teleop_flywheel.data.provenance.manifest_hash import row_fields, video_keys

FORMAT = "rlds"
NAME = "teleop_flywheel_so101"  # the TFDS dataset name: the shards' prefix, `builder.name`
VERSION = "1.0.0"
SPLIT = "train"
EXTRAS = "teleop_flywheel"  # the step's group of our per-frame columns; RLDS readers pass it through
JPEG_QUALITY = 95  # tf.io.encode_jpeg's default, the quality TFDS itself writes an Image feature at
SHARD_BYTES = 256 << 20  # episodes per shard: as many as fit in about this many bytes (the first one's size)
UNITS = "LeRobot SO-101 units: degrees (body joints), gripper 0..100 (its calibrated range)"
PROVENANCE = ("episode_id", "source_dataset", "manifest", "manifest_fingerprint", "manifest_sha256")


def tfds_module() -> ModuleType:
    """tensorflow_datasets, imported only when an RLDS export runs (an optional extra)."""
    try:
        import tensorflow_datasets as tfds  # noqa: PLC0415
    except ImportError:
        raise UsageError("tensorflow-datasets is not installed", where=FORMAT,
                         fix="pip install 'teleop_flywheel[rlds]' (tensorflow-cpu and tensorflow-datasets)") from None
    return tfds


@dataclass
class _Layout:
    """Which of a dataset's columns (their current names, as `episode_columns` gives them) go where."""

    state: str
    action: str
    effort: tuple[str, tuple[int, ...]] | None  # (column, shape of one frame's value)
    cameras: list[str]
    extras: dict[str, tuple[np.dtype, tuple[int, ...]]]  # every other numeric per-frame column: (dtype, shape)


def _layout(ds: LeRobotDataset) -> _Layout:
    """The dataset's columns as RLDS steps hold them; an error for a dataset of another arm."""
    renames = pending_renames(ds.info)
    state, action = (renamed_column(so101_joints(ds, f, "an RLDS episode"), renames) for f in (STATE, ACTION))
    effort_name = ds.feature_name(EFFORT_FEATURE)
    effort = None if effort_name is None else (renamed_column(effort_name, renames), ds.features[effort_name].shape)
    taken = {state, action, *POSITIONAL, *([effort[0]] if effort else [])}
    extras = {}
    for name, f in sorted(ds.features.items()):
        column = renamed_column(name, renames)
        if f.is_visual or column in taken:
            continue
        try:
            dtype = np.dtype(f.dtype)
        except TypeError:  # text: nothing a step's numeric group holds
            continue
        if dtype.kind in "biuf":
            extras[column] = (dtype, () if f.width == 1 else f.shape)
    return _Layout(state, action, effort, sorted(video_keys(ds)), extras)


def _features(tfds: ModuleType, ds: LeRobotDataset, layout: _Layout) -> Any:
    F = tfds.features
    joints = len(JOINT_NAMES)
    observation = {"state": F.Tensor(shape=(joints,), dtype=np.float32,
                                     doc=f"observation.state, the follower's joints {list(JOINT_NAMES)}; {UNITS}")}
    if layout.effort is not None:
        observation["effort"] = F.Tensor(shape=layout.effort[1], dtype=np.float32,
                                         doc="observation.effort: load, a signed fraction of max torque, -1..1")
    for key in layout.cameras:
        h, w = ds.features[key].shape[:2]
        observation[f"image_{key.removeprefix(IMAGE_PREFIX)}"] = F.Image(
            shape=(h, w, 3), dtype=np.uint8, encoding_format="jpeg", doc=f"{key}, RGB")
    text = F.Text()
    step = {
        "observation": F.FeaturesDict(observation),
        "action": F.Tensor(shape=(joints,), dtype=np.float32,
                           doc=f"action, the command sent to the follower for (t, t+1]; {UNITS}"),
        "reward": F.Scalar(dtype=np.float32, doc="1 on the last step of a successful episode, else 0"),
        "discount": F.Scalar(dtype=np.float32, doc="always 1"),
        "is_first": F.Scalar(dtype=np.bool_), "is_last": F.Scalar(dtype=np.bool_),
        "is_terminal": F.Scalar(dtype=np.bool_, doc="the last step: the episode ended where its task did"),
        "language_instruction": text,
        EXTRAS: F.FeaturesDict({name: F.Tensor(shape=shape, dtype=dtype)
                                for name, (dtype, shape) in layout.extras.items()}),
    }
    metadata = {key: text for key in (*PROVENANCE, "task", "episode", "teleop_flywheel_version")}
    metadata["source_episode_index"] = F.Scalar(dtype=np.int64)
    return F.FeaturesDict({"steps": F.Dataset(step), "episode_metadata": F.FeaturesDict(metadata)})


def _episode(src: Source, row: dict[str, Any], layout: _Layout, quality: int) -> tuple[dict[str, Any], int]:
    """One episode as the example TFDS encodes, and its size in bytes (images and numbers)."""
    ds, cameras = src.ds, layout.cameras
    cols = episode_columns(ds, row)
    state, action = (cols[name].astype(np.float32) for name in (layout.state, layout.action))
    efforts = None if layout.effort is None else cols[layout.effort[0]].astype(np.float32)
    n = len(state)
    tasks = [ds.tasks.get(int(i), "") for i in cols["task_index"]] if "task_index" in cols else [""] * n
    success = row_fields(row).get("outcome") == "success"
    frame_extras = {name: cols[name].astype(dtype).reshape((n, *shape))
                    for name, (dtype, shape) in layout.extras.items()}
    steps: list[dict[str, Any]] = []
    size = state.nbytes + action.nbytes + sum(v.nbytes for v in frame_extras.values())
    images = episode_images(ds, row, cameras, n) if cameras else iter([[]] * n)
    for t, frames in enumerate(images):
        observation: dict[str, Any] = {"state": state[t]}
        if efforts is not None:
            observation["effort"] = efforts[t]
        for key, rgb in zip(cameras, frames, strict=True):
            encoded = rgb_jpeg(rgb, quality, f"{ds.root} episode {int(row['episode_index'])} {key} frame {t}")
            observation[f"image_{key.removeprefix(IMAGE_PREFIX)}"] = encoded
            size += len(encoded)
        last = t == n - 1
        steps.append({
            "observation": observation, "action": action[t],
            "reward": np.float32(success and last), "discount": np.float32(1.0),
            "is_first": t == 0, "is_last": last, "is_terminal": last,
            "language_instruction": tasks[t],
            EXTRAS: {name: values[t] for name, values in frame_extras.items()},
        })
    provenance = src.provenance(row)
    metadata: dict[str, str | int] = {key: str(provenance.get(key, "")) for key in PROVENANCE}
    metadata.update(source_episode_index=int(row["episode_index"]), task=tasks[0] if tasks else "",
                    episode=json.dumps(row_fields(row), sort_keys=True), teleop_flywheel_version=__version__)
    return {"steps": steps, "episode_metadata": metadata}, size


def _dataset_metadata(src: Source, cameras: list[str]) -> dict[str, Any]:
    ds = src.ds
    return {"format": FORMAT, "joint_names": list(JOINT_NAMES), "units": UNITS, "fps": ds.fps,
            "robot_type": ds.robot_type, "cameras": [c.removeprefix(IMAGE_PREFIX) for c in cameras],
            "trigger_labels": ds.info.get("trigger_labels"), "joint_limits": ds.info.get("joint_limits"),
            "source_dataset": os.path.abspath(ds.root), "teleop_flywheel_version": __version__, **src.attrs}


def export(src: Source, out: Path, quality: int = JPEG_QUALITY, show_progress: bool = True,
           registry: Path | None = None) -> Exported:
    """Write `src`'s episodes as the RLDS dataset directory `out` (which must not exist), atomically."""
    tfds = tfds_module()
    ds = src.ds
    layout = _layout(ds)  # a dataset of another arm fails here, before anything is written
    features = _features(tfds, ds, layout)
    frames = 0
    with staged_output(out) as stage, \
            progress(len(src.episodes), "export" if show_progress else None, unit="episode") as bar:
        identity = tfds.core.DatasetIdentity(name=NAME, version=tfds.core.Version(VERSION), data_dir=os.fspath(stage),
                                             module_name=__name__)
        info = tfds.core.DatasetInfo(
            builder=identity, features=features,
            metadata=tfds.core.MetadataDict(_dataset_metadata(src, layout.cameras)),
            description=f"SO-101 teleoperation episodes of {os.path.abspath(ds.root)}, exported by teleop_flywheel "
                        f"{__version__} (docs/formats.md). State and action in {UNITS}.")

        def open_writer(episode_bytes: int) -> Any:
            made = tfds.core.SequentialWriter(info, max_examples_per_shard=max(1, SHARD_BYTES // max(episode_bytes, 1)))
            made.initialize_splits([SPLIT])
            return made

        writer = None
        for row in src.rows():
            example, size = _episode(src, row, layout, quality)
            if writer is None:  # SequentialWriter shards by episode count: size it by the first episode
                writer = open_writer(size)
            writer.add_examples({SPLIT: [example]})
            frames += len(example["steps"])
            bar.update(1)
        (writer or open_writer(1)).close_all()  # no episodes: an empty split, still a dataset TFDS opens
    out = Path(os.path.abspath(out))
    entry = record_export(src, out, FORMAT, registry, {"jpeg": quality})
    return Exported(out, len(src.episodes), frames, entry["export"])


def run_export(req: ExportRequest) -> int:
    """The `export --to rlds` verb's work: one line saying what was written and how to read it."""
    refuse_options(req, ("calibration",), FORMAT, "leave it out: the joints are in LeRobot units")
    refuse_options(req, PARALLEL_OPTIONS, FORMAT, SEQUENTIAL_FIX)
    quality = jpeg_quality(req.jpeg, JPEG_QUALITY, f"give 1..100 (default {JPEG_QUALITY})")
    refuse_existing(req.out)
    tfds_module()
    made = export(open_source(req.source, req.dataset), req.out, quality, registry=req.registry)
    print(f"wrote {made.out}: {made.episodes} episodes, {made.frames} steps (RLDS); read it with "
          f"tfds.builder_from_directory({str(made.out)!r}).as_dataset(split={SPLIT!r}); "
          f"lineage export {made.export_id}")
    return 0
