"""`teleop-flywheel find-cameras`: the cameras this machine has, what they can deliver, one still each.

For every V4L2 capture device (`/dev/video*`) it asks the driver directly (VIDIOC_QUERYCAP,
VIDIOC_ENUM_FMT, VIDIOC_ENUM_FRAMESIZES, VIDIOC_ENUM_FRAMEINTERVALS) for its name, pixel formats,
resolutions and frame rates, then grabs one still through the same OpenCV path the camera node
uses, so you can see which is the wrist and which the front camera before writing
`cameras:=front:/dev/video0,wrist:/dev/video2`. `--synthetic` lists the simulator's camera
instead (what `sim` sessions use), with a still of its scene.
"""
from __future__ import annotations

from pathlib import Path

import cv2

from teleop_flywheel.hw.camera import CameraConfig, open_source
from teleop_flywheel.hw.camera.offers import CameraInfo, Offer
from teleop_flywheel.hw.errors import CameraError

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

