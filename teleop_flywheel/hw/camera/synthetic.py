"""A synthetic camera: draws the follower arm, writes its capture time into the pixels.

It behaves like a real camera pipeline where it matters for data quality: frames are captured
on a fixed schedule (the sensor's clock, not whenever a Python thread gets to run), stamped at
capture, and handed to the consumer only after a configurable pipeline latency (USB + decode),
so a consumer that stamped on receipt would be wrong by exactly that latency — and the pixel
timecode proves it. Faults reproduce the seeds' bugs: a stall (no frames for N s, the 4-second
wrist-camera dropout) and a stamp offset (the restarted-camera skew: header stamp = capture +
offset while the pixels keep the truth).
"""
from __future__ import annotations

import math
import queue
import threading
import time
from collections.abc import Callable, Mapping

import cv2
import numpy as np

from teleop_flywheel.core.clock import now_ns
from teleop_flywheel.hw.camera import timecode
from teleop_flywheel.hw.camera.source import CameraConfig, Frame

DRIVER_BUFFERS = 4  # exposed frames a V4L2 driver keeps queued for a reader that is late


def _background(width: int, height: int) -> np.ndarray:
    """A smooth gradient: realistic for video codecs, cheap to copy."""
    x = np.linspace(0.0, 1.0, width, dtype=np.float32)[None, :]
    y = np.linspace(0.0, 1.0, height, dtype=np.float32)[:, None]
    img = np.empty((height, width, 3), dtype=np.uint8)
    img[..., 0] = (90 + 80 * x + 0 * y).astype(np.uint8)
    img[..., 1] = (110 + 60 * y + 0 * x).astype(np.uint8)
    img[..., 2] = (140 + 40 * (1 - x) * y).astype(np.uint8)
    return img


def draw_arm(image: np.ndarray, joints: Mapping[str, float], top: int = 0) -> np.ndarray:
    """A planar side view of the SO-101: pan shifts the base, lift/elbow/wrist bend the links,
    roll turns the wrist marker, the gripper opens the fingers. Draws below row `top`."""
    h, w = image.shape[:2]
    view = image[top:]
    vh = h - top
    scale = min(w, vh)
    base = np.array([w / 2 + joints.get("shoulder_pan", 0.0) * w / 6, vh - 0.08 * scale])
    cv2.rectangle(view, (int(base[0] - 0.08 * scale), int(base[1])), (int(base[0] + 0.08 * scale), vh - 1),
                  (60, 60, 60), -1)
    points = [base]
    angle = -math.pi / 2  # straight up
    for joint, length in (("shoulder_lift", 0.32), ("elbow_flex", 0.26), ("wrist_flex", 0.12)):
        angle += joints.get(joint, 0.0)
        points.append(points[-1] + length * scale * np.array([math.cos(angle), math.sin(angle)]))
    pts = [(int(p[0]), int(p[1])) for p in points]
    for a, b, color in zip(pts, pts[1:], ((40, 120, 230), (40, 200, 240), (200, 160, 40))):
        cv2.line(view, a, b, color, max(2, scale // 40), cv2.LINE_AA)
    for p in pts:
        cv2.circle(view, p, max(3, scale // 60), (30, 30, 30), -1, cv2.LINE_AA)
    tip = points[-1]
    roll = joints.get("wrist_roll", 0.0)
    cv2.ellipse(view, pts[-1], (max(4, scale // 30), max(2, int(abs(math.cos(roll)) * scale / 30))),
                math.degrees(angle), 0, 360, (240, 240, 240), 1, cv2.LINE_AA)
    opening = 0.02 * scale + 0.06 * scale * max(0.0, min(1.0, joints.get("gripper", 0.0) / 1.7))
    normal = np.array([-math.sin(angle), math.cos(angle)])
    along = np.array([math.cos(angle), math.sin(angle)])
    for side in (-1, 1):
        root = tip + side * opening / 2 * normal
        end = root + 0.07 * scale * along
        cv2.line(view, (int(root[0]), int(root[1])), (int(end[0]), int(end[1])), (30, 30, 200),
                 max(2, scale // 60), cv2.LINE_AA)
    return image


class SyntheticSource:
    """Captures on a schedule in its own thread; `read()` delivers after the pipeline latency."""

    def __init__(self, config: CameraConfig, arm_state: Callable[[], Mapping[str, float]] | None = None,
                 block: int = timecode.DEFAULT_BLOCK, timecode_clock: Callable[[int], int] | None = None) -> None:
        self.config = config
        self._arm_state = arm_state or (lambda: {})
        # The clock of the pixel timecode: the monotonic capture instant as is, or (camera node)
        # `clock.to_ros_ns`, so the pixels carry the true capture time on the header stamps' clock.
        self._timecode_clock = timecode_clock or (lambda ns: ns)
        self._block = block
        self._top = timecode.strip_height(config.width, config.height, block)
        self._background = _background(config.width, config.height)
        self._queue: queue.Queue[tuple[int, Frame]] = queue.Queue(maxsize=max(4, int(config.fps * 2)))
        self._stop = threading.Event()
        self._latency_ns = int(config.latency_ms * 1e6)
        self._offset_ns = int(config.stamp_offset_ms * 1e6)
        self.start_ns = now_ns()
        self.captured = 0
        self.overruns = 0  # frames dropped because nobody read them (a real driver does the same)
        self._thread = threading.Thread(target=self._run, name=f"camera-{config.name}", daemon=True)
        self._thread.start()

    def render(self, capture_ns: int) -> np.ndarray:
        """The scene at `capture_ns` (monotonic) with that time in its pixels (on the timecode clock)."""
        image = self._background.copy()
        draw_arm(image, self._arm_state(), top=self._top)
        return timecode.encode(image, self._timecode_clock(capture_ns), self._block)

    def _stalled(self, t: int) -> bool:
        c = self.config
        if c.stall_at_s < 0 or c.stall_s <= 0:
            return False
        start = self.start_ns + int(c.stall_at_s * 1e9)
        return start <= t < start + int(c.stall_s * 1e9)

    def _run(self) -> None:
        """Expose on the sensor's own clock: frame k is captured at start + k·period whenever this
        thread gets to draw it, as a hardware sensor exposes on schedule however late the host
        reads. A thread more than DRIVER_BUFFERS frames behind loses the oldest, as a driver does.
        Simulator limit: a frame drawn late shows the arm as it is when drawn (up to DRIVER_BUFFERS
        periods after its stamp); the stamp and the pixel timecode are the exposure time."""
        period = self.config.period_ns
        k = 1
        while not self._stop.is_set():
            due = self.start_ns + k * period
            wait = (due - now_ns()) / 1e9
            if wait > 0 and self._stop.wait(wait):
                break
            behind = (now_ns() - due) // period  # later exposures already due
            if behind >= DRIVER_BUFFERS:
                k += behind - DRIVER_BUFFERS + 1
                due = self.start_ns + k * period
            k += 1
            capture = due
            if self._stalled(capture):
                continue
            frame = Frame(self.render(capture), capture + self._offset_ns, self.captured)
            self.captured += 1
            try:
                self._queue.put_nowait((capture + self._latency_ns, frame))
            except queue.Full:
                self._queue.get_nowait()
                self.overruns += 1
                self._queue.put_nowait((capture + self._latency_ns, frame))

    def read(self, timeout_s: float = 1.0) -> Frame | None:
        try:
            deliver_at, frame = self._queue.get(timeout=timeout_s)
        except queue.Empty:
            return None
        wait = (deliver_at - now_ns()) / 1e9
        if wait > 0:
            time.sleep(wait)
        return frame

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=2.0)
