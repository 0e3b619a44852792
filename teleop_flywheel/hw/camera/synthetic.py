"""A synthetic camera: draws the follower arm, writes its capture time into the pixels.

It behaves like a real camera pipeline where it matters for data quality: frames are captured
on a fixed schedule (the sensor's clock, not whenever a Python thread gets to run), stamped at
capture, and handed to the consumer only after a configurable pipeline latency (USB + decode),
so a consumer that stamped on receipt would be wrong by exactly that latency — and the pixel
timecode proves it. Faults reproduce the seeds' bugs: a stall (no frames for N s, the 4-second
wrist-camera dropout) and a stamp offset (the restarted-camera skew: header stamp = capture +
offset while the pixels keep the truth). With a `presence_file`, the camera is plugged in while
that file exists: it cannot be opened without it and stops delivering once it is removed — an
unplug and a replug anyone can do with `rm` and `touch`.

The arm it draws is the follower's pose **at the frame's exposure instant**: the follower's joint
samples (a `JointHistory` the camera node feeds from `/follower/joint_states`) interpolated to the
capture time. A frame due before the sample after its exposure has arrived waits for it (at most
as long as the follower's samples are taking to arrive — `JointHistory.wait_bound_s`, a few ms on a
healthy rig, at most `POSE_WAIT_MAX_S` — only while the follower stream is alive; else it holds
the newest pose and says so), and a frame drawn late — a loaded machine — still shows the pose at its exposure, not the
pose when it got drawn. So a clean episode's true camera lag is ~0 however busy the host, and a
lag the data engine finds in the pixels is the stamp's. Each frame says what it drew
(`Frame.meta`, written into the JPEG by the camera node: `core.frame_meta`): the exposure and pose
instants and the follower samples the pose came from.
"""
from __future__ import annotations

import math
import os
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import pairwise
from typing import Any

import cv2
import numpy as np

from teleop_flywheel.core.clock import now_ns
from teleop_flywheel.hw.camera import timecode
from teleop_flywheel.hw.camera.source import CameraConfig, Frame
from teleop_flywheel.hw.errors import CameraError

DRIVER_BUFFERS = 4  # exposed frames a V4L2 driver keeps queued for a reader that is late
POSE_WAIT_MIN_S, POSE_WAIT_MAX_S = 0.005, 0.1  # bounds of a frame's wait for the sample after its exposure
HISTORY_S = 2.0  # joint samples kept: a frame drawn up to this late still shows its exposure's pose
ALIVE_S = 0.5  # a follower stream silent this long is not waited for


@dataclass(frozen=True)
class Sample:
    mono_ns: int  # the sample's instant on CLOCK_MONOTONIC (its header stamp converted back)
    stamp_ns: int  # its header stamp as published (ROS time): which sample, as a bag records it
    joints: dict[str, float]


