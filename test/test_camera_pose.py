"""The synthetic camera node as deployed (its own process) on a loaded machine: every frame shows the
follower's pose at its exposure instant — the samples around it, interpolated — and says in the JPEG
which samples it drew, so a clean episode's true camera lag is ~0 however busy the host is."""
from __future__ import annotations

import math
import os
import subprocess
import sys
import threading
import time

import cv2
import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy")

from procs import node_cmd  # noqa: E402
from rclpy.node import Node  # noqa: E402
from sensor_msgs.msg import CompressedImage, JointState  # noqa: E402

from teleop_flywheel.core import frame_meta  # noqa: E402
from teleop_flywheel.core.clock import now_ns, stamp_to_ns  # noqa: E402
from teleop_flywheel.core.so101 import JOINT_NAMES  # noqa: E402
from teleop_flywheel.hw.camera import timecode  # noqa: E402
from teleop_flywheel.hw.camera.synthetic import _background, draw_arm  # noqa: E402
from teleop_flywheel.ros.nodes.common import IMAGE_QOS, STREAM_QOS, NodeSpinner, joint_state  # noqa: E402
from teleop_flywheel.ros.session.runner import end_process  # noqa: E402

RATE_HZ = 200.0
BUSY = "import time\nend = time.monotonic() + 30\nwhile time.monotonic() < end: pass\n"


def pose(t_s: float) -> list[float]:
    return [0.6 * math.sin(2 * math.pi * 0.7 * t_s + j) for j in range(6)]


def test_frames_show_the_pose_at_exposure_on_a_loaded_machine() -> None:
    context = rclpy.Context()
    rclpy.init(context=context)
    node = Node("pose_probe", context=context)
    spinner = NodeSpinner(context)
    spinner.add(node)
    pub = node.create_publisher(JointState, "/follower/joint_states", STREAM_QOS)
    frames: list[CompressedImage] = []
    node.create_subscription(CompressedImage, "/cameras/front/image/compressed", frames.append, IMAGE_QOS)
    sent: dict[int, list[float]] = {}  # header stamp (ROS time) -> positions
    camera = subprocess.Popen(node_cmd("camera", name="front", width=320, height=240, fps=30.0),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=os.environ.copy())
    load: list[subprocess.Popen[bytes]] = []
    stop = threading.Event()

    def publish() -> None:
        t0, k = time.monotonic(), 0
        while not stop.is_set():
            mono = now_ns()
            msg = joint_state(JOINT_NAMES, pose(mono / 1e9), mono)
            sent[stamp_to_ns(msg.header.stamp)] = list(msg.position)
            pub.publish(msg)
            k += 1
            time.sleep(max(0.0, t0 + k / RATE_HZ - time.monotonic()))

    publisher = threading.Thread(target=publish, daemon=True)
    try:
        publisher.start()
        deadline = time.monotonic() + 60
        while len(frames) < 10:
            assert time.monotonic() < deadline, "no frames from the camera node"
            time.sleep(0.05)
        load = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(3)]  # more busy loops than cores
        first = len(frames)
        deadline = time.monotonic() + 60
        while len(frames) < first + 120:  # 4 s of frames under load
            assert time.monotonic() < deadline, "too few frames under load"
            time.sleep(0.05)
        got = frames[first:first + 120]
    finally:
        stop.set()
        for p in load:
            p.kill()
            p.wait()
        publisher.join(5)
        end_process(camera, 15.0)
        spinner.shutdown()
        node.destroy_node()
        rclpy.shutdown(context=context)

    stamps = sorted(sent)
    lags, held = [], 0
    for msg in got:
        meta = frame_meta.read(bytes(msg.data))
        assert meta is not None, "every synthetic frame says what it drew"
        stamp = stamp_to_ns(msg.header.stamp)
        image = cv2.imdecode(np.frombuffer(bytes(msg.data), np.uint8), cv2.IMREAD_COLOR)
        assert timecode.decode(image) == meta["capture_ns"]
        assert abs(stamp - meta["capture_ns"]) <= 1_000_000  # header stamp = exposure (ROS time)
        a, b = meta["samples"]
        assert a in sent and (b is None or b in sent)  # samples the follower really published (as a bag has them)
        if meta["held_ms"] != 0.0:
            held += 1
            continue
        assert a <= meta["pose_ns"] <= b
        lags.append((stamp - meta["pose_ns"]) / 1e6)  # true camera lag: stamp minus the instant shown
        # the pixels are that pose: the samples around the exposure, interpolated
        f = (meta["pose_ns"] - a) / (b - a) if b != a else 0.0
        joints = {n: pa + f * (pb - pa) for n, pa, pb in zip(JOINT_NAMES, sent[a], sent[b])}
        expected = _background(320, 240)
        draw_arm(expected, joints, top=timecode.strip_height(320, 240))
        expected = timecode.encode(expected, meta["capture_ns"])
        decoded_expected = cv2.imdecode(np.frombuffer(cv2.imencode(".jpg", expected, [cv2.IMWRITE_JPEG_QUALITY, 90])[1],
                                                      np.uint8), cv2.IMREAD_COLOR)
        assert np.abs(image.astype(int) - decoded_expected.astype(int)).mean() < 1.0
    print(f"{len(got)} frames under load: {held} held, true lag of the others max {max(map(abs, lags)):.3f} ms")
    assert stamps and len(lags) >= 0.8 * len(got), f"{held} of {len(got)} frames held a stale pose under load"
    assert max(abs(x) for x in lags) <= 1.0, f"true lag up to {max(abs(x) for x in lags):.2f} ms"
