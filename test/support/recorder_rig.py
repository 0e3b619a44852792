"""A recording rig for tests: a session's required streams published at 200 Hz and a synthetic
camera in this process, the recorder node in its own process, as deployed."""
from __future__ import annotations

import json
import math
import os
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import rclpy
from rcl_interfaces.srv import SetParameters
from rclpy.node import Node
from rclpy.parameter import Parameter
from sensor_msgs.msg import JointState
from std_msgs.msg import String
from std_srvs.srv import Trigger

from support.procs import node_cmd, wait_for
from teleop_flywheel.core.clock import now_ns
from teleop_flywheel.core.so101 import JOINT_NAMES
from teleop_flywheel.ros.commands.run import end_process
from teleop_flywheel.ros.nodes.camera import CameraNode
from teleop_flywheel.ros.nodes.common import LATCHED_QOS, STREAM_QOS, NodeSpinner, joint_state
from teleop_flywheel.ros.nodes.recorder_client import named_values, refusals

STREAMS = ["/follower/joint_states", "/follower/joint_command", "/teleop/authority"]
CAMERA = "/cameras/front/image/compressed"



class Rig:
    """Publishers of a session's required streams at 200 Hz and a synthetic camera, in this process;
    the recorder in its own."""

    def __init__(self, out: Path) -> None:
        self.context = rclpy.Context()
        rclpy.init(context=self.context)
        self.spinner = NodeSpinner(self.context)
        self.node = Node("rig", context=self.context)
        self.pubs = [self.node.create_publisher(JointState, t, STREAM_QOS) for t in STREAMS]
        self.statuses: list[dict[str, Any]] = []
        self.node.create_subscription(String, "/recorder/status", lambda m: self.statuses.append(json.loads(m.data)),
                                      LATCHED_QOS)
        self.camera = CameraNode("camera_front", context=self.context, parameter_overrides=[
            Parameter("name", value="front"), Parameter("width", value=320), Parameter("height", value=240)])
        for n in (self.node, self.camera):
            self.spinner.add(n)
        self.proc = subprocess.Popen(
            node_cmd("recorder", output_dir=str(out), topics=f"[{','.join(STREAMS)}]", cameras="[front]",
                     discovery_period_s=0.1, status_period_s=0.2),
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=os.environ.copy())
        self.published: list[int] = []  # header stamps of every follower state sent, in order
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._publish, daemon=True)
        self._thread.start()

    def _publish(self) -> None:
        k = 0
        t0 = time.monotonic()
        while not self._stop.is_set():
            k += 1
            t = now_ns()
            pos = [0.3 * math.sin(2 * math.pi * 0.5 * k / 200.0)] * 6
            msg = joint_state(JOINT_NAMES, pos, t)  # the header in ROS time
            for pub in self.pubs[:2]:
                pub.publish(msg)
            self.published.append(msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec)
            self.pubs[2].publish(joint_state(["alpha", "mode", "intervention_id", "trigger"], [1.0, 0.0, 0.0, 0.0], t))
            delay = t0 + k / 200.0 - time.monotonic()
            if delay > 0:
                time.sleep(delay)

    def call(self, service: str) -> tuple[bool, str, float]:
        cli = self.node.create_client(Trigger, f"/recorder/{service}")
        assert cli.wait_for_service(timeout_sec=60), service
        t = time.monotonic()
        future = cli.call_async(Trigger.Request())
        wait_for(future.done, 30, f"/recorder/{service}")
        took = time.monotonic() - t
        self.node.destroy_client(cli)
        return future.result().success, future.result().message, took

    def label(self, **labels: Any) -> None:
        cli = self.node.create_client(SetParameters, "/recorder/label_episode")
        assert cli.wait_for_service(timeout_sec=60), "/recorder/label_episode"
        future = cli.call_async(named_values(**labels))
        wait_for(future.done, 30, "label_episode")
        self.node.destroy_client(cli)
        assert not refusals(future.result()), refusals(future.result())

    def verdict_of(self, name: str, timeout: float = 240.0) -> dict[str, Any]:
        """The status once `name` is judged: by a worker at nice 10, which other load may keep waiting."""
        def done() -> dict[str, Any] | None:
            for s in reversed(self.statuses[-3:]):
                for v in s.get("verdicts", []):
                    if v["episode"] == name and v["verdict"] != "pending":
                        return s
            return None
        return wait_for(done, timeout, f"the verdict of {name} on /recorder/status")  # type: ignore[no-any-return]

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        end_process(self.proc, 15.0)
        self.camera.close()
        self.spinner.shutdown()
        for n in (self.camera, self.node):
            n.destroy_node()
        rclpy.shutdown(context=self.context)
