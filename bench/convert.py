"""Convert benchmark: bag → LeRobot v3.0 vs PyAV encode-only of the same frames (and LeRobot's writer).

Session: `synthetic_session` (simulated arm, one 640×480 camera at 30 fps, ≥ 3000 frames, joints
at 100 Hz), recorded with the project's BagWriter. Measured in the same run:
- ours: `convert()` of that bag (read + CDR decode + validate + align + JPEG decode + encode +
  remux + parquet/meta), one worker;
- floor: PyAV alone encoding the very frames the dataset holds, pre-decoded to I420 in memory,
  with the same encoder settings (`--codec`: libsvtav1, yuv420p, g=2, crf=30, preset 10, or h264)
  → ratio ours/floor (time);
- LeRobot 0.4.x's own writer (`LeRobotDataset.create/add_frame/save_episode`) on the same frames,
  if an interpreter with LeRobot is given (`--lerobot-python`): ratio LeRobot/ours, reported with no
  target (SPEC §9: the floor itself is ~2.4x LeRobot's writer with the same codec).

Usage: `python bench/convert.py [--seconds 105] [--codec libsvtav1|h264] [--out bench/results/convert.json]
[--lerobot-python PY]`
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import cv2
import numpy as np
from result_file import write_result

from teleop_flywheel.core.bag_topics import camera_image
from teleop_flywheel.data.convert.converter import convert
from teleop_flywheel.data.lerobot import v3_layout
from teleop_flywheel.recording.mcap.reader import open_bag
from teleop_flywheel.testing.synthetic_session import SessionSpec, write_session

LEROBOT_SCRIPT = r"""
import sys, time, json, numpy as np
from lerobot.datasets.lerobot_dataset import LeRobotDataset
frames = np.load(sys.argv[1], mmap_mode="r")
root = sys.argv[2]
feats = {"observation.state": {"dtype": "float32", "shape": (6,), "names": None},
         "action": {"dtype": "float32", "shape": (6,), "names": None},
         "observation.images.wrist": {"dtype": "video", "shape": frames.shape[1:],
                                      "names": ["height", "width", "channels"]}}
t = time.perf_counter()
ds = LeRobotDataset.create("bench/convert", fps=30, features=feats, root=root, use_videos=True)
z = np.zeros(6, np.float32)
for f in frames:
    ds.add_frame({"observation.state": z, "action": z, "observation.images.wrist": np.asarray(f), "task": "bench"})
ds.save_episode()
ds.finalize()
print(json.dumps({"seconds": time.perf_counter() - t}))
"""


def floor_encode(i420: list[np.ndarray], w: int, h: int, path: Path, codec: str) -> float:
    t = time.perf_counter()
    enc = v3_layout.VideoEncoder(path, w, h, 30, codec)
    for f in i420:
        enc.add_i420(f)
    enc.close()
    return time.perf_counter() - t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=105.0)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "convert.json"))
    ap.add_argument("--codec", choices=v3_layout.CODECS, default="libsvtav1")
    ap.add_argument("--lerobot-python", default=None, help="python of a venv with lerobot==0.4.x installed")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-convert-") as tmp_s:
        tmp = Path(tmp_s)
        t = time.perf_counter()
        write_session(tmp / "session", SessionSpec(duration_s=args.seconds, width=640, height=480, joint_hz=100.0))
        gen_s = time.perf_counter() - t

        t = time.perf_counter()
        cpu0 = os.times()
        res = convert([tmp / "session"], tmp / "ds", codec=args.codec, workers=1, progress=False)
        ours_s = time.perf_counter() - t
        cpu1 = os.times()
        info = json.loads((tmp / "ds" / "meta/info.json").read_text())
        frames = int(info["total_frames"])
        assert res.converted, f"the session was not converted: {res.rejected} {res.errors}"

        # the very frames the dataset holds (ZOH of the camera on the grid), decoded up front
        bag = open_bag(tmp / "session")
        im = bag.images(camera_image("wrist"))
        t0 = max(bag.raw("/follower/joint_states").publish_ns[0], bag.raw("/follower/joint_command").publish_ns[0],
                 im.stamps_ns[0])
        grid = t0 + np.round(np.arange(frames) * 1e9 / 30).astype(np.int64)
        idx = np.searchsorted(im.stamps_ns, grid, side="right") - 1
        decoded = {int(i): cv2.imdecode(np.frombuffer(im.data[int(i)], np.uint8), cv2.IMREAD_COLOR)
                   for i in np.unique(idx)}
        i420 = [cv2.cvtColor(decoded[int(i)], cv2.COLOR_BGR2YUV_I420) for i in idx]
        floor_s = floor_encode(i420, 640, 480, tmp / "floor.mp4", args.codec)
        result = {
            "frames": frames,
            "episode_seconds": frames / 30,
            "generate_session_s": round(gen_s, 2),
            "ours_s": round(ours_s, 2),
            "ours_fps": round(frames / ours_s, 1),
            "ours_realtime_factor": round(frames / 30 / ours_s, 2),
            "ours_cpu_s": round((cpu1.user - cpu0.user) + (cpu1.system - cpu0.system), 2),
            "pyav_encode_only_s": round(floor_s, 2),
            "pyav_encode_only_fps": round(frames / floor_s, 1),
            "ratio_ours_over_pyav_floor": round(ours_s / floor_s, 3),
            "target_ratio_max": 1.25,  # SPEC §9: within 1.25x of the encode-only floor
            "codec": f"{args.codec} yuv420p {v3_layout.encoder_options(args.codec)}",
            "resolution": "640x480",
            "cpus": os.cpu_count(),
        }
        if args.lerobot_python:
            rgb = np.lib.format.open_memmap(tmp / "frames.npy", "w+", np.uint8, (frames, 480, 640, 3))
            for k, i in enumerate(idx):
                rgb[k] = decoded[int(i)][..., ::-1]
            rgb.flush()
            del rgb
            proc = subprocess.run([args.lerobot_python, "-c", LEROBOT_SCRIPT, str(tmp / "frames.npy"),
                                   str(tmp / "lerobot_ds")], capture_output=True, text=True)
            if proc.returncode == 0:
                lr = json.loads(proc.stdout.strip().splitlines()[-1])["seconds"]
                result.update(lerobot_writer_s=round(lr, 2), lerobot_writer_fps=round(frames / lr, 1),
                              ratio_lerobot_over_ours=round(lr / ours_s, 2))
            else:
                result["lerobot_writer_error"] = proc.stderr.strip()[-800:]
        else:
            result["lerobot_writer"] = "not measured: no --lerobot-python given (LeRobot is not installed here)"
    write_result(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
