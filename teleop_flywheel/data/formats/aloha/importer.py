"""A directory of ALOHA/ACT `episode_N.hdf5` files → a LeRobot v3.0 dataset, written by our own writer.

Every file is checked before anything is written (a truncated or unreadable HDF5, no `/action` or
`/observations/qpos`, a joint count or joint names other than the SO-101's six, a camera that is not
(T, H, W, 3) uint8 nor ALOHA's JPEG rows, files that disagree on cameras, sizes or frame rate): the
first bad file is one error naming it and what is wrong, exit 1, and nothing is written.

Then per episode N (in N order), frame by frame: qpos → observation.state and action → action
(`episode_file.from_aloha`: back to LeRobot's degrees and 0..100), `/observations/effort` →
observation.effort unless it is marked `absent`, each camera encoded with the converter's
`format.VideoEncoder` into a temporary mp4 (ALOHA's JPEG rows decoded with `cv2.imdecode`, as
ALOHA's own loaders do), our `/teleop_flywheel/frames/*` columns restored with their dtype and
names, and the episodes-table row our export recorded restored as the episode's columns. The
dataset is staged and appended with `lerobot/append.write_episodes` (LeRobot 0.4.x's layout and
stats) and published as `materialize` publishes (`lerobot/commit.new_dataset`): whole or absent.
The task is the files' `task` attribute, else `--task`; the frame rate their `fps` attribute, else
`--fps` (default ALOHA's 50).

Episodes are read and encoded in parallel (`workers` processes, default one per CPU as `convert`,
or Ray tasks), each into its own temporary mp4, and appended in N order: the dataset is the one a
single process writes.
"""
from __future__ import annotations

import functools
import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from teleop_flywheel.core.errors import FlywheelError, UsageError
from teleop_flywheel.core.files import inside
from teleop_flywheel.data.errors import AlohaInputError
from teleop_flywheel.data.formats import ImportRequest
from teleop_flywheel.data.formats.aloha import episode_file
from teleop_flywheel.data.formats.common.export_source import EFFORT_FEATURE, JOINT_FEATURE_NAMES
from teleop_flywheel.data.formats.common.staged_output import Imported
from teleop_flywheel.data.lerobot import commit, v3_layout
from teleop_flywheel.data.lerobot.append import IMAGES, EpisodeData, write_episodes
from teleop_flywheel.data.lerobot.flywheel_schema import SCHEMA_KEY, SCHEMA_VERSION
from teleop_flywheel.data.parallel import own_errors, parallel_map

POSITIONAL_ROW = ("tasks", "length")  # episodes-table fields write_episodes sets itself


@dataclass
class EpisodeFile:
    """What one checked file holds (no frames read yet)."""

    path: Path
    length: int
    fps: float | None
    task: str
    compressed: bool
    cameras: dict[str, tuple[int, int]]  # camera -> (height, width)
    effort: bool
    extras: dict[str, tuple[str, list[str] | None, int]]  # feature -> (dtype, names, width)
    row: dict[str, Any] = field(default_factory=dict)
    dataset_keys: dict[str, Any] = field(default_factory=dict)


def episode_files(directory: Path) -> list[Path]:
    """`episode_N.hdf5` in N order; an error if there are none."""
    if not directory.is_dir():
        raise UsageError("not a directory of ALOHA episode files", where=str(directory),
                         fix="give the directory holding episode_0.hdf5, episode_1.hdf5, ...")
    found = sorted((int(m.group(1)), p) for p in directory.iterdir() if (m := episode_file.EPISODE_NAME.match(p.name)))
    if not found:
        raise UsageError("no episode_N.hdf5 files", where=str(directory),
                         fix="give the directory holding episode_0.hdf5, episode_1.hdf5, ...")
    return [p for _, p in found]


