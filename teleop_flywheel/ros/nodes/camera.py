"""`camera` node: one camera → `/cameras/<name>/image/compressed` (JPEG), stamped at capture.

header.stamp is the source's capture time (V4L2 driver buffer time, or the synthetic camera's
capture instant) — never the time this node got the frame. A stamp gap above 1.5 frame
periods counts the missing frames as dropped; counts and rates go to `/diagnostics` once a
second. The synthetic source draws the arm from `/follower/joint_states`; setting its
`stall_now_s` parameter at run time (`ros2 param set /camera_front stall_now_s 4.0`) makes it
deliver nothing for that long from now: the seeds' dropped camera second, on demand.
Capture, JPEG encoding and publishing run in the node's own thread, not in an rclpy timer.
"""
from __future__ import annotations

import threading
from dataclasses import replace

from diagnostic_msgs.msg import DiagnosticArray
from rcl_interfaces.msg import ParameterDescriptor, SetParametersResult
from rclpy.node import Node
from rclpy.parameter import Parameter
from sensor_msgs.msg import CompressedImage, JointState

from teleop_flywheel.core.clock import fill_stamp, now_ns
from teleop_flywheel.core.topics import DIAGNOSTICS, FOLLOWER_STATE, camera_image
from teleop_flywheel.hw.camera import CameraConfig, CameraError, FrameSource, encode_jpeg, open_source
from teleop_flywheel.hw.camera.source import DropCounter
from teleop_flywheel.hw.camera.synthetic import SyntheticSource
from teleop_flywheel.ros.nodes.common import CONTROL_QOS, IMAGE_QOS, diag_array, diag_status, spin_node


class CameraNode(Node):
    def __init__(self, node_name: str = "camera", **kwargs: object) -> None:
        super().__init__(node_name, **kwargs)
        d = CameraConfig()

        def param(name: str, default: object, text: str) -> object:
            return self.declare_parameter(name, default, ParameterDescriptor(description=text)).value

        self.config = CameraConfig(
            name=str(param("name", d.name, "camera name: topic /cameras/<name>/image/compressed")),
            source=str(param("source", d.source, "synthetic | v4l2")),
            device=str(param("device", d.device, "v4l2 device path or index")),
            width=int(param("width", d.width, "image width, px")),
            height=int(param("height", d.height, "image height, px")),
            fps=float(param("fps", d.fps, "frame rate requested")),
            jpeg_quality=int(param("jpeg_quality", d.jpeg_quality, "JPEG quality 1..100")),
            fourcc=str(param("fourcc", d.fourcc, "v4l2 pixel format")),
            latency_ms=float(param("latency_ms", d.latency_ms, "synthetic: capture→delivery latency, ms")),
            stall_at_s=float(param("stall_at_s", d.stall_at_s, "synthetic fault: stall starts at this many s (<0 none)")),
            stall_s=float(param("stall_s", d.stall_s, "synthetic fault: stall length, s")),
            stamp_offset_ms=float(param("stamp_offset_ms", d.stamp_offset_ms,
                                        "synthetic fault: stamp = capture + this offset, ms")),
        )
        self.frame_id = str(param("frame_id", self.config.name, "header.frame_id of every image"))
        self.topic = camera_image(self.config.name)
        self._pub = self.create_publisher(CompressedImage, self.topic, IMAGE_QOS)
        self._diag_pub = self.create_publisher(DiagnosticArray, DIAGNOSTICS, 10)
        self._joints: dict[str, float] = {}
        if self.config.source == "synthetic":
            self.create_subscription(JointState, FOLLOWER_STATE, self._on_joints, CONTROL_QOS)
        self.drops = DropCounter(self.config.period_ns)
        self._window = (now_ns(), 0)
        self._source: FrameSource | None = open_source(self.config, lambda: self._joints)
        self._error = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"camera-node-{self.config.name}", daemon=True)
        self._thread.start()
        self.declare_parameter("stall_now_s", 0.0, ParameterDescriptor(
            description="synthetic fault, set at run time: stall for this many s from now"))
        self.add_on_set_parameters_callback(self._on_params)
        self.create_timer(1.0, self._publish_diagnostics)

    def _on_params(self, params: list[Parameter]) -> SetParametersResult:
        for p in params:
            if p.name != "stall_now_s" or p.value <= 0:
                continue
            source = self._source
            if not isinstance(source, SyntheticSource):
                return SetParametersResult(successful=False, reason="stall_now_s: only the synthetic camera can stall")
            source.config = replace(source.config, stall_at_s=(now_ns() - source.start_ns) / 1e9,
                                    stall_s=float(p.value))
        return SetParametersResult(successful=True)

    def _on_joints(self, msg: JointState) -> None:
        self._joints = dict(zip(msg.name, msg.position))

    def _loop(self) -> None:
        assert self._source is not None
        while not self._stop.is_set():
            try:
                frame = self._source.read(timeout_s=0.2)
            except CameraError as exc:
                self._error = str(exc)
                self.get_logger().error(self._error)
                return
            if frame is None:
                continue
            msg = CompressedImage()
            fill_stamp(msg.header.stamp, frame.stamp_ns)
            msg.header.frame_id = self.frame_id
            msg.format = "jpeg"
            msg.data = encode_jpeg(frame.image, self.config.jpeg_quality)
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
        if self._error:
            level, text = "ERROR", self._error
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
             "max_gap_ms": f"{self.drops.max_gap_ns / 1e6:.1f}", "source": self.config.source},
            hardware_id=self.config.device if self.config.source == "v4l2" else "synthetic")]))

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=2.0)
        if self._source is not None:
            self._source.close()
            self._source = None


def main() -> int:
    return spin_node(CameraNode)
