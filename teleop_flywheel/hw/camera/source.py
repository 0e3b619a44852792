"""Camera configuration, the frame type, the source interface and JPEG encoding."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import cv2
import numpy as np

from teleop_flywheel.hw.errors import CameraError

SOURCES = ("synthetic", "v4l2")
DROP_GAP_PERIODS = 1.5


@dataclass(frozen=True)
class CameraConfig:
    """One camera. Fault fields apply to the synthetic source only (a real camera has its own)."""

    name: str = "wrist"
    source: str = "synthetic"  # "synthetic" | "v4l2"
    device: str = "/dev/video0"  # v4l2: path or index
    width: int = 640
    height: int = 480
    fps: float = 30.0
    jpeg_quality: int = 90
    fourcc: str = "MJPG"  # v4l2 pixel format requested from the driver
    latency_ms: float = 0.0  # synthetic: capture → delivery pipeline latency
    stall_at_s: float = -1.0  # synthetic: start of a stall, seconds after start (<0: none)
    stall_s: float = 0.0  # synthetic: stall length (no frames captured)
    stamp_offset_ms: float = 0.0  # synthetic: stamp = capture + offset (the restarted-camera bug)
    presence_file: str = ""  # synthetic: plugged in while this file exists ("" = always)

    def __post_init__(self) -> None:
        if self.source not in SOURCES:
            raise ValueError(f"camera {self.name}: source must be one of {SOURCES}, got {self.source!r}")
        if self.width <= 0 or self.height <= 0:
            raise ValueError(f"camera {self.name}: width/height must be positive, got {self.width}x{self.height}")
        if not 0 < self.fps <= 1000:
            raise ValueError(f"camera {self.name}: fps must be in (0, 1000], got {self.fps}")
        if not 1 <= self.jpeg_quality <= 100:
            raise ValueError(f"camera {self.name}: jpeg_quality must be 1..100, got {self.jpeg_quality}")
        if self.latency_ms < 0 or self.stall_s < 0:
            raise ValueError(f"camera {self.name}: latency_ms and stall_s must be >= 0")
        if len(self.fourcc) != 4:
            raise ValueError(f"camera {self.name}: fourcc must be 4 characters, got {self.fourcc!r}")

    @property
    def period_ns(self) -> int:
        return int(round(1e9 / self.fps))


@dataclass
class Frame:
    """One captured image (BGR uint8) and when it was captured."""

    image: np.ndarray
    stamp_ns: int  # what the source reports (CLOCK_MONOTONIC); header.stamp = clock.to_ros_ns(stamp_ns)
    index: int  # frames captured by this source so far (gaps = frames never captured)
    meta: dict[str, Any] | None = None  # what a synthetic frame drew (core.frame_meta; the node puts it in the JPEG)


class FrameSource(Protocol):
    config: CameraConfig

    def read(self, timeout_s: float = 1.0) -> Frame | None:
        """The next frame, blocking until it is delivered; None on timeout."""

    def close(self) -> None:
        """Release the device/thread (idempotent)."""


def encode_jpeg(image: np.ndarray, quality: int) -> bytes:
    ok, buf = cv2.imencode(".jpg", image, [int(cv2.IMWRITE_JPEG_QUALITY), int(quality)])
    if not ok:
        raise CameraError(f"JPEG encoding failed for a {image.shape} image")
    return buf.tobytes()


class DropCounter:
    """Frames missing between consecutive stamps (gap > 1.5 periods → round(gap/period) − 1)."""

    def __init__(self, period_ns: int) -> None:
        self.period_ns = period_ns
        self.last_ns: int | None = None
        self.dropped = 0
        self.frames = 0
        self.max_gap_ns = 0

    def add(self, stamp_ns: int) -> int:
        """Count one frame; returns how many were dropped right before it."""
        self.frames += 1
        lost = 0
        if self.last_ns is not None:
            gap = stamp_ns - self.last_ns
            self.max_gap_ns = max(self.max_gap_ns, gap)
            if gap > DROP_GAP_PERIODS * self.period_ns:
                lost = max(1, round(gap / self.period_ns) - 1)
                self.dropped += lost
        self.last_ns = stamp_ns
        return lost
