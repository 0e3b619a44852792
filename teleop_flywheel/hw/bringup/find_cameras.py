"""`teleop-flywheel find-cameras`: the cameras this machine has, what they can deliver, one still each.

For every V4L2 capture device (`/dev/video*`) it asks the driver directly (VIDIOC_QUERYCAP,
VIDIOC_ENUM_FMT, VIDIOC_ENUM_FRAMESIZES, VIDIOC_ENUM_FRAMEINTERVALS) for its name, pixel formats,
resolutions and frame rates, then grabs one still through the same OpenCV path the camera node
uses, so you can see which is the wrist and which the front camera before writing
`cameras:=front:/dev/video0,wrist:/dev/video2`. `--synthetic` lists the simulator's camera
instead (what `sim` sessions use), with a still of its scene.
"""
from __future__ import annotations

import argparse
import glob
from dataclasses import replace
from pathlib import Path

import cv2

from teleop_flywheel.core.errors import UsageError
from teleop_flywheel.hw.camera.offers import CameraInfo, Offer, describe
from teleop_flywheel.hw.camera.source import CameraConfig, CameraError, open_source

PREFERRED = Offer("MJPG", 640, 480, [30.0])  # the camera node's default mode, when the camera offers it


def preferred_mode(info: CameraInfo) -> Offer | None:
    """The mode a still is taken in: the camera node's default if offered, else the first MJPG mode,
    else the first mode (None: the driver lists none)."""
    for offer in info.modes:
        if (offer.fourcc, offer.width, offer.height) == (PREFERRED.fourcc, PREFERRED.width, PREFERRED.height) \
                and 30.0 in offer.fps:
            return PREFERRED
    return next((o for o in info.modes if o.fourcc == "MJPG" and o.fps), next((o for o in info.modes if o.fps), None))


def still(config: CameraConfig, out: Path) -> Path:
    """One frame from `config` written as a PNG."""
    source = open_source(config)
    try:
        frame = source.read(timeout_s=5.0)
    finally:
        source.close()
    if frame is None:
        raise CameraError(f"camera {config.device}: no frame within 5 s")
    cv2.imwrite(str(out), frame.image)  # frames are BGR, OpenCV's own order
    return out


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