def _attr_json(attrs: Any, key: str) -> Any:
    value = attrs.get(key)
    if value is None:
        return None
    return json.loads(value.decode() if isinstance(value, bytes) else str(value))


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def inspect_file(h5: Any, path: Path) -> EpisodeFile:
    """Open and check one file; AlohaInputError naming it and the problem."""
    def bad(what: str) -> AlohaInputError:
        return AlohaInputError(f"{path}: {what}; nothing was written")

    try:
        f = h5.File(path, "r")
    except OSError as exc:
        raise bad(f"not a readable HDF5 file (truncated or not HDF5: {exc})") from None
    with f:
        for name in (episode_file.ACTION, episode_file.QPOS):
            if name not in f:
                raise bad(f"no /{name} dataset")
        qpos, action = f[episode_file.QPOS], f[episode_file.ACTION]
        joints = len(episode_file.JOINT_NAMES)
        for name, d in ((episode_file.QPOS, qpos), (episode_file.ACTION, action)):
            if d.ndim != 2 or d.shape[1] != joints:
                raise bad(f"/{name} has shape {d.shape}: {d.shape[-1] if d.ndim else 0} joints, not the SO-101's "
                          f"{joints} ({', '.join(episode_file.JOINT_NAMES)}); a foreign arm's joints cannot be mapped")
        names = _attr_json(f.attrs, "joint_names")
        if names is not None and list(names) != list(episode_file.JOINT_NAMES):
            raise bad(f"joint_names {names} are not the SO-101's {list(episode_file.JOINT_NAMES)}")
        length = int(action.shape[0])
        if qpos.shape[0] != length or length == 0:
            raise bad(f"/{episode_file.QPOS} has {qpos.shape[0]} frames, /{episode_file.ACTION} {length}")
        compressed = bool(f.attrs.get("compress", False))
        cameras: dict[str, tuple[int, int]] = {}
        for cam, d in (f[episode_file.IMAGES].items() if episode_file.IMAGES in f else []):
            if d.shape[0] != length:
                raise bad(f"camera {cam} has {d.shape[0]} frames, /{episode_file.ACTION} {length}")
            if compressed:
                if d.ndim != 2 or d.dtype != np.uint8:
                    raise bad(f"camera {cam} is {d.shape} {d.dtype}, not JPEG rows (compress is True)")
                first = cv2.imdecode(np.asarray(d[0]), cv2.IMREAD_COLOR)
                if first is None:
                    raise bad(f"camera {cam} frame 0 is not a decodable JPEG")
                h, w = first.shape[:2]
            else:
                if d.ndim != 4 or d.shape[3] != 3 or d.dtype != np.uint8:
                    raise bad(f"camera {cam} is {d.shape} {d.dtype}, not (T, H, W, 3) uint8")
                h, w = int(d.shape[1]), int(d.shape[2])
            if h % 2 or w % 2:
                raise bad(f"camera {cam} is {w}x{h}: a video needs even sizes (yuv420p)")
            cameras[str(cam)] = (h, w)
        effort = episode_file.EFFORT in f and not bool(f[episode_file.EFFORT].attrs.get(episode_file.ABSENT, False))
        if effort and f[episode_file.EFFORT].shape != (length, joints):
            raise bad(f"/{episode_file.EFFORT} has shape {f[episode_file.EFFORT].shape}, expected ({length}, {joints})")
        extras: dict[str, tuple[str, list[str] | None, int]] = {}
        for name, d in (f[episode_file.FRAMES].items() if episode_file.FRAMES in f else []):
            if d.shape[0] != length:
                raise bad(f"/{episode_file.FRAMES}/{name} has {d.shape[0]} frames, /{episode_file.ACTION} {length}")
            extras[str(name)] = (_text(d.attrs.get("dtype", str(d.dtype))), _attr_json(d.attrs, "names"),
                                 int(np.prod(d.shape[1:])) if d.ndim > 1 else 1)
        fps = f.attrs.get("fps")
        group = f[episode_file.EXTRAS].attrs if episode_file.EXTRAS in f else {}
        keys = {k: v for k in ("trigger_labels", "joint_limits") if (v := _attr_json(group, k)) is not None}
        return EpisodeFile(path, length, float(fps) if fps is not None else None, _text(f.attrs.get("task", "")),
                           compressed, cameras, effort, extras, _attr_json(group, "episode") or {}, keys)


