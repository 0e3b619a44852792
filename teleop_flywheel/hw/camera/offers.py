"""What a V4L2 capture device offers, asked of its driver directly: VIDIOC_QUERYCAP (name, whether it
captures video at all: UVC cameras also have a metadata node), VIDIOC_ENUM_FMT, VIDIOC_ENUM_FRAMESIZES
and VIDIOC_ENUM_FRAMEINTERVALS (pixel formats, resolutions, frame rates). `find-cameras` lists it, and
the camera names it when the mode it asked for is not granted (`v4l2.offered`)."""
from __future__ import annotations

import fcntl
import os
import struct
from dataclasses import dataclass, field


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
class Offer:
    fourcc: str
    width: int
    height: int
    fps: list[float] = field(default_factory=list)


@dataclass
class CameraInfo:
    device: str
    name: str
    modes: list[Offer]


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
        modes: list[Offer] = []
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
                mode = Offer(fourcc, width, height)
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
