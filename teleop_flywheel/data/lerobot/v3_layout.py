"""LeRobot v3.0 on-disk format, as LeRobot 0.4.x writes it: paths, features, stats, video encoding.

Files (root = the dataset):

    meta/info.json                       codebase_version "v3.0", fps, features, totals, paths, splits
    meta/stats.json                      {feature: {min,max,mean,std,count,q01,q10,q50,q90,q99}}
    meta/tasks.parquet                   index "task", column task_index
    meta/episodes/chunk-XXX/file-XXX.parquet   one row per episode: episode_index, tasks, length,
                                         data/chunk_index, data/file_index, dataset_from_index,
                                         dataset_to_index, videos/<key>/{chunk_index,file_index,
                                         from_timestamp,to_timestamp}, meta/episodes/{chunk_index,
                                         file_index}, stats/<feature>/<stat> (+ our episode columns);
                                         ours: `EPISODES_PER_FILE` rows a file, one schema for all
    meta/episode_scores.parquet          ours, LeRobot ignores it: the curation columns of every
                                         episode (`SCORES_PATH`, data/curation/curate.py)
    data/chunk-XXX/file-XXX.parquet      index, episode_index, frame_index, timestamp (float32,
                                         = frame_index/fps), task_index + the features
    videos/<key>/chunk-XXX/file-XXX.mp4  many episodes back to back (episode e occupies
                                         [from_timestamp, to_timestamp) of its file)

Stats follow LeRobot's `compute_episode_stats`/`aggregate_stats`: per episode over axis 0
(scalars keep a length-1 axis), count = frames; images per channel (shape (3,1,1)) on up to
`IMAGE_STAT_FRAMES` evenly spaced frames, downsampled to ≤ 150 px on the long side, scaled
1/255, count = frames sampled; aggregation weights means/variances/quantiles by count (quantiles
as LeRobot does: the count-weighted mean of the per-episode quantiles).
"""
from __future__ import annotations

import json
import os
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import numpy as np
import pyarrow as pa

from teleop_flywheel.core.files import replace_atomic
from teleop_flywheel.data.lerobot.encoder_process import ENCODE_STALL_S, EncoderProcess

CODEBASE_VERSION = "v3.0"
DEFAULT_CHUNK_SIZE = 1000
DEFAULT_DATA_FILE_SIZE_IN_MB = 100
DEFAULT_VIDEO_FILE_SIZE_IN_MB = 200
INFO_PATH = "meta/info.json"
STATS_PATH = "meta/stats.json"
TASKS_PATH = "meta/tasks.parquet"
SAMPLE_WEIGHTS_PATH = "meta/sample_weights.parquet"  # ours (data/curation/weights.py); LeRobot ignores it
EPISODES_PATH = "meta/episodes/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
# An append rewrites the last episodes file only, so its cost is bounded by this, not by the dataset
# (LeRobot reads every meta/episodes file as one table: each of ours has the same schema)
EPISODES_PER_FILE = 1000
# ours: the curation columns (jerk_z, duration_ratio, coverage_gain: relative to the whole dataset, so
# an append changes them for old rows) and what they are computed from, one row per episode; rewritten
# whole by each append (a few floats a row), where the episodes files are not; LeRobot ignores it
SCORES_PATH = "meta/episode_scores.parquet"
DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
STAT_NAMES = ("min", "max", "mean", "std", "count", "q01", "q10", "q50", "q90", "q99")
QUANTILES = {"q01": 0.01, "q10": 0.10, "q50": 0.50, "q90": 0.90, "q99": 0.99}
DEFAULT_FEATURES: dict[str, dict[str, Any]] = {
    "timestamp": {"dtype": "float32", "shape": [1], "names": None},
    "frame_index": {"dtype": "int64", "shape": [1], "names": None},
    "episode_index": {"dtype": "int64", "shape": [1], "names": None},
    "index": {"dtype": "int64", "shape": [1], "names": None},
    "task_index": {"dtype": "int64", "shape": [1], "names": None},
}
CODECS = ("libsvtav1", "h264")
# libsvtav1 preset: 10, 1.2-1.4x faster than SVT's default (8) at the same picture. Not LeRobot 0.4.4's 12:
# at 11 and 12 every inter frame (g=2: every second) kept blocks of the frame before — measured, the
# 16-px pixel timecode of 150 of 300 frames came out damaged (0 of 300 at 8 and 10; test_camera.py).
SVT_PRESET = "10"
# PyAV before 18 (15.1 is what LeRobot 0.4.4 installs) bundles an SVT-AV1 that at presets 10 and 12
# writes damaged inter frames: synthetic-session frames at 320x240 came back 4.6-14.8/255 off their
# source on every second frame, against 1.1-1.2 at preset 8 and with PyAV 18 at 10 (test_video.py).
# LeRobot's own writer (preset 12) has the same damage there.
SVT_PRESET_OLD_PYAV = "8"
X264_THREADS = 2  # h264's slices: fixed, not the machine's CPU count, so any machine writes the same bytes


