"""Export benchmark: dataset → each export format, frames/s against reading the source alone plus the writer's floor.

Source: `synthetic_session` episodes (simulated arm, one 640×480 camera at 30 fps) converted with
the converter's default codec (libsvtav1), the dataset a user exports. Measured in the same run,
one process (`--workers 1`) throughout so the ratios compare like with like:
- read floor: every episode's columns and every frame decoded, through the exporters' own reader
  (`formats.common.export_source.episode_columns` / `episode_frames`) and nothing else; measured
  again beside each format's exports (the load of a shared machine drifts over a run), and that
  format's own figure is the one its floor uses;
- per format (`FORMATS`, one line each): the `teleop-flywheel export` verb, end to end (read,
  convert units, write, fsync, rename, lineage registration); its writer's floor: only what any
  writer of that format must do with frames already decoded (a ring of the dataset's own frames,
  cycled to every frame's slot, so no decoding is counted twice); and the steps the verb adds
  beyond both, timed alone: making the floor's files durable (fsync, which the verb's atomic
  output does) and hashing the output for lineage (`provenance.lineage.content_files`);
- the same export with `--workers 2`, for the speedup over episodes on this machine, for the formats
  of a file per episode (hdf5-aloha, mcap); hdf5-robomimic and rlds write one ordered file or
  record stream in one process and take no `--workers`.
rlds runs only where tensorflow_datasets imports (the TFDS venv, docs/formats.md); elsewhere its
line says it was skipped.
Each figure is the best of `--repeat` runs, the floor and the exports interleaved (each output
removed before the next, so the disk's write-back of one does not land on another). Target
(SPEC §9): export ≤ 1.5 × (read floor + writer floor). The machine's load average is recorded:
other processes share its 2 cores.

Usage: `python bench/export.py [--episodes 3] [--seconds 20] [--repeat 2] [--out bench/results/export.json]`
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import cv2
import h5py
import numpy as np
from result_file import write_result

from teleop_flywheel.cli import main as cli
from teleop_flywheel.data.convert.converter import convert
from teleop_flywheel.data.formats.common.export_source import episode_columns, episode_frames, open_source
from teleop_flywheel.data.lerobot.commit import fsync_tree
from teleop_flywheel.data.provenance.lineage import content_files
from teleop_flywheel.data.provenance.manifest_hash import video_keys
from teleop_flywheel.testing.synthetic_session import SessionSpec, write_session

RING = 60  # decoded frames a writer floor cycles through (memory: 60 × 0.9 MB)
TARGET = 1.5


def floor_aloha_raw(path: Path, ring: list[np.ndarray], lengths: list[int]) -> None:
    """h5py writing (T, H, W, 3) uint8, one chunk per frame, and the two joint arrays: ALOHA's layout."""
    h, w, _ = ring[0].shape
    for e, n in enumerate(lengths):
        with h5py.File(path / f"episode_{e}.hdf5", "w") as f:
            f.create_dataset("observations/qpos", data=np.zeros((n, 6)))
            f.create_dataset("action", data=np.zeros((n, 6)))
            d = f.create_dataset("observations/images/wrist", (n, h, w, 3), dtype="uint8", chunks=(1, h, w, 3))
            for t in range(n):
                d[t] = ring[t % len(ring)]


def floor_aloha_jpeg(path: Path, ring: list[np.ndarray], lengths: list[int], quality: int = 50) -> None:
    """JPEG-encoding every frame with OpenCV and writing the bytes as zero-padded rows, as ALOHA does
    (rows as wide as the ring's longest JPEG, known here in advance: the least any writer stores)."""
    params = [int(cv2.IMWRITE_JPEG_QUALITY), quality]
    width = max(len(cv2.imencode(".jpg", rgb, params)[1]) for rgb in ring)
    for e, n in enumerate(lengths):
        with h5py.File(path / f"episode_{e}.hdf5", "w") as f:
            f.create_dataset("observations/qpos", data=np.zeros((n, 6)))
            f.create_dataset("action", data=np.zeros((n, 6)))
            d = f.create_dataset("observations/images/wrist", (n, width), dtype="uint8", chunks=(1, width))
            for t in range(n):
                ok, encoded = cv2.imencode(".jpg", ring[t % len(ring)], params)
                row = np.zeros(d.shape[1], np.uint8)
                row[:len(encoded)] = encoded.reshape(-1)
                d[t] = row