def _agree(files: list[EpisodeFile]) -> None:
    """One dataset holds one camera set, one feature set, one frame rate."""
    first = files[0]
    for e in files[1:]:
        for what, a, b in (("cameras", first.cameras, e.cameras), ("fps", first.fps, e.fps),
                           ("effort", first.effort, e.effort), ("extra columns", first.extras, e.extras)):
            if a != b:
                raise AlohaInputError(f"{e.path}: {what} {b} differ from {first.path.name}'s {a}; one dataset holds "
                                      "one feature set; nothing was written")


def _features(e: EpisodeFile) -> dict[str, Any]:
    feats: dict[str, Any] = {"observation.state": v3_layout.vector_feature(JOINT_FEATURE_NAMES),
                             "action": v3_layout.vector_feature(JOINT_FEATURE_NAMES)}
    if e.effort:
        feats[EFFORT_FEATURE] = v3_layout.vector_feature(episode_file.EFFORT_NAMES)
    for cam, (h, w) in sorted(e.cameras.items()):
        feats[IMAGES + cam] = v3_layout.video_feature(h, w)
    for name, (dtype, names, width) in sorted(e.extras.items()):
        feats[name] = v3_layout.scalar_feature(dtype) if width == 1 and not names else \
            v3_layout.vector_feature(names or [f"{name}[{i}]" for i in range(width)], dtype)
    return feats


def _column(values: np.ndarray, dtype: str) -> np.ndarray:
    v = np.asarray(values).astype({"float32": np.float32, "float64": np.float64, "int64": np.int64,
                                   "bool": bool}.get(dtype, values.dtype))
    return v.reshape(len(v), -1) if v.ndim > 1 else v


def _read_episode(e: EpisodeFile, work: Path, fps: int, codec: str, task: str | None) -> EpisodeData:
    """One file's columns and videos (each camera encoded frame by frame into a temporary mp4); in a
    worker process: everything it needs is in its arguments."""
    h5 = episode_file.h5py_module()
    try:
        with h5.File(e.path, "r") as f:
            cols: dict[str, np.ndarray] = {"observation.state": episode_file.from_aloha(f[episode_file.QPOS][()]),
                                           "action": episode_file.from_aloha(f[episode_file.ACTION][()])}
            if e.effort:
                cols[EFFORT_FEATURE] = np.asarray(f[episode_file.EFFORT][()], dtype=np.float32)
            for name, (dtype, _, _) in e.extras.items():
                cols[name] = _column(f[f"{episode_file.FRAMES}/{name}"][()], dtype)
            cols["frame_index"] = np.arange(e.length, dtype=np.int64)
            cols["timestamp"] = (np.arange(e.length) / fps).astype(np.float32)
            stats = {k: v3_layout.feature_stats(v) for k, v in cols.items()}
            videos = {}
            for cam, (h, w) in sorted(e.cameras.items()):
                mp4 = inside(work, f"{e.path.stem}.{cam}.mp4")  # the camera name is the HDF5 file's
                stats[IMAGES + cam] = _encode(f[f"{episode_file.IMAGES}/{cam}"], e, mp4, (h, w), fps, codec)
                videos[cam] = (str(mp4), h, w)
    except OSError as exc:
        raise AlohaInputError(f"{e.path}: unreadable ({exc}); nothing was written") from None
    extra = {k: v for k, v in e.row.items() if k not in POSITIONAL_ROW}
    extra["source_file"] = e.path.name
    return EpisodeData(task or e.task, e.length, cols, stats, videos, extra)


