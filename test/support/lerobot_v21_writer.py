"""Write a small LeRobot v2.1 dataset with LeRobot's own v2.1 writer (LeRobot 0.3.x's `LeRobotDataset`).

Run in an environment whose `lerobot` is 0.3.x (CODEBASE_VERSION "v2.1"), e.g. /work/lr21env:
`python test/support/lerobot_v21_writer.py ROOT [--episodes N] [--frames T]`. An SO-101's six joints
(`shoulder_pan.pos` ...), two cameras of different sizes whose frames carry a moving square, and two
tasks: one per episode, and the last episode switching task halfway (per-frame task_index), encoded
by LeRobot's own video encoder. test/support/lerobot_v21_fixture/ was written by this with
lerobot 0.3.3 (`pip install --no-deps lerobot==0.3.3 datasets==3.6.0` into /work/lr21env over
LeRobot 0.4.4's environment).
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

JOINTS = ["shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper"]
CAMERAS = {"front": (96, 128), "wrist": (64, 96)}  # camera -> (height, width)
FPS = 30
TASKS = ("pick the cube", "place the cube")


def frame_image(h: int, w: int, episode: int, t: int) -> np.ndarray:
    img = np.zeros((h, w, 3), np.uint8)
    img[..., 0] = np.linspace(0, 255, w, dtype=np.uint8)[None, :]
    img[..., 1] = (40 * episode + 3 * t) % 256
    img[..., 2] = np.linspace(255, 0, h, dtype=np.uint8)[:, None]
    y, x = (4 * t) % (h - 16), (6 * t + 10 * episode) % (w - 16)
    img[y:y + 16, x:x + 16] = 255
    return img


def main() -> None:
    from lerobot.datasets.lerobot_dataset import CODEBASE_VERSION, LeRobotDataset  # noqa: PLC0415
    if CODEBASE_VERSION != "v2.1":
        raise SystemExit(f"this lerobot writes {CODEBASE_VERSION}, not v2.1 (install lerobot 0.3.x)")
    p = argparse.ArgumentParser()
    p.add_argument("root", type=Path)
    p.add_argument("--episodes", type=int, default=3)
    p.add_argument("--frames", type=int, default=24)
    args = p.parse_args()
    names = [f"{j}.pos" for j in JOINTS]
    features = {"observation.state": {"dtype": "float32", "shape": (6,), "names": names},
                "action": {"dtype": "float32", "shape": (6,), "names": names}}
    for cam, (h, w) in CAMERAS.items():
        features[f"observation.images.{cam}"] = {"dtype": "video", "shape": (h, w, 3),
                                                 "names": ["height", "width", "channels"]}
    ds = LeRobotDataset.create("local/v21_fixture", FPS, features, root=args.root, robot_type="so101_follower")
    rng = np.random.default_rng(0)
    for e in range(args.episodes):
        n = args.frames + 5 * e
        for t in range(n):
            frame = {"observation.state": rng.normal(0, 30, 6).astype(np.float32),
                     "action": rng.normal(0, 30, 6).astype(np.float32)}
            for cam, (h, w) in CAMERAS.items():
                frame[f"observation.images.{cam}"] = frame_image(h, w, e, t)
            switch = e == args.episodes - 1 and t >= n // 2
            ds.add_frame(frame, task=TASKS[(e + switch) % 2])
        ds.save_episode()


if __name__ == "__main__":
    main()