def svt_preset() -> str:
    """The libsvtav1 preset this PyAV's bundled SVT-AV1 encodes faithfully at."""
    return SVT_PRESET if int(av.__version__.split(".")[0]) >= 18 else SVT_PRESET_OLD_PYAV
IMAGE_STAT_FRAMES = 100
os.environ.setdefault("SVT_LOG", "1")  # SVT-AV1 prints its banner per encoder otherwise; errors still show


def chunk_file(index: int, chunks_size: int = DEFAULT_CHUNK_SIZE) -> tuple[int, int]:
    """(chunk_index, file_index) of the index-th file of a kind."""
    return index // chunks_size, index % chunks_size


# -- stats ---------------------------------------------------------------------------------------

def feature_stats(values: np.ndarray) -> dict[str, np.ndarray]:
    """LeRobot's per-episode stats of one numeric feature: reduce axis 0, keep a length-1 axis for scalars."""
    v = np.asarray(values, dtype=np.float64)
    if v.ndim == 1:
        v = v[:, None]
    q = np.quantile(v, list(QUANTILES.values()), axis=0)
    out = {"min": v.min(0), "max": v.max(0), "mean": v.mean(0), "std": v.std(0), "count": np.array([len(v)])}
    out.update({k: q[i] for i, k in enumerate(QUANTILES)})
    return out


def sample_indices(n: int, k: int = IMAGE_STAT_FRAMES) -> np.ndarray:
    return np.unique(np.linspace(0, n - 1, min(n, k)).round().astype(np.int64))


