"""`camera` node: one camera → `/cameras/<name>/image/compressed` (JPEG), stamped at capture.

header.stamp is the source's capture time (V4L2 driver buffer time, or the synthetic camera's
capture instant), both CLOCK_MONOTONIC, converted to ROS time as the frame is published
(`common.stamp`) — never the time this node got the frame. The synthetic camera writes that same
capture time, in ROS time, into its pixel timecode. A stamp gap above 1.5 frame
periods counts the missing frames as dropped; counts and rates go to `/diagnostics` once a
second. The synthetic source draws the arm from `/follower/joint_states` as it was at each frame's
exposure (the samples interpolated to it) and says in the JPEG which samples it drew
(`core.frame_meta`: a COM segment every decoder skips). Every frame, of every source, carries
the node's camera instance there (`"instance"`: a new random id each time the device is opened, at
start and on every reopen), so the validator pools a camera's lag per instance
(`data/validate/lag_pool.py`): a restart may change the lag. Setting its
`stall_now_s` parameter at run time (`ros2 param set /camera_front stall_now_s 4.0`) makes it
deliver nothing for that long from now: the seeds' dropped camera second, on demand (every set
stalls again, also with the same value); with `presence_file` it is unplugged while that file is
missing; its `latency_ms` (capture → delivery) changes at run time for the frames captured from
then on (an evaluation condition's camera latency). Every other parameter is read-only.
A camera that is not there, or goes away, is one ERROR line naming it, `/diagnostics` ERROR while it
lasts, and is reopened with backoff (0.1 s doubling to 2 s: `hw.camera.capture`) — the node does not
die; a V4L2 camera that does not grant the mode asked for (`fourcc`, `width`, `height`, `fps`, read
back from the driver and checked on every frame's size) or whose stamps are not CLOCK_MONOTONIC
ends it (one line naming the device, exit 1): it would record at the wrong rate, size or time.
Capture, JPEG encoding and publishing run in the node's own thread, not in an rclpy timer; it
stops in `close()`, before the node and its context go away.
"""
from __future__ import annotations

import sys
import threading
import uuid
from dataclasses import dataclass, replace
from typing import Any

from diagnostic_msgs.msg import DiagnosticArray
from rclpy.node import Node
from sensor_msgs.msg import CompressedImage, JointState

from teleop_flywheel.core import frame_meta
from teleop_flywheel.core.clock import now_ns, stamp_to_ns, to_ros_ns
from teleop_flywheel.core.topics import DIAGNOSTICS, FOLLOWER_STATE, camera_image
from teleop_flywheel.hw.camera import CameraConfig, Frame, FrameSource, encode_jpeg, open_source, timecode
from teleop_flywheel.hw.camera.capture import Capture
from teleop_flywheel.hw.camera.source import SOURCES, DropCounter
from teleop_flywheel.hw.camera.synthetic import JointHistory, SyntheticSource
from teleop_flywheel.ros.nodes.common import (
    IMAGE_QOS,
    STREAM_QOS,
    diag_array,
    diag_status,
    log_at,
    msg_stamp_ns,
    spin_node,
    stamp,
)
from teleop_flywheel.ros.params import Invalid, NodeParameters, NodeParams, spec

_D = CameraConfig()


@dataclass
class CameraParams(NodeParams):
    name: str = spec(_D.name, "camera name: topic /cameras/<name>/image/compressed", required=True,
                     pattern=r"[A-Za-z][A-Za-z0-9_]*")
    source: str = spec(_D.source, "synthetic | v4l2", choices=SOURCES)
    device: str = spec(_D.device, "v4l2 device path or index")
    width: int = spec(_D.width, "image width (px)", range=(16, 7680))
    height: int = spec(_D.height, "image height (px)", range=(16, 4320))
    fps: float = spec(_D.fps, "frame rate requested (Hz)", range=(0.1, 1000.0))
    jpeg_quality: int = spec(_D.jpeg_quality, "JPEG quality", range=(1, 100))
    fourcc: str = spec(_D.fourcc, "v4l2 pixel format (4 characters)", pattern=r".{4}", required=True)
    latency_ms: float = spec(_D.latency_ms, "synthetic: capture→delivery latency (ms); changeable at run time",
                             range=(0.0, 10_000.0), read_only=False)
    stall_at_s: float = spec(_D.stall_at_s, "synthetic fault: a stall starts this many s after start (<0: none)",
                             range=(-1.0, 86_400.0))
    stall_s: float = spec(_D.stall_s, "synthetic fault: stall length (s)", range=(0.0, 3600.0))
    stamp_offset_ms: float = spec(_D.stamp_offset_ms, "synthetic fault: stamp = capture + this offset (ms)",
                                  range=(-10_000.0, 10_000.0))
    frame_id: str = spec("", "header.frame_id of every image; empty = the camera name")
    presence_file: str = spec(_D.presence_file, "synthetic: plugged in while this file exists (empty: always)")
    stall_now_s: float = spec(0.0, "synthetic fault, set at run time: deliver nothing for this many s from now",
                              range=(0.0, 3600.0), read_only=False)

    def check(self) -> None:
        if self.source == "synthetic":
            try:
                timecode.layout(self.width, self.height)
            except ValueError as exc:
                name = "height" if self.width >= timecode.DEFAULT_BLOCK else "width"
                raise Invalid(name, f"the synthetic source needs room for its timecode ({exc})") from None

    def config(self) -> CameraConfig:
        return CameraConfig(name=self.name, source=self.source, device=self.device, width=self.width,
                            height=self.height, fps=self.fps, jpeg_quality=self.jpeg_quality, fourcc=self.fourcc,
                            latency_ms=self.latency_ms, stall_at_s=self.stall_at_s, stall_s=self.stall_s,
                            stamp_offset_ms=self.stamp_offset_ms, presence_file=self.presence_file)


