"""Camera sources without ROS: pixel timecode through JPEG/AV1/h264, synthetic timing and faults,
reopening a camera that went away."""
from __future__ import annotations

import threading
import time
from pathlib import Path

import av
import cv2
import numpy as np
import pytest
from support.procs import wait_for

from teleop_flywheel.core.backoff import Backoff
from teleop_flywheel.core.clock import now_ns
from teleop_flywheel.data.lerobot.v3_layout import VideoEncoder
from teleop_flywheel.hw.camera import CameraConfig, encode_jpeg, open_source, timecode
from teleop_flywheel.hw.camera.capture import Capture
from teleop_flywheel.hw.camera.source import DropCounter
from teleop_flywheel.hw.camera.synthetic import SyntheticSource
from teleop_flywheel.hw.errors import CameraClockError, CameraError, CameraModeError, TimecodeError


def _jpeg_round_trip(image: np.ndarray, quality: int) -> np.ndarray:
    return cv2.imdecode(np.frombuffer(encode_jpeg(image, quality), np.uint8), cv2.IMREAD_COLOR)


def _source(**kw: object) -> SyntheticSource:
    return SyntheticSource(CameraConfig(width=320, height=240, **kw))  # type: ignore[arg-type]


@pytest.mark.parametrize("quality", [30, 75, 95])
def test_timecode_survives_jpeg(quality: int) -> None:
    src = _source()
    src.close()
    for value in (0, 1, 123_456_789_012, 2**63 - 1):
        assert timecode.decode(_jpeg_round_trip(src.render(value), quality)) == value


@pytest.mark.parametrize("codec", ["libsvtav1", "h264"])
def test_timecode_survives_lossy_video(codec: str, tmp_path: Path) -> None:
    """Through the dataset's own encoder (g=2, crf=30), as a converted episode's video has it."""
    src = SyntheticSource(CameraConfig(width=640, height=480))
    src.close()
    values = [9_876_543_210 + i * 33_333_333 for i in range(8)]
    encoder = VideoEncoder(tmp_path / "v.mp4", 640, 480, 30, codec)
    for i, value in enumerate(values):
        src._arm_state = lambda i=i: {"shoulder_lift": 0.1 * i, "elbow_flex": -0.05 * i}
        encoder.add_i420(cv2.cvtColor(src.render(value), cv2.COLOR_BGR2YUV_I420))
    encoder.close()
    with av.open(str(tmp_path / "v.mp4")) as inp:
        decoded = [timecode.decode(f.to_ndarray(format="bgr24")) for f in inp.decode(video=0)]
    assert decoded == values


def test_damaged_or_missing_timecode_is_refused() -> None:
    src = _source()
    src.close()
    image = src.render(42)
    block = timecode.DEFAULT_BLOCK
    image[:block, 10 * block:11 * block] = 255 - image[:block, 10 * block:11 * block]  # flip one value bit
    with pytest.raises(TimecodeError, match="CRC"):
        timecode.decode(image)
    with pytest.raises(TimecodeError, match="sync"):
        timecode.decode(np.full((240, 320, 3), 128, np.uint8))
    with pytest.raises(ValueError, match="too small"):
        timecode.encode(np.zeros((16, 64, 3), np.uint8), 1)


def test_scene_shows_the_arm_pose() -> None:
    src = _source()
    src.close()
    src._arm_state = lambda: {"shoulder_lift": 0.0}
    a = src.render(1)
    src._arm_state = lambda: {"shoulder_lift": 1.0, "gripper": 1.5}
    b = src.render(1)
    top = timecode.strip_height(320, 240)
    assert np.abs(a[top:].astype(int) - b[top:].astype(int)).sum() > 10_000
    assert np.array_equal(a[:top], b[:top])  # same capture time: same code


def test_synthetic_latency_stamps_capture_not_delivery() -> None:
    src = _source(fps=30.0, latency_ms=60.0)
    try:
        for _ in range(5):
            frame = src.read(timeout_s=5)
            delivered = now_ns()
            assert frame is not None
            assert timecode.decode(_jpeg_round_trip(frame.image, 90)) == frame.stamp_ns
            assert delivered - frame.stamp_ns >= 59_000_000  # the stamp says captured, not delivered
    finally:
        src.close()


