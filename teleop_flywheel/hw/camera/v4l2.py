"""A V4L2 camera through OpenCV, stamped with the driver's buffer time, in the mode asked for.

On the V4L2 backend OpenCV's `CAP_PROP_POS_MSEC` is the `v4l2_buffer.timestamp` the kernel
filled when the frame finished arriving (CLOCK_MONOTONIC for every UVC/V4L2 driver with
`V4L2_BUF_FLAG_TIMESTAMP_MONOTONIC`), so it is the capture time minus nothing but the sensor
readout — unlike the time `read()` returns, which adds USB, decode and scheduling delay.
A driver whose stamps are not on CLOCK_MONOTONIC is refused rather than silently recorded.

The mode (pixel format, size, frame rate) is read back from the driver once set, and every
frame's size is checked: OpenCV's `set()` says nothing about what the driver kept (VIDIOC_S_FMT
and VIDIOC_S_PARM move a request to the nearest mode the camera has), and a camera asked for
1280x720 at 30 fps that delivers 640x480 at 15 would record a dataset at the wrong rate. A mode
not granted is refused (`CameraModeError`): what was asked, what was granted, the modes the
camera offers.
"""
from __future__ import annotations

from dataclasses import dataclass

import cv2

from teleop_flywheel.core.clock import now_ns
from teleop_flywheel.hw.camera.offers import describe
from teleop_flywheel.hw.camera.source import CameraConfig, Frame
from teleop_flywheel.hw.errors import CameraClockError, CameraError, CameraModeError

MAX_STAMP_AGE_NS = 5_000_000_000  # a buffer stamp further than this from now is not CLOCK_MONOTONIC
FPS_TOLERANCE = 0.01  # relative: many cameras grant 30000/1001 (29.97) for 30
MODES_LISTED = 12  # a camera offers dozens: the error line names the first ones


def _device(device: str) -> int | str:
    return int(device) if device.isdigit() else device


def _fourcc(code: float) -> str:
    """A FOURCC property as text; "" when the driver reports none."""
    value = int(code)
    return value.to_bytes(4, "little").decode("ascii", "replace") if value > 0 else ""


@dataclass(frozen=True)
class Mode:
    """A camera mode as the driver reports it; "" / 0 where it reports nothing."""

    fourcc: str
    width: int
    height: int
    fps: float

    def __str__(self) -> str:
        return f"{self.fourcc or '?'} {self.width}x{self.height} @ {f'{self.fps:g}' if self.fps > 0 else '?'} fps"

    def grants(self, config: CameraConfig) -> bool:
        """Whether this is the mode `config` asks for. A pixel format or rate the driver does not
        report (a driver without VIDIOC_G_PARM) cannot be checked here; frames at another rate
        then show as drops."""
        return ((self.width, self.height) == (config.width, config.height)
                and self.fourcc in ("", config.fourcc)
                and (self.fps <= 0 or abs(self.fps - config.fps) <= FPS_TOLERANCE * config.fps))


def asked(config: CameraConfig) -> Mode:
    return Mode(config.fourcc, config.width, config.height, config.fps)


def offered(device: str) -> str:
    """The modes the driver of `device` lists (VIDIOC_ENUM_*), or where to look when it lists none."""
    try:
        info = describe(f"/dev/video{device}" if device.isdigit() else device)
    except OSError:
        info = None
    if info is None or not info.modes:
        return "teleop-flywheel find-cameras lists the modes it offers"
    modes = "; ".join(f"{m.fourcc} {m.width}x{m.height} @ {', '.join(f'{f:g}' for f in m.fps) or '?'} fps"
                      for m in info.modes[:MODES_LISTED])
    more = f" and {len(info.modes) - MODES_LISTED} more (teleop-flywheel find-cameras)" \
        if len(info.modes) > MODES_LISTED else ""
    return f"it offers {modes}{more}: set fourcc, width, height and fps to one of them"


class V4L2Source:
    def __init__(self, config: CameraConfig) -> None:
        self.config = config
        self._cap = cv2.VideoCapture(_device(config.device), cv2.CAP_V4L2)
        if not self._cap.isOpened():
            self._cap.release()
            raise CameraError(f"camera {config.name}: cannot open V4L2 device {config.device} "
                              "(missing, busy, or no permission — is the user in the 'video' group?)")
        self._cap.set(cv2.CAP_PROP_FOURCC, cv2.VideoWriter.fourcc(*config.fourcc))
        self._cap.set(cv2.CAP_PROP_FRAME_WIDTH, config.width)
        self._cap.set(cv2.CAP_PROP_FRAME_HEIGHT, config.height)
        self._cap.set(cv2.CAP_PROP_FPS, config.fps)
        self._cap.set(cv2.CAP_PROP_BUFFERSIZE, 2)
        self.mode = Mode(_fourcc(self._cap.get(cv2.CAP_PROP_FOURCC)), int(self._cap.get(cv2.CAP_PROP_FRAME_WIDTH)),
                         int(self._cap.get(cv2.CAP_PROP_FRAME_HEIGHT)), float(self._cap.get(cv2.CAP_PROP_FPS)))
        if not self.mode.grants(config):
            self._cap.release()  # before `offered` opens the device to list its modes
            raise CameraModeError(f"camera {config.name}: {config.device} granted {self.mode} when {asked(config)} "
                                  f"was asked; {offered(config.device)}")
        self.index = 0

    def read(self, timeout_s: float = 1.0) -> Frame | None:
        """Blocks in the driver (V4L2 has its own select timeout); `timeout_s` is advisory."""
        c = self.config
        if not self._cap.grab():
            raise CameraError(f"camera {c.name}: {c.device} stopped delivering frames")
        stamp_ns = int(round(self._cap.get(cv2.CAP_PROP_POS_MSEC) * 1e6))
        ok, image = self._cap.retrieve()
        if not ok or image is None:
            raise CameraError(f"camera {c.name}: {c.device} returned an undecodable frame")
        height, width = image.shape[:2]
        if (width, height) != (c.width, c.height):
            raise CameraModeError(f"camera {c.name}: {c.device} delivered a {width}x{height} frame when "
                                  f"{c.width}x{c.height} was asked (the driver reported {self.mode}); "
                                  f"{offered(c.device)}")
        if abs(now_ns() - stamp_ns) > MAX_STAMP_AGE_NS:
            raise CameraClockError(
                f"camera {c.name}: {c.device} buffer timestamp {stamp_ns} ns is not on "
                "CLOCK_MONOTONIC (driver without monotonic timestamps?); refusing to record wrong stamps")
        self.index += 1
        return Frame(image, stamp_ns, self.index - 1)

    def close(self) -> None:
        self._cap.release()
