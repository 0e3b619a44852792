"""`metrics` node: the rig's session as Prometheus metrics on a local HTTP endpoint (docs/fleet.md).

One exporter per session, subscribed to what the rig already publishes — no node is changed to
be measured: `/diagnostics` (the arm drivers' loop, overruns and bus latency, the cameras' frames,
the teleop node's mode), `recorder/status` (operator, task, drops, episodes, verdicts with reason
codes, camera latency and content-estimated lag), `teleop/intervention` (takeovers and their
trigger labels) and `policy/joint_command` (the checkpoint: its `header.frame_id`, read from the
serialized bytes). The messages are decoded here and counted by the ROS-free
`fleet.session_metrics.SessionMetrics`; `prometheus_client` serves them at
`http://<address>/metrics`. The seconds the policy drove are the teleop node's time in policy mode
less the takeovers, not a sum over `teleop/authority`: taking its 200 messages a second cost this
node 7 % of a core.

`/diagnostics` is global: every rig of a ROS domain publishes there, and a status's name does not
say whose it is (`leader_arm: leader arm` in every rig). So each message is attributed by its
publisher: the GID in the message info, looked up in the graph (`get_publishers_info_by_topic`),
gives the publishing node's namespace; only this node's namespace is counted.

`address` is loopback by default (`127.0.0.1:9464`): nothing is exposed beyond the machine unless
asked for (a LAN address, for a Prometheus on another host). Empty or `off` starts no server (the
launch argument `metrics:=off` leaves the node out of the graph altogether). An address in use —
another rig on this machine kept the default — is one ERROR line naming the address and the fix,
ERROR on `/diagnostics` while it lasts, and a retry every `retry_s`: a session is never stopped
for its monitoring. Every parameter is read-only.
"""
from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from typing import Any

from diagnostic_msgs.msg import DiagnosticArray
from rclpy.node import Node
from sensor_msgs.msg import JointState
from std_msgs.msg import String

from teleop_flywheel.core.clock import stamp_to_ns
from teleop_flywheel.core.topics import (
    DIAGNOSTICS,
    INTERVENTION,
    POLICY_COMMAND,
    RECORDER_NODE,
    RECORDER_STATUS,
)
from teleop_flywheel.fleet.endpoint import DEFAULT_ADDRESS, MetricsServer, parse_address
from teleop_flywheel.fleet.errors import AddressError
from teleop_flywheel.fleet.session_metrics import SessionMetrics, default_rig
from teleop_flywheel.recording.mcap.cdr import header_frame_id
from teleop_flywheel.ros.nodes.common import CONTROL_QOS, LATCHED_QOS, diag_array, diag_status, spin_node
from teleop_flywheel.ros.nodes.recorder import STATUS_QOS  # the recorder's latched status, as it offers it
from teleop_flywheel.ros.params import Invalid, NodeParameters, NodeParams, spec

LOOKUP_EVERY_S = 1.0  # an unknown publisher of /diagnostics: look the graph up again at most this often
UNKNOWN_NAMESPACE = "_NODE_NAMESPACE_UNKNOWN_"  # rmw's word for an endpoint whose node it does not know yet


@dataclass
class MetricsParams(NodeParams):
    address: str = spec(DEFAULT_ADDRESS, "HOST:PORT of the Prometheus endpoint (/metrics); empty or off = none. "
                        "Loopback by default: a LAN address exposes it beyond this machine", text=True)
    rig: str = spec("", "the rig label of every metric; empty = this node's namespace (rig_a), else the host name",
                    pattern=r"[A-Za-z0-9_.:-]*")
    output_dir: str = spec("", "the session's output directory: teleop_disk_free_bytes is the space free under it")
    retry_s: float = spec(5.0, "retry an endpoint address in use this often (s)", range=(0.5, 3600.0))

    def check(self) -> None:
        try:
            parse_address(self.address)
        except AddressError as exc:
            raise Invalid("address", str(exc)) from None


