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
import fcntl
import glob
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path

import cv2

from teleop_flywheel.core.errors import UsageError
from teleop_flywheel.hw.camera.source import CameraConfig, CameraError, open_source


def _iowr(nr: int, size: int, read_only: bool = False) -> int:
    return ((2 if read_only else 3) << 30) | (size << 16) | (ord("V") << 8) | nr


QUERYCAP = _iowr(0, 104, read_only=True)
ENUM_FMT = _iowr(2, 64)
ENUM_FRAMESIZES = _iowr(74, 44)
ENUM_FRAMEINTERVALS = _iowr(75, 52)
CAPTURE = 1  # V4L2_BUF_TYPE_VIDEO_CAPTURE
CAP_VIDEO_CAPTURE = 0x1
DEVICE_CAPS = 0x80000000
DISCRETE = 1


@dataclass
class Mode:
    fourcc: str
    width: int
    height: int
    fps: list[float] = field(default_factory=list)


@dataclass
class CameraInfo:
    device: str
    name: str
    modes: list[Mode]


def _cstr(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode("utf-8", "replace")


def _ioctl(fd: int, request: int, buf: bytearray) -> bool:
    try:
        fcntl.ioctl(fd, request, buf)
        return True
    except OSError:
        return False


def describe(device: str) -> CameraInfo | None:
    """What the V4L2 driver of `device` offers, or None if it is not a capture device."""
    fd = os.open(device, os.O_RDWR | os.O_NONBLOCK)
    try:
        cap = bytearray(104)
        if not _ioctl(fd, QUERYCAP, cap):
            return None
        caps, device_caps = struct.unpack_from("<II", cap, 84)
        if not ((device_caps if caps & DEVICE_CAPS else caps) & CAP_VIDEO_CAPTURE):
            return None  # a metadata node (UVC cameras have two per camera)
        modes: list[Mode] = []
        for fi in range(64):
            fmt = bytearray(struct.pack("<III", fi, CAPTURE, 0) + bytes(52))
            if not _ioctl(fd, ENUM_FMT, fmt):
                break
            pixfmt = struct.unpack_from("<I", fmt, 44)[0]
            fourcc = pixfmt.to_bytes(4, "little").decode("ascii", "replace")
            for si in range(64):
                size = bytearray(struct.pack("<III", si, pixfmt, 0) + bytes(32))
                if not _ioctl(fd, ENUM_FRAMESIZES, size) or struct.unpack_from("<I", size, 8)[0] != DISCRETE:
                    break
                width, height = struct.unpack_from("<II", size, 12)
                mode = Mode(fourcc, width, height)
                for ii in range(32):
                    ival = bytearray(struct.pack("<IIIII", ii, pixfmt, width, height, 0) + bytes(32))
                    if not _ioctl(fd, ENUM_FRAMEINTERVALS, ival) or struct.unpack_from("<I", ival, 16)[0] != DISCRETE:
                        break
                    num, den = struct.unpack_from("<II", ival, 20)
                    if num:
                        mode.fps.append(round(den / num, 2))
                modes.append(mode)
        return CameraInfo(device, f"{_cstr(bytes(cap[16:48]))} ({_cstr(bytes(cap[0:16]))})", modes)
    finally:
        os.close(fd)


def still(config: CameraConfig, out: Path) -> Path:
    """One frame from `config` written as a PNG."""
    source = open_source(config)
    try:
        frame = source.read(timeout_s=5.0)
    finally:
        source.close()
    if frame is None:
        raise CameraError(f"camera {config.device}: no frame within 5 s")
    cv2.imwrite(str(out), cv2.cvtColor(frame.image, cv2.COLOR_RGB2BGR))
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
        for mode in info.modes:
            print(f"  {mode.fourcc} {mode.width}x{mode.height} @ {', '.join(f'{f:g}' for f in mode.fps) or '?'} fps")
        try:
            path = still(CameraConfig(name=Path(info.device).name, source="v4l2", device=info.device),
                         args.out / f"{Path(info.device).name}.png")
            print(f"  still: {path}")
        except CameraError as exc:
            print(f"  still: failed ({exc})")
    return 0
