"""A LeRobot v3.0 dataset (or a manifest's episodes) → one robomimic HDF5 file, filter keys from our labels.

robomimic (`robomimic.utils.dataset.SequenceDataset`, `scripts/get_dataset_info.py`) reads
`data/demo_<i>` groups with the attribute `num_samples`, in each `obs/<key>` and `next_obs/<key>`
(T, ...), `actions` (T, A), `rewards` and `dones` (T,); `data` carries `total` (the frames of all
demos) and `env_args` (JSON: `env_name`, `type`, `env_kwargs`); `mask/<filter key>` is an array of
demo names as bytes, the subset `filter_by_attribute` (config `train.hdf5_filter_key`) trains on.

What this writes, per episode in the dataset's (or the manifest's) order as `demo_0..demo_{N-1}`:

- `obs/state` ← observation.state (float32, LeRobot units, exactly), `obs/effort` ←
  observation.effort where the dataset has it, `obs/<camera>_image` ← observation.images.<camera>
  as (T, H, W, 3) uint8 RGB (robomimic's image observations), decoded one frame at a time with
  PyAV and written one HDF5 chunk per frame;
- `next_obs/<key>`: obs[t+1] (the last frame repeats), as HDF5 virtual datasets over `obs/<key>`:
  robomimic's default config loads them, and they cost no space;
- `actions` ← action normalised to [-1, 1] per joint (robomimic's convention, which
  get_dataset_info enforces): 2·(a − low)/(high − low) − 1 in float64, with low/high the follower's
  calibrated range (info.json `joint_limits`) widened to the dataset's recorded actions
  (meta/stats.json) so none falls outside; `low` and `high` are attributes of `actions`;
- `rewards`: 1 at the last frame of an episode whose outcome is `success`, else 0; `dones`: 1 at the
  last frame (robomimic's done_mode 1, end of trajectory);
- `teleop_flywheel/<feature>`: every other per-frame column as the dataset stores it (the raw
  `action`, blend weight, intervention, trigger...), which robomimic's readers skip;
- attributes: `num_samples`, the episode's provenance (`Source.provenance`: content id, source
  dataset and index, manifest ids), `task`, `outcome` and `episode` (its episodes-table row, JSON).

`mask/`: `success` and `failure` (the episode's outcome), `intervention` (a human took over in at
least one frame) and `no_intervention`, `validated` (the validator passed it, by content id, from the
dataset's validation record, meta/validation/; absent without one), and one per split of info.json `splits`
(`train`, ...). The root attributes record the file's origin: `format`, `episode_ids` (JSON, in demo
order), `source_dataset`, `teleop_flywheel_version` and from a manifest `manifest`,
`manifest_fingerprint` and `manifest_sha256`.

Read with `formats.common.export_source`; written with `formats.common.staged_output`: OUT is whole or absent.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from teleop_flywheel import __version__
from teleop_flywheel.core.progress import progress
from teleop_flywheel.core.so101 import JOINT_NAMES
from teleop_flywheel.data.errors import DatasetError
from teleop_flywheel.data.formats import ExportRequest
from teleop_flywheel.data.formats.aloha.episode_file import h5py_module, json_attr
from teleop_flywheel.data.formats.common.episode_export import Exported, record_export
from teleop_flywheel.data.formats.common.export_source import (
    EFFORT_FEATURE,
    IMAGE_PREFIX,
    JOINT_FEATURE_NAMES,
    POSITIONAL,
    Source,
    episode_columns,
    episode_images,
    open_source,
    so101_joints,
    task_of,
)
from teleop_flywheel.data.formats.common.format_options import PARALLEL_OPTIONS, SEQUENTIAL_FIX, refuse_options
from teleop_flywheel.data.formats.common.staged_output import refuse_existing, staged_output
from teleop_flywheel.data.lerobot.dataset import ACTION, STATE, LeRobotDataset
from teleop_flywheel.data.lerobot.v3_layout import STATS_PATH
from teleop_flywheel.data.provenance.manifest_hash import row_fields, video_keys
from teleop_flywheel.data.reports.card import passed_episode_ids

FORMAT = "hdf5-robomimic"
DEMO = "demo_{index}"
STATE_KEY, EFFORT_KEY, IMAGE_SUFFIX = "state", "effort", "_image"
INTERVENTION_FEATURE = "intervention"
EXTRAS = "teleop_flywheel"  # per demo: the other per-frame columns; robomimic reads only the keys it is given
GYM_TYPE = 2  # robomimic's EnvType.GYM_TYPE: the one type whose metadata needs no simulator to be read
OUTCOME_MASKS = ("success", "failure")


@dataclass
class _Plan:
    """What every demo is written with: the columns, cameras and action range of the dataset."""

    state: str
    action: str
    cameras: list[str]
    low: np.ndarray
    high: np.ndarray


@dataclass
class ExportedFile(Exported):
    masks: dict[str, int]  # filter key -> its demos


def action_range(ds: LeRobotDataset) -> tuple[np.ndarray, np.ndarray]:
    """Per joint (low, high) that maps the dataset's actions into [-1, 1]: the calibrated range widened
    to the recorded actions."""
    limits = ds.info.get("joint_limits") or {}
    low = np.array([limits.get(j, [np.inf, -np.inf])[0] for j in JOINT_FEATURE_NAMES], dtype=np.float64)
    high = np.array([limits.get(j, [np.inf, -np.inf])[1] for j in JOINT_FEATURE_NAMES], dtype=np.float64)
    stats_path = ds.root / STATS_PATH
    try:
        recorded = json.loads(stats_path.read_text()).get(ds.feature_name(ACTION) or ACTION, {})
    except (OSError, json.JSONDecodeError):
        recorded = {}
    if "min" in recorded and "max" in recorded:
        low = np.minimum(low, np.asarray(recorded["min"], dtype=np.float64))
        high = np.maximum(high, np.asarray(recorded["max"], dtype=np.float64))
    if not (np.isfinite(low).all() and np.isfinite(high).all() and (high > low).all()):
        raise DatasetError(f"{ds.root}: no action range to normalise by (info.json joint_limits or "
                           f"{STATS_PATH} action min/max); robomimic's actions are in [-1, 1]")
    return low, high


def _env_args(ds: LeRobotDataset, cameras: list[str]) -> str:
    """robomimic's environment metadata: there is no simulator of the arm, so a rollout needs a real rig."""
    return json.dumps({
        "env_name": ds.robot_type or "so101_follower", "type": GYM_TYPE,
        "env_kwargs": {"robot_type": ds.robot_type, "fps": ds.fps, "joint_names": list(JOINT_NAMES),
                       "cameras": [k.removeprefix(IMAGE_PREFIX) for k in cameras], "real_robot": True,
                       "source": "teleop_flywheel"},
    }, indent=4)