def _encode(d: Any, e: EpisodeFile, mp4: Path, size: tuple[int, int], fps: int, codec: str) -> dict[str, np.ndarray]:
    """Encode one camera into `mp4` a frame at a time; the image stats of LeRobot's sampled frames."""
    h, w = size
    sampled = set(v3_layout.sample_indices(e.length).tolist())
    images = []
    enc = v3_layout.VideoEncoder(mp4, w, h, fps, codec)
    try:
        for t in range(e.length):
            rgb = d[t]
            if e.compressed:
                # ALOHA decodes its JPEG rows as they are: the channel order that went in comes out.
                rgb = cv2.imdecode(np.asarray(rgb), cv2.IMREAD_COLOR)
                if rgb is None or rgb.shape != (h, w, 3):
                    raise AlohaInputError(f"{e.path}: {d.name} frame {t} is not a {w}x{h} JPEG; nothing was written")
            enc.add_i420(cv2.cvtColor(np.ascontiguousarray(rgb), cv2.COLOR_RGB2YUV_I420))
            if t in sampled:  # a copy: the strided view would keep the whole frame alive
                images.append(np.ascontiguousarray(v3_layout.downsample(rgb)))
    finally:
        enc.close()
    return v3_layout.image_stats(images)


def run_import(req: ImportRequest) -> Imported:
    """`import --from hdf5-aloha DIR OUT` (cli/verbs/import_.py)."""
    return import_aloha(req.source, req.out, req.task, req.fps, req.codec or "libsvtav1",
                        req.robot_type or "so101_follower", workers=req.workers, executor=req.executor)


def import_aloha(directory: Path, out: Path, task: str | None = None, fps: int | None = None,
                 codec: str = "libsvtav1", robot_type: str = "so101_follower", show_progress: bool = True,
                 workers: int | None = None, executor: str = "local") -> Imported:
    """Write the dataset of `directory`'s episode files at `out` (which must not exist), atomically."""
    h5 = episode_file.h5py_module()
    out = Path(os.path.abspath(out))
    if os.path.lexists(out):
        raise UsageError("output already exists", where=str(out),
                         fix="choose a new OUT: an imported dataset is written whole, never over anything")
    files = [inspect_file(h5, p) for p in episode_files(directory)]
    _agree(files)
    rate = files[0].fps if files[0].fps is not None else float(fps or episode_file.ALOHA_FPS)
    if fps is not None and files[0].fps is not None and abs(files[0].fps - fps) > 1e-9:
        raise UsageError(f"the files say {files[0].fps:g} fps, --fps {fps}", where=str(directory),
                         fix="leave out --fps: it is for files that state no frame rate")
    if abs(rate - round(rate)) > 1e-9:
        raise AlohaInputError(f"{files[0].path}: fps {rate} is not a whole number; LeRobot's fps is an integer")
    untitled = [e.path.name for e in files if not (task or e.task)]
    if untitled:
        raise UsageError(f"{untitled[0]} states no task", where=str(directory), fix="give the task with --task TEXT")
    keys: dict[str, Any] = {SCHEMA_KEY: SCHEMA_VERSION, **files[0].dataset_keys,
                            "imported_from": {"format": episode_file.FORMAT, "directory": str(directory.resolve()),
                                              "files": [e.path.name for e in files]}}
    with commit.new_dataset(out) as stage, \
            tempfile.TemporaryDirectory(prefix=f".{out.name}.", dir=out.parent) as work:
        read = functools.partial(_read_episode, work=Path(work), fps=int(round(rate)), codec=codec, task=task)
        with own_errors(FlywheelError, OSError):
            eps = parallel_map(read, files, workers, executor, desc="import" if show_progress else None,
                               unit="episode")
        write_episodes(out, stage, eps, int(round(rate)), robot_type, _features(files[0]), keys)
    return Imported(out, len(files), sum(e.length for e in files))
