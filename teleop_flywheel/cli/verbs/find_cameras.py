"""`teleop-flywheel find-cameras`: list V4L2 cameras, their modes, one still each."""
from __future__ import annotations

import argparse
import glob
from dataclasses import replace
from pathlib import Path

from teleop_flywheel.core.errors import UsageError
from teleop_flywheel.hw.bringup.find_cameras import preferred_mode, still
from teleop_flywheel.hw.camera.offers import describe
from teleop_flywheel.hw.camera.source import CameraConfig
from teleop_flywheel.hw.errors import CameraError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, default=Path("camera_stills"), help="folder for one still per camera")
    parser.add_argument("--synthetic", action="store_true", help="list the simulator's synthetic camera instead")


def run(args: argparse.Namespace) -> int:
    args.out.mkdir(parents=True, exist_ok=True)
    if args.synthetic:
        config = CameraConfig(name="synthetic", source="synthetic", device="synthetic")
        path = still(config, args.out / "synthetic.png")
        print(f"synthetic: {config.width}x{config.height} @ {config.fps:g} fps (RGB, JPEG on the topic); "
              f"still: {path}\n  use: cameras:=front:synthetic")
        return 0
    devices = sorted(glob.glob("/dev/video*"), key=lambda d: (len(d), d))
    cameras = [info for info in map(describe, devices) if info is not None]
    if not cameras:
        raise UsageError("no V4L2 capture device on this machine", where="/dev/video*",
                         fix="is the camera plugged in, and are you in the 'video' group? "
                             "--synthetic shows the simulator's camera")
    for info in cameras:
        print(f"{info.device}: {info.name}")
        for offer in info.modes:
            print(
                f"  {offer.fourcc} {offer.width}x{offer.height} @ {', '.join(f'{f:g}' for f in offer.fps) or '?'} fps"
            )
        mode = preferred_mode(info)
        try:
            config = CameraConfig(name=Path(info.device).name, source="v4l2", device=info.device)
            if mode is not None:
                config = replace(config, width=mode.width, height=mode.height, fps=mode.fps[0], fourcc=mode.fourcc)
            path = still(config, args.out / f"{Path(info.device).name}.png")
            print(f"  still ({config.fourcc} {config.width}x{config.height} @ {config.fps:g} fps): {path}")
        except CameraError as exc:
            print(f"  still: failed ({exc})")
    return 0