def _next_obs(demo: Any, h5: Any, key: str) -> None:
    """`next_obs/<key>`[t] = `obs/<key>`[min(t + 1, T - 1)], a virtual dataset in this same file."""
    src = demo[f"obs/{key}"]
    n = src.shape[0]
    layout = h5.VirtualLayout(shape=src.shape, dtype=src.dtype)
    source = h5.VirtualSource(".", src.name, shape=src.shape)  # "." is this file, whatever its name becomes
    if n > 1:
        layout[:n - 1] = source[1:n]
    layout[n - 1:] = source[n - 1:n]
    demo.create_virtual_dataset(f"next_obs/{key}", layout)


def _split_ranges(ds: LeRobotDataset) -> dict[str, range]:
    """info.json `splits` ({"train": "0:40"}) as episode-index ranges."""
    out = {}
    for name, span in (ds.info.get("splits") or {}).items():
        lo, _, hi = str(span).partition(":")
        if lo.isdigit() and hi.isdigit():
            out[str(name)] = range(int(lo), int(hi))
    return out


def _write_demo(h5: Any, demo: Any, src: Source, row: dict[str, Any], fields: dict[str, Any],
                plan: _Plan) -> tuple[int, bool]:
    """One episode (`row`, its `fields` as plain JSON) as `demo`; (frames, whether a human intervened)."""
    ds, low, high = src.ds, plan.low, plan.high
    cols = episode_columns(ds, row)
    state = cols.pop(plan.state)
    action = cols[plan.action]
    n = len(state)
    success = fields.get("outcome") == "success"
    demo.attrs.update({"num_samples": n, "task": task_of(ds, cols), "outcome": str(fields.get("outcome") or ""),
                       "episode": json_attr(fields), **src.provenance(row)})
    keys = [STATE_KEY]
    demo.create_dataset(f"obs/{STATE_KEY}", data=state)
    effort = cols.pop(ds.feature_name(EFFORT_FEATURE) or EFFORT_FEATURE, None)
    if effort is not None:
        demo.create_dataset(f"obs/{EFFORT_KEY}", data=effort)
        keys.append(EFFORT_KEY)
    normalised = demo.create_dataset("actions", data=2.0 * (action.astype(np.float64) - low) / (high - low) - 1.0)
    normalised.attrs.update({"low": low, "high": high, "joint_names": json_attr(list(JOINT_NAMES))})
    rewards = np.zeros(n)
    dones = np.zeros(n, dtype=np.int64)
    if n:
        rewards[-1], dones[-1] = float(success), 1
    demo.create_dataset("rewards", data=rewards)
    demo.create_dataset("dones", data=dones)
    intervention = cols.get(ds.feature_name(INTERVENTION_FEATURE) or INTERVENTION_FEATURE)
    extras = demo.create_group(EXTRAS)
    for name, values in sorted(cols.items()):
        if name not in POSITIONAL:
            extras.create_dataset(name, data=values)
    images = []
    for key in plan.cameras:
        h, w = ds.features[key].shape[:2]
        name = key.removeprefix(IMAGE_PREFIX) + IMAGE_SUFFIX
        images.append(demo.create_dataset(f"obs/{name}", (n, h, w, 3), dtype="uint8", chunks=(1, h, w, 3)))
        keys.append(name)
    for t, frames in enumerate(episode_images(ds, row, plan.cameras, n)):
        for writer, rgb in zip(images, frames, strict=True):
            writer[t] = rgb
    for key in keys:
        _next_obs(demo, h5, key)
    return n, bool(intervention is not None and np.asarray(intervention).any())


