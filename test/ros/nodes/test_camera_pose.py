"""The synthetic camera node as deployed (its own process) on a loaded machine: every frame shows the
follower's pose at its exposure instant — the samples around it, interpolated — and says in the JPEG
which samples it drew, so a clean episode's true camera lag is ~0 however busy the host is."""
from __future__ import annotations

import math
import os
import subprocess
import sys
import time

import cv2
import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy")

from rclpy.node import Node  # noqa: E402
from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy  # noqa: E402
from sensor_msgs.msg import CompressedImage, JointState  # noqa: E402
from support.procs import HostClockWatch, node_cmd  # noqa: E402

from teleop_flywheel.core import frame_meta  # noqa: E402
from teleop_flywheel.core.clock import stamp_to_ns  # noqa: E402
from teleop_flywheel.core.so101 import JOINT_NAMES  # noqa: E402
from teleop_flywheel.hw.camera import timecode  # noqa: E402
from teleop_flywheel.hw.camera.synthetic import _background, draw_arm  # noqa: E402
from teleop_flywheel.ros.commands.run import end_process  # noqa: E402
from teleop_flywheel.ros.nodes.common import IMAGE_QOS, NodeSpinner  # noqa: E402

RATE_HZ = 200.0
BUSY = "import time\nend = time.monotonic() + 30\nwhile time.monotonic() < end: pass\n"
# The follower, as an arm driver publishes it: its own process and session, 200 Hz, stamped at the
# source; the pose is a function of the stamp, so the test knows every sample from its stamp alone.
FOLLOWER = """
import math, time, rclpy
from rclpy.node import Node
from sensor_msgs.msg import JointState
from teleop_flywheel.core.clock import now_ns, stamp_to_ns
from teleop_flywheel.core.so101 import JOINT_NAMES
from teleop_flywheel.ros.nodes.common import STREAM_QOS, stamp
rclpy.init()
node = Node("follower_stand_in")
pub = node.create_publisher(JointState, "/follower/joint_states", STREAM_QOS)
t0, k = time.monotonic(), 0
while True:
    msg = JointState()
    stamp(msg.header.stamp, now_ns())
    s = stamp_to_ns(msg.header.stamp) / 1e9
    msg.name = list(JOINT_NAMES)
    msg.position = [0.6 * math.sin(2 * math.pi * 0.7 * s + j) for j in range(6)]
    pub.publish(msg)
    k += 1
    time.sleep(max(0.0, t0 + k / 200.0 - time.monotonic()))
"""


def pose(stamp_ns: int) -> list[float]:
    s = stamp_ns / 1e9
    return [0.6 * math.sin(2 * math.pi * 0.7 * s + j) for j in range(6)]