class MetricsNode(Node):
    """The session's Prometheus exporter (see the module doc)."""

    def __init__(self, node_name: str = "metrics", **kwargs: Any) -> None:
        super().__init__(node_name, **kwargs)
        p = self.params = NodeParameters(self, MetricsParams).values
        self.namespace = self.get_namespace()
        self.model = SessionMetrics(p.rig or default_rig(self.namespace), p.output_dir, start_ns=time.time_ns())
        self.endpoint = parse_address(p.address)
        self.server: MetricsServer | None = None
        self.error = ""
        self._diag_sources: dict[bytes, str] = {}  # /diagnostics publisher GID -> its node's namespace
        self._looked_up = 0.0
        self.create_subscription(DiagnosticArray, DIAGNOSTICS, self._on_diagnostics, 50)
        self.create_subscription(String, f"{RECORDER_NODE}/{RECORDER_STATUS}", self._on_status, STATUS_QOS)
        self.create_subscription(String, INTERVENTION, self._on_intervention, LATCHED_QOS)
        self.create_subscription(JointState, POLICY_COMMAND, self._on_policy, CONTROL_QOS, raw=True)
        self._diag = self.create_publisher(DiagnosticArray, DIAGNOSTICS, 10)
        self._retry = None
        self._serve()
        if self.endpoint is not None and self.server is None:
            self._retry = self.create_timer(p.retry_s, self._serve)
        self.create_timer(1.0, self._publish_diagnostics)

    def _serve(self) -> None:
        if self.server is not None or self.endpoint is None:
            return
        host, port = self.endpoint
        try:
            self.server = MetricsServer(self.model.collector(), host, port)
        except OSError as exc:
            error = (f"cannot serve metrics on {self.params.address}: {exc.strerror or exc} (another rig on this "
                     f"machine? give each its own: metrics:={host}:{port + 1}); retrying every "
                     f"{self.params.retry_s:g} s")
            if error != self.error:
                self.get_logger().error(error)
            self.error = error
            return
        self.error = ""
        if self._retry is not None:
            self._retry.cancel()
        self.get_logger().info(f"Prometheus metrics of rig {self.model.rig} at http://{self.server.address}/metrics")

    # -- inputs ------------------------------------------------------------------------------
    def _namespace_of(self, gid: bytes) -> str | None:
        """The namespace of the node that owns publisher `gid`, once the graph knows it. An endpoint
        is discovered before its node's name and namespace (Fast DDS sends those separately), so
        an endpoint still without them is looked up again, never remembered as it was."""
        namespace = self._diag_sources.get(gid)
        if namespace is None and time.monotonic() - self._looked_up >= LOOKUP_EVERY_S:
            self._looked_up = time.monotonic()
            self._diag_sources = {bytes(i.endpoint_gid): i.node_namespace
                                  for i in self.get_publishers_info_by_topic(DIAGNOSTICS)
                                  if i.node_namespace != UNKNOWN_NAMESPACE}
            namespace = self._diag_sources.get(gid)
        return namespace

    def _on_diagnostics(self, msg: DiagnosticArray, info: Any) -> None:
        gid = (info.get("publisher_gid") or {}).get("data")
        if gid is None or self._namespace_of(bytes(gid)) != self.namespace:
            return  # another rig's (or not attributable yet: its next status will be)
        stamp = stamp_to_ns(msg.header.stamp)
        for status in msg.status:
            self.model.on_diagnostics(status.name, {kv.key: kv.value for kv in status.values}, stamp)

    def _on_status(self, msg: String) -> None:
        try:
            status = json.loads(msg.data)
        except ValueError:
            return
        self.model.on_recorder_status(status, time.time_ns())

    def _on_intervention(self, msg: String) -> None:
        try:
            self.model.on_intervention(json.loads(msg.data))
        except (ValueError, KeyError, TypeError) as exc:
            self.get_logger().warning(f"unreadable intervention event {msg.data!r}: {exc}", throttle_duration_sec=10.0)

    def _on_policy(self, data: bytes) -> None:
        """A policy command, serialized: only its header's frame_id (the checkpoint) is read."""
        checkpoint = header_frame_id(data)
        if checkpoint != self.model.checkpoint:
            self.model.on_checkpoint(checkpoint)

    # -- status ------------------------------------------------------------------------------
    def _publish_diagnostics(self) -> None:
        if self.endpoint is None:
            level, text = "OK", "metrics endpoint off"
        elif self.server is None:
            level, text = "ERROR", self.error
        else:
            level, text = "OK", f"serving http://{self.server.address}/metrics"
        self._diag.publish(diag_array([diag_status(
            f"{self.get_name()}: metrics", level, text,
            {"rig": self.model.rig, "address": self.server.address if self.server else self.params.address,
             "operator": self.model.operator, "task": self.model.task, "checkpoint": self.model.checkpoint})]))

    def close(self) -> None:
        """Stop serving. Idempotent."""
        server, self.server = self.server, None
        if server is not None:
            server.close()


def main() -> int:
    return spin_node(MetricsNode, name="metrics")


if __name__ == "__main__":
    sys.exit(main())