class JointHistory:
    """The follower's recent joint samples, for drawing the pose at an exposure instant. Thread-safe."""

    def __init__(self, span_s: float = HISTORY_S, now: Callable[[], int] = now_ns) -> None:
        self._span_ns = int(span_s * 1e9)
        self._samples: deque[Sample] = deque()
        self._delays: deque[int] = deque(maxlen=200)  # how late each sample reached us (now − its stamp)
        self._now = now
        self._changed = threading.Condition()

    def add(self, mono_ns: int, stamp_ns: int, names: Sequence[str], positions: Sequence[float]) -> None:
        sample = Sample(int(mono_ns), int(stamp_ns), {n: float(p) for n, p in zip(names, positions, strict=False)})
        delay = self._now() - sample.mono_ns
        with self._changed:
            self._delays.append(delay)
            if self._samples and sample.mono_ns < self._samples[-1].mono_ns:
                self._samples.clear()  # a restarted publisher (or a clock step): start over
            self._samples.append(sample)
            while self._samples and self._samples[0].mono_ns < sample.mono_ns - self._span_ns:
                self._samples.popleft()
            self._changed.notify_all()

    def wait_bound_s(self) -> float:
        """How long a frame waits for the sample after its exposure: as long as the follower's samples
        are taking to arrive (their 90th-percentile delivery delay) plus two sample periods, within
        [POSE_WAIT_MIN_S, POSE_WAIT_MAX_S]. A healthy rig waits a few ms; a loaded one as long as its
        joint streams are late (which the validator's joint latency check sees too), so the pose
        drawn is still the one at the exposure."""
        with self._changed:
            delays = sorted(self._delays)
            stamps = [x.mono_ns for x in list(self._samples)[-20:]]
        if not delays or len(stamps) < 2:
            return POSE_WAIT_MIN_S
        period = (stamps[-1] - stamps[0]) / (len(stamps) - 1)
        wait = (delays[int(0.9 * (len(delays) - 1))] + 2 * period) / 1e9
        return min(max(wait, POSE_WAIT_MIN_S), POSE_WAIT_MAX_S)

    def wait_past(self, t_ns: int, timeout_s: float, now: Callable[[], int] = now_ns) -> bool:
        """Until a sample at or after `t_ns` is here (True), the timeout, or at once (False) when the
        stream has been silent for ALIVE_S (nothing is coming) while this frame is drawn on time. A
        frame drawn ALIVE_S or more after its exposure says this process was the one stalled (a
        loaded machine): the silence is samples not yet handed over, so it waits for them."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while not self._samples or self._samples[-1].mono_ns < t_ns:
                left = deadline - time.monotonic()
                t = now()
                silent = t - self._samples[-1].mono_ns > ALIVE_S * 1e9 if self._samples else True
                if left <= 0 or not self._samples or (silent and t - t_ns < ALIVE_S * 1e9):
                    return False
                self._changed.wait(left)
            return True

    def at(self, t_ns: int) -> tuple[dict[str, float], Sample | None, Sample | None, int | None]:
        """(joints, sample at or before, sample after, pose instant) for `t_ns`: interpolated between
        the two samples around it (pose instant = t_ns); only one side: that sample's pose, held."""
        with self._changed:
            after = next((i for i in range(len(self._samples) - 1, -1, -1) if self._samples[i].mono_ns < t_ns), -1) + 1
            a = self._samples[after - 1] if after > 0 else None
            b = self._samples[after] if after < len(self._samples) else None
        if a is not None and b is not None:
            f = 0.0 if b.mono_ns == a.mono_ns else (t_ns - a.mono_ns) / (b.mono_ns - a.mono_ns)
            return {n: v + f * (b.joints[n] - v) for n, v in a.joints.items() if n in b.joints}, a, b, t_ns
        only = a or b
        return (dict(only.joints), a, b, only.mono_ns) if only is not None else ({}, None, None, None)


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
    for (a, b), color in zip(pairwise(pts), ((40, 120, 230), (40, 200, 240), (200, 160, 40)), strict=True):
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
                 block: int = timecode.DEFAULT_BLOCK, timecode_clock: Callable[[int], int] | None = None,
                 history: JointHistory | None = None) -> None:
        self.config = config
        if not self.plugged():
            raise CameraError(f"camera {config.name}: {config.presence_file} is not there (the synthetic camera "
                              "is unplugged)")
        self._arm_state = arm_state or (lambda: {})  # without a history: the pose as it is when drawn
        self.history = history
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
        return self.render_frame(capture_ns)[0]

    def render_frame(self, capture_ns: int) -> tuple[np.ndarray, dict[str, Any] | None]:
        """(image, what it drew): the arm at `capture_ns` from the history (interpolated), else as
        `arm_state` says now (no metadata)."""
        image = self._background.copy()
        meta: dict[str, Any] | None = None
        capture = self._timecode_clock(capture_ns)  # once: the pixels and the metadata say the same instant
        if self.history is not None:
            joints, a, b, pose_ns = self.history.at(capture_ns)
            meta = {"capture_ns": capture, "pose_ns": None if pose_ns is None else capture + pose_ns - capture_ns,
                    "samples": [a.stamp_ns if a else None, b.stamp_ns if b else None],
                    "held_ms": None if pose_ns is None else round((capture_ns - pose_ns) / 1e6, 3)}
        else:
            joints = dict(self._arm_state())
        draw_arm(image, joints, top=self._top)
        return timecode.encode(image, capture, self._block), meta

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
        With a joint history the arm is drawn at the exposure instant (waiting for the sample after
        it: `JointHistory.wait_bound_s`); the stamp and the pixel timecode are the exposure time."""
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
            if self.history is not None:
                self.history.wait_past(capture, self.history.wait_bound_s())
            image, meta = self.render_frame(capture)
            frame = Frame(image, capture + self._offset_ns, self.captured, meta)
            self.captured += 1
            try:
                self._queue.put_nowait((capture + self._latency_ns, frame))
            except queue.Full:
                self._queue.get_nowait()
                self.overruns += 1
                self._queue.put_nowait((capture + self._latency_ns, frame))

    def set_latency_ms(self, latency_ms: float) -> None:
        """The pipeline latency of the frames captured from now on."""
        if latency_ms < 0:
            raise ValueError(f"camera {self.config.name}: latency_ms must be >= 0, got {latency_ms}")
        self.config = replace(self.config, latency_ms=latency_ms)
        self._latency_ns = int(latency_ms * 1e6)

    def plugged(self) -> bool:
        return not self.config.presence_file or os.path.exists(self.config.presence_file)

    def read(self, timeout_s: float = 1.0) -> Frame | None:
        if not self.plugged():
            raise CameraError(f"camera {self.config.name}: {self.config.presence_file} went away (unplugged)")
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