def floor_robomimic(path: Path, ring: list[np.ndarray], lengths: list[int]) -> None:
    """h5py writing one file of `data/demo_N` groups: (T, H, W, 3) uint8 one chunk per frame, the joint arrays."""
    h, w, _ = ring[0].shape
    with h5py.File(path / "out.hdf5", "w") as f:
        for e, n in enumerate(lengths):
            f.create_dataset(f"data/demo_{e}/obs/state", data=np.zeros((n, 6), np.float32))
            f.create_dataset(f"data/demo_{e}/actions", data=np.zeros((n, 6)))
            d = f.create_dataset(f"data/demo_{e}/obs/wrist_image", (n, h, w, 3), dtype="uint8", chunks=(1, h, w, 3))
            for t in range(n):
                d[t] = ring[t % len(ring)]


def _rgb_jpeg(rgb: np.ndarray, quality: int) -> bytes:
    """An RGB frame as JPEG: what every JPEG writer of RGB frames pays (OpenCV encodes from BGR)."""
    return cv2.imencode(".jpg", np.ascontiguousarray(rgb[..., ::-1]), [int(cv2.IMWRITE_JPEG_QUALITY), quality])[1]


def floor_mcap(path: Path, ring: list[np.ndarray], lengths: list[int], quality: int = 90) -> None:
    """JPEG at the exporter's default quality, one message a frame into one zstd-chunked MCAP per episode
    (the `mcap` package's writer), and a joint-state-sized message a frame: no CDR, no rosbag2 metadata."""
    from mcap.writer import Writer  # noqa: PLC0415

    for e, n in enumerate(lengths):
        with open(path / f"episode_{e}.mcap", "wb") as stream:
            w = Writer(stream)
            w.start()
            schema = w.register_schema("sensor_msgs/msg/CompressedImage", "ros2msg", b"")
            image = w.register_channel("/cameras/wrist/image/compressed", "cdr", schema)
            joints = w.register_channel("/follower/joint_states", "cdr", schema)
            for t in range(n):
                w.add_message(image, log_time=t, publish_time=t, data=_rgb_jpeg(ring[t % len(ring)], quality).tobytes())
                w.add_message(joints, log_time=t, publish_time=t, data=bytes(160))
            w.finish()


def floor_rlds(path: Path, ring: list[np.ndarray], lengths: list[int], quality: int = 95) -> None:
    """JPEG at the exporter's default quality and one TFRecord an episode (a `tf.train.Example` holding its
    frames' bytes and joint arrays): what any TFDS/RLDS writer must serialise, without TFDS's feature encoders."""
    import tensorflow as tf  # noqa: PLC0415

    with tf.io.TFRecordWriter(str(path / "out.tfrecord")) as writer:
        for n in lengths:
            frames = [_rgb_jpeg(ring[t % len(ring)], quality).tobytes() for t in range(n)]
            feature = {"image": tf.train.Feature(bytes_list=tf.train.BytesList(value=frames)),
                       "state": tf.train.Feature(float_list=tf.train.FloatList(value=np.zeros(n * 6))),
                       "action": tf.train.Feature(float_list=tf.train.FloatList(value=np.zeros(n * 6)))}
            writer.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())


@dataclass(frozen=True)
class Case:
    to: str  # the `export --to` format
    args: tuple[str, ...]  # its options
    floor: Callable[[Path, list[np.ndarray], list[int]], None]  # the writer's floor on decoded frames
    parallel: bool = True  # a file per episode, written over `--workers`; else one ordered stream (no --workers)
    needs: str | None = None  # a module the format needs, skipped (and said so) where it is absent


# one line per format (and option set worth measuring)
FORMATS = {
    "hdf5-aloha": Case("hdf5-aloha", (), floor_aloha_raw),
    "hdf5-aloha --jpeg 50": Case("hdf5-aloha", ("--jpeg", "50"), floor_aloha_jpeg),
    "hdf5-robomimic": Case("hdf5-robomimic", (), floor_robomimic, parallel=False),
    "mcap": Case("mcap", (), floor_mcap),
    "rlds": Case("rlds", (), floor_rlds, parallel=False, needs="tensorflow_datasets"),
}