def test_synthetic_stall_and_offset_faults() -> None:
    src = _source(fps=30.0, stall_at_s=0.3, stall_s=0.6, stamp_offset_ms=25.0)
    counter = DropCounter(src.config.period_ns)
    stamps = []
    try:
        while len(stamps) < 40:
            frame = src.read(timeout_s=5)
            assert frame is not None
            assert frame.stamp_ns - timecode.decode(frame.image) == 25_000_000
            stamps.append(frame.stamp_ns)
            counter.add(frame.stamp_ns)
    finally:
        src.close()
    assert max(np.diff(stamps)) >= 0.55e9
    assert counter.dropped >= 14  # ≈ 0.6 s × 30 fps never captured
    assert counter.max_gap_ns >= 0.55e9


def test_drop_counter() -> None:
    c = DropCounter(33_333_333)
    assert [c.add(t) for t in (0, 33_333_333, 66_666_666, 100_000_000 + 33_333_333 * 3)] == [0, 0, 0, 3]
    assert c.dropped == 3 and c.frames == 4


def test_config_and_v4l2_errors_name_the_problem() -> None:
    with pytest.raises(ValueError, match="source"):
        CameraConfig(source="usb")
    with pytest.raises(ValueError, match="jpeg_quality"):
        CameraConfig(jpeg_quality=0)
    with pytest.raises(CameraError, match="/dev/video97"):
        open_source(CameraConfig(source="v4l2", device="/dev/video97"))


class StandInCapture:
    """cv2.VideoCapture of a camera that opens, takes every `set()` (as OpenCV's V4L2 backend
    returns True whatever the driver kept) and stays in its own mode: `mode` is what `get()`
    reports, `frame_size` the (width, height) of the frames it delivers."""

    mode: tuple[str, int, int, float] = ("YUYV", 640, 480, 15.0)  # FOURCC, width, height, fps
    frame_size = (640, 480)
    opened: list[StandInCapture] = []

    def __init__(self, device: int | str, api: int) -> None:
        self.device, self.released = device, False
        StandInCapture.opened.append(self)

    def isOpened(self) -> bool:
        return True

    def set(self, prop: int, value: float) -> bool:
        return True

    def get(self, prop: int) -> float:
        fourcc, width, height, fps = self.mode
        return {cv2.CAP_PROP_FOURCC: float(cv2.VideoWriter.fourcc(*fourcc)), cv2.CAP_PROP_FRAME_WIDTH: width,
                cv2.CAP_PROP_FRAME_HEIGHT: height, cv2.CAP_PROP_FPS: fps,
                cv2.CAP_PROP_POS_MSEC: now_ns() / 1e6}.get(prop, 0.0)

    def grab(self) -> bool:
        return True

    def retrieve(self) -> tuple[bool, np.ndarray]:
        width, height = self.frame_size
        return True, np.zeros((height, width, 3), np.uint8)

    def release(self) -> None:
        self.released = True


@pytest.fixture()
def stand_in(monkeypatch: pytest.MonkeyPatch) -> type[StandInCapture]:
    """No /dev/video* here: the V4L2 source opens the stand-in instead of OpenCV's capture."""
    monkeypatch.setattr(cv2, "VideoCapture", StandInCapture)
    for name in ("mode", "frame_size"):  # a test's own camera is undone after it
        monkeypatch.setattr(StandInCapture, name, getattr(StandInCapture, name))
    monkeypatch.setattr(StandInCapture, "opened", [])
    return StandInCapture


def test_a_v4l2_mode_the_camera_does_not_grant_is_refused_naming_asked_and_granted(
        stand_in: type[StandInCapture]) -> None:
    """Asked for MJPG 1280x720 @ 30, the camera keeps YUYV 640x480 @ 15: one line, device released."""
    config = CameraConfig(name="front", source="v4l2", device="/dev/video42", width=1280, height=720, fps=30.0)
    with pytest.raises(CameraModeError) as refused:
        open_source(config)
    message = str(refused.value)
    assert message == ("camera front: /dev/video42 granted YUYV 640x480 @ 15 fps when MJPG 1280x720 @ 30 fps was "
                       "asked; teleop-flywheel find-cameras lists the modes it offers"), message
    assert [cap.released for cap in stand_in.opened] == [True]
    for granted in (("MJPG", 1280, 720, 15.0), ("YUYV", 1280, 720, 30.0), ("MJPG", 1280, 960, 30.0)):
        stand_in.mode = granted
        with pytest.raises(CameraModeError, match=f"granted {granted[0]} {granted[1]}x{granted[2]}"):
            open_source(config)