def downsample(image: np.ndarray, max_side: int = 150) -> np.ndarray:
    step = max(1, -(-max(image.shape[:2]) // max_side))
    return image[::step, ::step]


def image_stats(images: list[np.ndarray]) -> dict[str, np.ndarray]:
    """Per-channel stats of HxWx3 uint8 RGB images scaled 1/255, shapes (3,1,1); count = images."""
    px = np.concatenate([im.reshape(-1, 3) for im in images]).astype(np.float64) / 255.0
    s = feature_stats(px)
    out = {k: v.reshape(3, 1, 1) for k, v in s.items() if k != "count"}
    out["count"] = np.array([len(images)])
    return out


def aggregate_stats(per_episode: list[dict[str, dict[str, np.ndarray]]]) -> dict[str, dict[str, np.ndarray]]:
    """Combine per-episode stats: min of mins, max of maxes, count-weighted mean, pooled variance,
    count-weighted mean of the quantiles every episode has (as LeRobot's `aggregate_feature_stats`)."""
    keys = dict.fromkeys(k for s in per_episode for k in s)
    out: dict[str, dict[str, np.ndarray]] = {}
    for key in keys:
        ss = [s[key] for s in per_episode if key in s]
        counts = np.array([float(s["count"][0]) for s in ss])
        w = (counts / counts.sum()).reshape((-1,) + (1,) * np.asarray(ss[0]["mean"]).ndim)
        means = np.stack([np.asarray(s["mean"], float) for s in ss])
        mean = (w * means).sum(0)
        var = (w * (np.stack([np.asarray(s["std"], float) for s in ss]) ** 2 + (means - mean) ** 2)).sum(0)
        agg = {"min": np.min(np.stack([s["min"] for s in ss]), 0), "max": np.max(np.stack([s["max"] for s in ss]), 0),
               "mean": mean, "std": np.sqrt(var), "count": np.array([int(counts.sum())])}
        for q in QUANTILES:
            if all(q in s for s in ss):  # LeRobot's stats before 0.4 (v2.1) have no quantiles
                agg[q] = (w * np.stack([np.asarray(s[q], float) for s in ss])).sum(0)
        out[key] = agg
    return out


def stats_to_json(stats: dict[str, dict[str, np.ndarray]]) -> dict[str, dict[str, Any]]:
    return {k: {s: np.asarray(v).tolist() for s, v in d.items()} for k, d in stats.items()}


def stats_from_episode_row(row: dict[str, Any], keys: list[str]) -> dict[str, dict[str, np.ndarray]]:
    out: dict[str, dict[str, np.ndarray]] = {}
    for key in keys:
        if f"stats/{key}/mean" in row:
            out[key] = {s: np.asarray(_nested(row[f"stats/{key}/{s}"])) for s in STAT_NAMES}
    return out


def _nested(value: Any) -> Any:
    if isinstance(value, (list, tuple)) or hasattr(value, "tolist"):
        v = value.tolist() if hasattr(value, "tolist") else value
        return [_nested(x) for x in v] if isinstance(v, list) else v
    return value


# -- features / info ------------------------------------------------------------------------------

def vector_feature(names: list[str], dtype: str = "float32") -> dict[str, Any]:
    return {"dtype": dtype, "shape": [len(names)], "names": list(names)}


def scalar_feature(dtype: str) -> dict[str, Any]:
    return {"dtype": dtype, "shape": [1], "names": None}


def video_feature(height: int, width: int, info: dict[str, Any] | None = None) -> dict[str, Any]:
    f: dict[str, Any] = {"dtype": "video", "shape": [height, width, 3], "names": ["height", "width", "channels"]}
    if info is not None:
        f["info"] = info
    return f


def video_info(path: Path) -> dict[str, Any]:
    """The `info` block of a video feature, read from the file (as LeRobot's get_video_info)."""
    with av.open(str(path)) as c:
        s = c.streams.video[0]
        info = {"video.height": s.height, "video.width": s.width, "video.codec": s.codec_context.codec.canonical_name,
                "video.pix_fmt": s.codec_context.pix_fmt, "video.is_depth_map": False,
                "video.fps": int(s.base_rate) if s.base_rate else None, "video.channels": 3,
                "has_audio": len(c.streams.audio) > 0}
    return info


def new_info(fps: int, robot_type: str, features: dict[str, Any]) -> dict[str, Any]:
    return {
        "codebase_version": CODEBASE_VERSION, "robot_type": robot_type, "total_episodes": 0, "total_frames": 0,
        "total_tasks": 0, "chunks_size": DEFAULT_CHUNK_SIZE, "data_files_size_in_mb": DEFAULT_DATA_FILE_SIZE_IN_MB,
        "video_files_size_in_mb": DEFAULT_VIDEO_FILE_SIZE_IN_MB, "fps": fps, "splits": {}, "data_path": DATA_PATH,
        "video_path": VIDEO_PATH, "features": {**features, **DEFAULT_FEATURES},
    }


def write_json(path: Path, data: Any) -> None:
    """info.json / stats.json: replaced by design, so through a unique temp file and `os.replace`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    replace_atomic(path, json.dumps(data, indent=4))


def arrow_column(values: np.ndarray, dtype: str) -> pa.Array:
    """A data-parquet column: scalars as values, vectors as fixed_size_list (what datasets>=4 writes)."""
    t = {"float32": pa.float32(), "float64": pa.float64(), "int64": pa.int64(), "bool": pa.bool_()}[dtype]
    v = np.asarray(values)
    if v.ndim == 1 or (v.ndim == 2 and v.shape[1] == 1 and dtype == "bool"):
        return pa.array(v.reshape(-1), type=t)
    if v.ndim == 2 and v.shape[1] == 1:
        return pa.array(v.reshape(-1), type=t)
    flat = pa.array(v.reshape(-1), type=t)
    return pa.FixedSizeListArray.from_arrays(flat, v.shape[1])


# -- video ---------------------------------------------------------------------------------------

def encoder_options(codec: str, g: int = 2, crf: int = 30) -> dict[str, str]:
    """The encoder's options for `codec`: the same frames give the same bytes in every run, process and
    machine (test_video.py). SVT-AV1 does at any thread count. x264 does not by default: its MB-tree
    reads memory it never wrote when a GOP is 2 frames, so the bytes (and at times a frame's pixels)
    followed whatever the process's heap held (measured: one in five converts of the same bag, and
    every run under MALLOC_PERTURB_=1); and its slices follow the machine's CPU count. MB-tree has
    at most one frame to carry a block's cost into at g=2 and costs ~20 % more bytes off; the
    threads are fixed."""
    options = {"g": str(g), "crf": str(crf)}
    if codec == "libsvtav1":
        options["preset"] = svt_preset()
    else:
        options.update({"threads": str(X264_THREADS), "x264-params": "mbtree=0"})
    return options


class VideoEncoder:
    """One mp4 file: yuv420p frames in, libsvtav1 (g=2, crf=30 as LeRobot; preset `svt_preset()`) or h264 out.
    The encoder runs in a child process, watched: `EncoderStalled` once it makes no progress for
    `stall_s` seconds (`encoder_process.py`)."""

    def __init__(self, path: Path, width: int, height: int, fps: int, codec: str = "libsvtav1",
                 g: int = 2, crf: int = 30, stall_s: float = ENCODE_STALL_S) -> None:
        if codec not in CODECS:
            raise ValueError(f"codec must be one of {CODECS}, got {codec!r}")
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._child = EncoderProcess(path, width, height, fps, "libx264" if codec == "h264" else codec,
                                     encoder_options(codec, g, crf), stall_s)
        self.frames = 0

    def add_i420(self, yuv: np.ndarray) -> None:
        """One frame already in I420 layout ((h*3/2) x w uint8, e.g. cv2.COLOR_BGR2YUV_I420)."""
        self._child.send(np.ascontiguousarray(yuv, dtype=np.uint8).data)
        self.frames += 1

    def close(self) -> None:
        self._child.finish()

    def abort(self) -> None:
        """Stop without finishing the file (an error while frames were made): the child killed, the file removed."""
        self._child.abort()

    def __enter__(self) -> VideoEncoder:
        return self

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        if kind is None:
            self.close()
        else:
            self.abort()


def concat_videos(parts: list[Path], out: Path) -> None:
    """Remux mp4s back to back into `out` (no re-encode), each starting where the previous ended."""
    remux([(part, None) for part in parts], out)


def remux(parts: list[tuple[Path, tuple[float, float] | None]], out: Path) -> list[int]:
    """Copy packets (no re-encode) back to back into `out`: of each part, a whole mp4 (span None) or
    the packets whose pts lies in its span's [from, to) seconds (an episode of a dataset's video,
    the rule `manifest_hash.video_hashes` reads episodes by); each part starts where the previous
    ended. Returns the packets copied per part. A span must start on a key frame (every episode
    does: each was encoded as a video of its own)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    copied: list[int] = []
    with av.open(str(out), "w") as dst:
        ostream = None
        offset = Fraction(0)
        for part, span in parts:
            with av.open(str(part)) as src:
                istream = src.streams.video[0]
                if ostream is None:
                    ostream = dst.add_stream_from_template(istream, opaque=True)
                tb = istream.time_base
                rate = istream.average_rate or istream.base_rate
                if tb is None or rate is None:
                    raise ValueError(f"{part}: video stream without a time base or frame rate")
                shift = int(round(offset / tb))
                packets = src.demux(istream)
                if span is not None:
                    lo, hi = span
                    shift -= int(round(Fraction(lo) / tb))
                    src.seek(int(lo / tb), stream=istream, backward=True, any_frame=False)
                    packets = _in_span(src.demux(istream), tb, lo, hi, part)
                count = 0
                for packet in packets:
                    if packet.dts is None or packet.pts is None:
                        continue
                    packet.pts += shift
                    packet.dts += shift
                    packet.stream = ostream
                    dst.mux(packet)
                    count += 1
                copied.append(count)
                offset += Fraction(istream.frames if span is None else count) / Fraction(rate)
    return copied


def _in_span(packets: Iterator[av.Packet], tb: Fraction, lo: float, hi: float, part: Path) -> Iterator[av.Packet]:
    """The packets with pts in [lo, hi) seconds, in decode order, the first a key frame; stops at
    the first packet decoded at or after hi (no later packet can be shown before it)."""
    first = True
    for packet in packets:
        if packet.pts is None or packet.dts is None:
            continue
        if float(packet.dts * tb) >= hi - 1e-6:
            return
        if not lo - 1e-6 <= float(packet.pts * tb) < hi - 1e-6:
            continue
        if first and not packet.is_keyframe:
            raise ValueError(f"{part}: the span [{lo:.3f}, {hi:.3f}) s does not start on a key frame; "
                             "it cannot be copied without re-encoding")
        first = False
        yield packet