def read_floor(ds: Path) -> tuple[float, int, list[int], list[np.ndarray]]:
    """Seconds to read every column and decode every frame; frames, episode lengths, a ring of frames."""
    src = open_source(ds)
    keys = sorted(video_keys(src.ds))
    ring: list[np.ndarray] = []
    lengths = []
    t = time.perf_counter()
    for row in src.rows():
        lengths.append(len(episode_columns(src.ds, row)["frame_index"]))
        for key in keys:
            for rgb in episode_frames(src.ds, row, key):
                if len(ring) < RING:
                    ring.append(rgb)
    return time.perf_counter() - t, sum(lengths), lengths, ring


def remove(path: Path) -> None:
    """An output, file or directory."""
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink()


def timed(fn: Callable[[], object]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def export(ds: Path, out: Path, case: Case, workers: int | None) -> float:
    """Seconds of `teleop-flywheel export`; `workers` None: the format takes no --workers (one process)."""
    argv = ["export", str(ds), "--to", case.to, str(out), *case.args,
            *(["--workers", str(workers)] if workers is not None else [])]
    t = time.perf_counter()
    if cli(argv) != 0:
        raise SystemExit(f"bench/export.py: teleop-flywheel {' '.join(argv)} failed")
    return time.perf_counter() - t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "export.json"))
    args = ap.parse_args()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench-export-") as tmp_s:
        tmp = Path(tmp_s)
        os.environ["TELEOP_FLYWHEEL_LINEAGE"] = str(tmp / "lineage.json")  # not the user's registry
        bags = [write_session(tmp / "bags" / f"episode_{i}",
                              SessionSpec(duration_s=args.seconds, width=640, height=480, seed=i, motion="reach")).bag
                for i in range(args.episodes)]
        ds = tmp / "ds"
        res = convert(bags, ds, workers=1, progress=False)
        if sum(len(ids) for ids in res.converted.values()) != args.episodes:
            raise SystemExit(f"bench/export.py: converted {res.converted} of {args.episodes} episodes")
        read_s, frames, lengths, ring = min((read_floor(ds) for _ in range(args.repeat)), key=lambda r: r[0])
        result: dict[str, object] = {
            "episodes": args.episodes, "frames": frames, "resolution": "640x480", "source_codec": "libsvtav1",
            "repeat": args.repeat, "read_floor_s": round(read_s, 2), "read_floor_fps": round(frames / read_s, 1),
            "target_ratio_max": TARGET, "cpus": os.cpu_count(),
        }
        formats: dict[str, dict[str, float] | str] = {}
        for name, case in FORMATS.items():
            if case.needs and importlib.util.find_spec(case.needs) is None:
                formats[name] = f"{name}: skipped, {case.needs} absent"
                continue
            if case.needs:
                importlib.import_module(case.needs)  # its import (seconds for TensorFlow) is in no figure
            reads, writer, fsync, ours, parallel, hashing = [], [], [], [], [], []
            for _ in range(args.repeat):
                reads.append(read_floor(ds)[0])  # again beside each export: the machine's load drifts
                (tmp / "floor").mkdir()
                writer.append(timed(lambda case=case: case.floor(tmp / "floor", ring, lengths)))
                fsync.append(timed(lambda: fsync_tree(tmp / "floor")))
                shutil.rmtree(tmp / "floor")
                ours.append(export(ds, tmp / "out", case, workers=1 if case.parallel else None))
                hashing.append(timed(lambda: content_files(tmp / "out")))
                size = sum(p.stat().st_size for p in [tmp / "out", *(tmp / "out").rglob("*")] if p.is_file())
                remove(tmp / "out")
                if case.parallel:
                    parallel.append(export(ds, tmp / "out", case, workers=2))
                    remove(tmp / "out")
            floor = min(reads) + min(writer)
            formats[name] = {
                "export_s": round(min(ours), 2), "export_fps": round(frames / min(ours), 1),
                "read_floor_s": round(min(reads), 2), "writer_floor_s": round(min(writer), 2),
                "floor_s": round(floor, 2), "fsync_s": round(min(fsync), 2),
                "ratio_export_over_floor": round(min(ours) / floor, 3),
                "lineage_hash_s": round(min(hashing), 2), "output_mb": round(size / 1e6, 1),
            } | ({"workers_2_s": round(min(parallel), 2), "speedup_workers_2": round(min(ours) / min(parallel), 2)}
                 if parallel else {"workers": "one process: one ordered file (docs/formats.md)"})
        result["formats"] = formats
    result["load_average_before"] = [round(x, 2) for x in load_before]
    result["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    write_result(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