def export(src: Source, out: Path, show_progress: bool = True, registry: Path | None = None) -> ExportedFile:
    """Write `src`'s episodes as one robomimic file `out` (which must not exist), atomically."""
    h5 = h5py_module(FORMAT)
    ds = src.ds
    state, action = (so101_joints(ds, f, "a robomimic file") for f in (STATE, ACTION))  # before anything is read
    plan = _Plan(state, action, sorted(video_keys(ds)), *action_range(ds))
    validated = passed_episode_ids(ds.root)
    splits = _split_ranges(ds)
    keys = [*OUTCOME_MASKS, "intervention", "no_intervention", *(["validated"] if validated is not None else []),
            *splits]
    masks: dict[str, list[str]] = {k: [] for k in keys}
    frames, ids = 0, []
    with staged_output(out, directory=False) as stage, h5.File(stage, "w") as f, \
            progress(len(src.episodes), "export" if show_progress else None, unit="episode") as bar:
        data = f.create_group("data")
        for k, row in enumerate(src.rows()):
            name = DEMO.format(index=k)
            fields = row_fields(row)
            n, intervened = _write_demo(h5, data.create_group(name), src, row, fields, plan)
            frames += n
            episode_id = str(fields.get("episode_id") or "")
            ids.append(episode_id)
            if fields.get("outcome") in OUTCOME_MASKS:
                masks[str(fields["outcome"])].append(name)
            masks["intervention" if intervened else "no_intervention"].append(name)
            if validated is not None and episode_id in validated:
                masks["validated"].append(name)
            for split, span in splits.items():
                if int(row["episode_index"]) in span:
                    masks[split].append(name)
            bar.update(1)
        data.attrs.update({"total": frames, "env_args": _env_args(ds, plan.cameras)})
        for key, demos in masks.items():
            f.create_dataset(f"mask/{key}", data=np.array(demos, dtype="S"))  # robomimic decodes bytes
        f.attrs.update({"format": FORMAT, "fps": ds.fps, "episode_ids": json_attr(ids),
                        "joint_names": json_attr(list(JOINT_NAMES)), "source_dataset": os.path.abspath(ds.root),
                        "teleop_flywheel_version": __version__, **src.attrs})
    out = Path(os.path.abspath(out))
    entry = record_export(src, out, FORMAT, registry)
    return ExportedFile(out, len(src.episodes), frames, entry["export"], {k: len(v) for k, v in masks.items()})


def run_export(req: ExportRequest) -> int:
    """The `export --to hdf5-robomimic` verb's work: one line saying what was written."""
    refuse_options(req, ("jpeg", "calibration"), FORMAT,
                   "leave it out: the frames are stored uncompressed, the joints in LeRobot units")
    refuse_options(req, PARALLEL_OPTIONS, FORMAT, SEQUENTIAL_FIX)
    refuse_existing(req.out)
    h5py_module(FORMAT)
    made = export(open_source(req.source, req.dataset), req.out, registry=req.registry)
    keys = ", ".join(f"{k} ({v})" for k, v in made.masks.items())
    print(f"wrote {made.out}: {made.episodes} demos, {made.frames} frames; filter keys {keys}; robomimic trains on "
          f"one with config.train.data={str(made.out)!r}, config.train.hdf5_filter_key='success'; "
          f"lineage export {made.export_id}")
    return 0
