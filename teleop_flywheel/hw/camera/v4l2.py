"""A V4L2 camera through OpenCV, stamped with the driver's buffer time.

On the V4L2 backend OpenCV's `CAP_PROP_POS_MSEC` is the `v4l2_buffer.timestamp` the kernel
filled when the frame finished arriving (CLOCK_MONOTONIC for every UVC/V4L2 driver with
`V4L2_BUF_FLAG_TIMESTAMP_MONOTONIC`), so it is the capture time minus nothing but the sensor
readout — unlike the time `read()` returns, which adds USB, decode and scheduling delay.
A driver whose stamps are not on CLOCK_MONOTONIC is refused rather than silently recorded.
"""
from __future__ import annotations

import cv2

from teleop_flywheel.core.clock import now_ns
from teleop_flywheel.hw.camera.source import CameraClockError, CameraConfig, CameraError, Frame

MAX_STAMP_AGE_NS = 5_000_000_000  # a buffer stamp further than this from now is not CLOCK_MONOTONIC


def _device(device: str) -> int | str:
    return int(device) if device.isdigit() else device


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
        self.index = 0

    def read(self, timeout_s: float = 1.0) -> Frame | None:
        """Blocks in the driver (V4L2 has its own select timeout); `timeout_s` is advisory."""
        if not self._cap.grab():
            raise CameraError(f"camera {self.config.name}: {self.config.device} stopped delivering frames")
        stamp_ns = int(round(self._cap.get(cv2.CAP_PROP_POS_MSEC) * 1e6))
        ok, image = self._cap.retrieve()
        if not ok or image is None:
            raise CameraError(f"camera {self.config.name}: {self.config.device} returned an undecodable frame")
        if abs(now_ns() - stamp_ns) > MAX_STAMP_AGE_NS:
            raise CameraClockError(
                f"camera {self.config.name}: {self.config.device} buffer timestamp {stamp_ns} ns is not on "
                "CLOCK_MONOTONIC (driver without monotonic timestamps?); refusing to record wrong stamps")
        self.index += 1
        return Frame(image, stamp_ns, self.index - 1)

    def close(self) -> None:
        self._cap.release()