def test_a_granted_v4l2_mode_delivers_stamped_frames_and_a_frame_of_another_size_stops_it(
        stand_in: type[StandInCapture]) -> None:
    config = CameraConfig(name="wrist", source="v4l2", device="3", width=1280, height=720, fps=30.0)
    stand_in.mode = ("MJPG", 1280, 720, 30000 / 1001)  # NTSC 29.97 is "30"
    stand_in.frame_size = (1280, 720)
    source = open_source(config)
    try:
        before = now_ns()
        frame = source.read()
        assert frame is not None and frame.image.shape == (720, 1280, 3)
        assert before - 1_000_000 <= frame.stamp_ns <= now_ns() + 1_000_000  # the driver's buffer time
        assert stand_in.opened[0].device == 3  # an index opens /dev/video3
        stand_in.frame_size = (640, 480)  # the driver reported the mode and delivers another
        with pytest.raises(CameraModeError, match="camera wrist: 3 delivered a 640x480 frame when 1280x720 was asked"):
            source.read()
    finally:
        source.close()


def test_the_pose_drawn_is_the_followers_at_the_exposure_instant_however_late_the_frame_is_drawn() -> None:
    from teleop_flywheel.core import frame_meta
    from teleop_flywheel.hw.camera.synthetic import JointHistory, draw_arm

    history = JointHistory()
    t0 = now_ns()
    for k in range(400):  # 2 s of follower samples at 200 Hz: a ramp of shoulder_lift, stamps 7 ms after
        history.add(t0 + k * 5_000_000, 10**18 + k, ["shoulder_lift", "elbow_flex"], [0.002 * k, -0.5])
    src = SyntheticSource(CameraConfig(width=320, height=240), history=history, timecode_clock=lambda ns: ns + 7)
    src.close()
    capture = t0 + 1_234_000_000  # between samples 246 and 247, 4 ms after 246
    image, meta = src.render_frame(capture)  # drawn "late": long after the samples arrived
    assert meta == {"capture_ns": capture + 7, "pose_ns": capture + 7, "samples": [10**18 + 246, 10**18 + 247],
                    "held_ms": 0.0}
    expected = src._background.copy()
    draw_arm(expected, {"shoulder_lift": 0.002 * (246 + 0.8), "elbow_flex": -0.5}, top=timecode.strip_height(320, 240))
    top = timecode.strip_height(320, 240)
    assert np.array_equal(image[top:], expected[top:])  # the interpolated pose, not the newest sample
    assert timecode.decode(image) == capture + 7
    # after the last sample: the newest pose, held, and said so
    _img, held = src.render_frame(t0 + 2_100_000_000)
    assert held is not None and held["samples"] == [10**18 + 399, None] and held["held_ms"] == 105.0
    # the metadata rides in the JPEG, which decoders read as before
    jpeg = frame_meta.add(encode_jpeg(image, 90), meta)
    assert frame_meta.read(jpeg) == meta and frame_meta.read(encode_jpeg(image, 90)) is None
    assert timecode.decode(cv2.imdecode(np.frombuffer(jpeg, np.uint8), cv2.IMREAD_COLOR)) == capture + 7


def test_a_frame_waits_for_the_sample_after_its_exposure_only_while_the_follower_is_alive() -> None:
    from teleop_flywheel.hw.camera.synthetic import POSE_WAIT_MAX_S, POSE_WAIT_MIN_S, JointHistory

    history = JointHistory()
    t = now_ns()
    assert history.wait_bound_s() == POSE_WAIT_MIN_S
    history.add(t, 1, ["gripper"], [0.0])
    start = now_ns()
    assert not history.wait_past(t + 10**9, timeout_s=0.02)  # nothing after it came: bounded wait
    assert 0.018 <= (now_ns() - start) / 1e9 < 0.5
    # The wait follows how late the follower's samples arrive: 5 ms samples reaching us 8 ms late
    # -> 8 + 2 x 5 = 18 ms; 300 ms late -> capped.
    clock = [0]
    late = JointHistory(now=lambda: clock[0])
    for k in range(50):
        clock[0] = k * 5_000_000 + 8_000_000
        late.add(k * 5_000_000, k, ["gripper"], [0.0])
    assert late.wait_bound_s() == pytest.approx(0.018)
    for k in range(50, 300):
        clock[0] = k * 5_000_000 + 300_000_000
        late.add(k * 5_000_000, k, ["gripper"], [0.0])
    assert late.wait_bound_s() == POSE_WAIT_MAX_S
    history.add(t - 10**9, 2, ["gripper"], [0.1])  # a restarted publisher: older stamps start over
    assert history.at(t)[1] is not None and history.at(t)[1].stamp_ns == 2  # type: ignore[union-attr]
    silent = JointHistory()
    silent.add(now_ns() - 2 * 10**9, 3, ["gripper"], [0.0])  # silent for 2 s: no waiting at all
    start = now_ns()
    assert not silent.wait_past(now_ns(), timeout_s=1.0) and now_ns() - start < 20_000_000
    # ... unless this frame is drawn long after its exposure: then this process was the one stalled
    # (CI, loaded: held poses 0.8 s old), and the samples it has not been handed yet are waited for.
    exposure = now_ns() - 10**9
    threading.Timer(0.05, lambda: silent.add(exposure + 10**6, 4, ["gripper"], [0.2])).start()
    start = now_ns()
    assert silent.wait_past(exposure, timeout_s=1.0) and 0.04 <= (now_ns() - start) / 1e9 < 0.9
    assert silent.at(exposure + 5 * 10**5)[2] is not None  # drawn between two samples: interpolated