def test_frames_show_the_pose_at_exposure_on_a_loaded_machine() -> None:
    """Every process in a session of its own, as the supervisor runs a rig (and as another user's
    jobs run): with sched_autogroup each competes as a group, the busy loops included."""
    clock = HostClockWatch().__enter__()
    context = rclpy.Context()
    rclpy.init(context=context)
    node = Node("pose_probe", context=context)
    spinner = NodeSpinner(context)
    spinner.add(node)
    frames: list[CompressedImage] = []
    sent: set[int] = set()  # header stamps (ROS time) the follower published
    node.create_subscription(CompressedImage, "/cameras/front/image/compressed", frames.append, IMAGE_QOS)
    node.create_subscription(JointState, "/follower/joint_states", lambda m: sent.add(stamp_to_ns(m.header.stamp)),
                             QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=10_000,  # none lost by a slow probe
                                        reliability=ReliabilityPolicy.RELIABLE))
    own = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL, "env": os.environ.copy(),
           "start_new_session": True}
    follower = subprocess.Popen([sys.executable, "-c", FOLLOWER], **own)  # type: ignore[call-overload]
    camera = subprocess.Popen(node_cmd("camera", name="front", width=320, height=240, fps=30.0), **own)
    load: list[subprocess.Popen[bytes]] = []
    try:
        deadline = time.monotonic() + 60
        while len(frames) < 10 or len(sent) < 100:
            assert time.monotonic() < deadline, "no frames from the camera node, or no follower samples"
            time.sleep(0.05)
        load = [subprocess.Popen([sys.executable, "-c", BUSY], start_new_session=True) for _ in range(3)]
        first = len(frames)
        deadline = time.monotonic() + 60
        while len(frames) < first + 120:  # 4 s of frames under load
            assert time.monotonic() < deadline, "too few frames under load"
            time.sleep(0.05)
        got = frames[first:first + 120]
        time.sleep(0.5)  # the follower samples after the last frame
    finally:
        for p in load:
            p.kill()
            p.wait()
        end_process(camera, 15.0)
        end_process(follower, 15.0)
        spinner.shutdown()
        node.destroy_node()
        rclpy.shutdown(context=context)

    clock.__exit__()
    if clock.stepped:  # not a pass: said, and the run's other checks still judge the camera
        pytest.skip(
            f"the host's wall clock stepped ({clock.max_jump_ns / 1e6:.1f} ms) during the test: ROS-time stamps "
            "converted before and after it are on two timelines (what the validator rejects as CLOCK_STEP)"
        )
    stamps = np.array(sorted(sent))

    def clean(t: int) -> bool:
        """The follower stream around t as a clean episode has it: no stamp gap the validator would
        reject (FRAME_GAP, 2/fps at 30 fps) within 100 ms either side."""
        near = stamps[(stamps >= t - 100_000_000) & (stamps <= t + 100_000_000)]
        edges = np.concatenate(([t - 100_000_000], near, [t + 100_000_000]))
        return len(near) > 0 and float(np.diff(edges).max()) <= 2e9 / 30

    lags, held, dirty = [], 0, 0
    for msg in got:
        meta = frame_meta.read(bytes(msg.data))
        assert meta is not None, "every synthetic frame says what it drew"
        stamp = stamp_to_ns(msg.header.stamp)
        image = cv2.imdecode(np.frombuffer(bytes(msg.data), np.uint8), cv2.IMREAD_COLOR)
        assert timecode.decode(image) == meta["capture_ns"]
        assert abs(stamp - meta["capture_ns"]) <= 1_000_000  # header stamp = exposure (ROS time)
        a, b = meta["samples"]
        assert a in sent and (b is None or b in sent)  # samples the follower really published (as a bag has them)
        if not clean(stamp):  # the follower itself stalled here: such an episode is rejected (FRAME_GAP)
            dirty += 1
            continue
        lags.append((stamp - meta["pose_ns"]) / 1e6)  # true camera lag: stamp minus the instant shown
        if meta["held_ms"] != 0.0:  # the sample after the exposure was late: the newest pose, held
            held += 1
            assert b is None and abs(meta["pose_ns"] - a) < 100_000 and abs(lags[-1] - meta["held_ms"]) < 1.0
            continue
        assert a <= meta["pose_ns"] <= b and abs(lags[-1]) <= 1.0
        # the pixels are that pose: the samples around the exposure, interpolated
        f = (meta["pose_ns"] - a) / (b - a) if b != a else 0.0
        joints = {n: pa + f * (pb - pa) for n, pa, pb in zip(JOINT_NAMES, pose(a), pose(b), strict=True)}
        expected = _background(320, 240)
        draw_arm(expected, joints, top=timecode.strip_height(320, 240))
        expected = timecode.encode(expected, meta["capture_ns"])
        decoded_expected = cv2.imdecode(np.frombuffer(cv2.imencode(".jpg", expected, [cv2.IMWRITE_JPEG_QUALITY, 90])[1],
                                                      np.uint8), cv2.IMREAD_COLOR)
        assert np.abs(image.astype(int) - decoded_expected.astype(int)).mean() < 1.0
    assert len(lags) >= 30, f"the follower stalled around {dirty} of {len(got)} frames: nothing clean to judge"
    lags.sort()
    median, mean = lags[len(lags) // 2], sum(lags) / len(lags)
    print(f"{len(got)} frames under load ({dirty} where the follower itself stalled): {held} of the others held; "
          f"true lag median {median:.3f} ms, mean {mean:.3f} ms")
    # Where the follower stream is clean, most frames are interpolated (lag 0) and the few held ones
    # only as far behind as their sample came late: far inside the lag estimator's 5 ms target.
    assert abs(median) <= 1.0 and abs(mean) <= 5.0, (held, median, mean)