class CameraNode(Node):
    def __init__(self, node_name: str = "camera", **kwargs: Any) -> None:
        super().__init__(node_name, **kwargs)
        self.params = NodeParameters(self, CameraParams, self._on_params)
        self.config = self.params.values.config()
        self.frame_id = self.params.values.frame_id or self.config.name
        self.topic = camera_image(self.config.name)
        self._pub = self.create_publisher(CompressedImage, self.topic, IMAGE_QOS)
        self._diag_pub = self.create_publisher(DiagnosticArray, DIAGNOSTICS, 10)
        self.history = JointHistory()
        if self.config.source == "synthetic":  # every sample (a deep queue): the pose at each exposure
            self.create_subscription(JointState, FOLLOWER_STATE, self._on_joints, STREAM_QOS)
        self.drops = DropCounter(self.config.period_ns)
        self._window = (now_ns(), 0)
        self._source: FrameSource | None = None
        self.instance = ""  # set by every open of the device (`core.frame_meta` "instance")
        device = "synthetic" if self.config.source == "synthetic" else self.config.device
        self.capture = Capture(f"camera {self.config.name} ({device})", self._open, self._log)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self.capture.run, args=(self._stop, self._publish_frame),
                                        name=f"camera-node-{self.config.name}", daemon=True)
        self._thread.start()
        self.create_timer(1.0, self._publish_diagnostics)

    @property
    def failure(self) -> str:
        """Why this node cannot go on (`spin_node` ends it with this line): a mode not granted, stamps
        on the wrong clock."""
        return self.capture.fatal

    def _open(self) -> FrameSource:
        self._source = open_source(self.config, timecode_clock=to_ros_ns, history=self.history)
        self.instance = uuid.uuid4().hex[:12]  # a new instance on every (re)open: its clock may differ
        return self._source

    def _log(self, level: str, message: str) -> None:
        log_at(self, level, message)

    def _on_params(self, old: CameraParams, new: CameraParams, names: set[str]) -> str | None:
        source = self._source
        stall = "stall_now_s" in names and new.stall_now_s > 0
        if not (stall or "latency_ms" in names):
            return None
        if not isinstance(source, SyntheticSource):
            return f"{'stall_now_s' if stall else 'latency_ms'}: only the synthetic camera's changes at run time"
        if "latency_ms" in names:  # frames captured from now on (an evaluation condition's camera latency)
            source.set_latency_ms(new.latency_ms)
        if stall:
            source.config = replace(source.config, stall_at_s=(now_ns() - source.start_ns) / 1e9,
                                    stall_s=new.stall_now_s)
        return None

    def _on_joints(self, msg: JointState) -> None:
        self.history.add(msg_stamp_ns(msg), stamp_to_ns(msg.header.stamp), msg.name, msg.position)

    def _publish_frame(self, frame: Frame) -> None:
        msg = CompressedImage()
        stamp(msg.header.stamp, frame.stamp_ns)
        msg.header.frame_id = self.frame_id
        msg.format = "jpeg"
        data = encode_jpeg(frame.image, self.config.jpeg_quality)
        msg.data = frame_meta.add(data, {**(frame.meta or {}), "instance": self.instance})
        lost = self.drops.add(frame.stamp_ns)
        if lost:
            self.get_logger().warning(f"{self.topic}: {lost} frame(s) dropped before stamp {frame.stamp_ns}",
                                      throttle_duration_sec=1.0)
        self._pub.publish(msg)

    def _publish_diagnostics(self) -> None:
        now = now_ns()
        t0, frames0 = self._window
        rate = (self.drops.frames - frames0) / max((now - t0) / 1e9, 1e-9)
        self._window = (now, self.drops.frames)
        age_s = (now - self.drops.last_ns) / 1e9 if self.drops.last_ns is not None else float("inf")
        if self.capture.error:
            level, text = "ERROR", self.capture.error
        elif age_s > 1.0:
            level, text = "STALE", f"no frame for {age_s:.1f} s"
        elif self.drops.dropped:
            level, text = "WARN", f"{self.drops.dropped} frames dropped"
        else:
            level, text = "OK", f"{rate:.1f} fps"
        self._diag_pub.publish(diag_array([diag_status(
            f"camera/{self.config.name}", level, text,
            {"topic": self.topic, "frames": self.drops.frames, "dropped": self.drops.dropped,
             "rate_hz": f"{rate:.2f}", "target_fps": self.config.fps,
             "max_gap_ms": f"{self.drops.max_gap_ns / 1e6:.1f}", "source": self.config.source,
             "reconnects": self.capture.reconnects},
            hardware_id=self.config.device if self.config.source == "v4l2" else "synthetic")]))

    def close(self) -> None:
        """Stop the capture thread (it publishes no more), then release the source. Idempotent."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=5.0)
        self.capture.close()


def main() -> int:
    return spin_node(CameraNode, name="camera")


if __name__ == "__main__":
    sys.exit(main())