def test_capture_reopens_an_unplugged_camera_with_backoff_and_says_so_once(tmp_path: Path) -> None:
    """Not there at start, then plugged, unplugged and replugged (the synthetic camera's presence
    file): one log line per change, `error` while it lasts, frames again after each replug."""
    plug = tmp_path / "video0"
    config = CameraConfig(name="front", width=320, height=240, fps=60.0, presence_file=str(plug))
    log: list[tuple[str, str]] = []
    frames: list[int] = []
    capture = Capture("camera front", lambda: SyntheticSource(config), lambda lv, text: log.append((lv, text)),
                      Backoff(0.01, 0.05))
    stop = threading.Event()
    thread = threading.Thread(target=capture.run, args=(stop, lambda f: frames.append(f.stamp_ns)))
    thread.start()
    try:
        wait_for(lambda: capture.error, what="the missing camera reported")
        assert "is not there" in capture.error and not frames
        for n in (1, 2):
            plug.touch()
            wait_for(lambda n=n: len(frames) >= 5 * n and not capture.error, what="frames after the plug")
            plug.unlink()
            wait_for(
                lambda n=n: sum("is not there" in text for _lv, text in log) == n + 1,
                what="the unplug reported, reopen fails",
            )
            seen = len(frames)
            time.sleep(0.1)  # several retries at 10-50 ms: none delivers a frame while unplugged
            assert len(frames) == seen and "is not there" in capture.error
    finally:
        stop.set()
        thread.join(5)
    assert capture.reconnects == 1 and not capture.fatal
    errors = [text for lv, text in log if lv == "error"]
    # one line per new reason, not one per retry (dozens of retries at 10-50 ms)
    assert errors == [f"camera front: {plug} is not there (the synthetic camera is unplugged); retrying with backoff",
                      f"camera front: {plug} went away (unplugged); reopening with backoff",
                      f"camera front: {plug} is not there (the synthetic camera is unplugged); retrying with backoff",
                      f"camera front: {plug} went away (unplugged); reopening with backoff",
                      f"camera front: {plug} is not there (the synthetic camera is unplugged); retrying with backoff"]
    assert [text for lv, text in log if lv == "info"] == ["camera front: opened, frames",
                                                         "camera front: reconnected, frames again"]


@pytest.mark.parametrize("error", [
    CameraClockError("camera wrist: /dev/video0 buffer timestamp 5 ns is not on CLOCK_MONOTONIC"),
    CameraModeError("camera wrist: /dev/video0 delivered a 640x480 frame when 1280x720 was asked"),
])
def test_capture_stops_for_good_on_a_camera_that_cannot_be_recorded_as_configured(error: CameraError) -> None:
    """Stamps on the wrong clock, or a mode the camera did not grant: reopening cannot help."""
    class Unrecordable:
        config = CameraConfig()

        def read(self, timeout_s: float = 1.0) -> None:
            raise error

        def close(self) -> None:
            pass

    opened: list[int] = []
    capture = Capture("camera wrist", lambda: opened.append(1) or Unrecordable(), lambda lv, text: None)  # type: ignore[func-returns-value]
    stop = threading.Event()
    runner = threading.Thread(target=capture.run, args=(stop, lambda f: None))
    runner.start()
    runner.join(2.0)  # returns by itself: nothing to retry (the stop only ends a capture that retries)
    stop.set()
    runner.join()
    assert opened == [1] and capture.fatal == str(error)

