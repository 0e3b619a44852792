"""The `metrics` node on real rclpy/DDS: what two rigs publish into one domain is counted for the
node's own rig only (its `/diagnostics` attributed by the publisher's namespace), and its HTTP
endpoint answers in the text prometheus_client's parser reads back to the values published."""
from __future__ import annotations

import json
import socket
import time
import urllib.request
from pathlib import Path

import pytest

rclpy = pytest.importorskip("rclpy")
from diagnostic_msgs.msg import DiagnosticArray  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402
from rclpy.context import Context  # noqa: E402
from rclpy.node import Node  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402
from sensor_msgs.msg import JointState  # noqa: E402
from std_msgs.msg import String  # noqa: E402
from support.procs import wait_for  # noqa: E402

from teleop_flywheel.core.clock import now_ns  # noqa: E402
from teleop_flywheel.ros.nodes.common import (  # noqa: E402
    LATCHED_QOS,
    STREAM_QOS,
    NodeSpinner,
    diag_array,
    diag_status,
    joint_state,
    stamp,
)
from teleop_flywheel.ros.nodes.metrics import MetricsNode  # noqa: E402
from teleop_flywheel.ros.nodes.recorder import STATUS_QOS  # noqa: E402

pytestmark = pytest.mark.timeout(120)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape(port: int) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for f in text_string_to_metric_families(text) for s in f.samples}


def pick(found: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float | None:
    hits = [v for (n, ls), v in found.items() if n == name and set(labels.items()) <= ls]
    return sum(hits) if hits else None


def test_the_node_counts_its_own_rig_and_serves_it(context: Context, tmp_path: Path) -> None:
    port = free_port()
    metrics = MetricsNode(namespace="/rig_a", context=context, parameter_overrides=[
        Parameter("address", value=f"127.0.0.1:{port}"), Parameter("output_dir", value=str(tmp_path))])
    rig_a = Node("leader_arm", namespace="/rig_a", context=context)
    rig_b = Node("leader_arm", namespace="/rig_b", context=context)  # the same status names, another rig
    spinner = NodeSpinner(context)
    for node in (metrics, rig_a, rig_b):
        spinner.add(node)
    try:
        diag_a = rig_a.create_publisher(DiagnosticArray, "/diagnostics", 10)
        diag_b = rig_b.create_publisher(DiagnosticArray, "/diagnostics", 10)
        status = rig_a.create_publisher(String, "recorder/status", STATUS_QOS)
        events = rig_a.create_publisher(String, "teleop/intervention", LATCHED_QOS)
        policy = rig_a.create_publisher(JointState, "policy/joint_command", STREAM_QOS)
        wait_for(lambda: policy.get_subscription_count() and events.get_subscription_count()
                 and status.get_subscription_count() and diag_b.get_subscription_count(), 30, "the node subscribed")

        def driver(ticks: int) -> DiagnosticArray:
            return diag_array([diag_status("leader_arm: leader arm", "OK", "ok", {
                "role": "leader", "rate_hz": 200.0, "target_rate_hz": 200.0, "ticks": ticks, "overruns": 2,
                "read_errors": 0, "reads": 4, "read_sum_ms": 4.0, **{f"read_le_{le:g}_ms": 4 for le in (
                    0.5, 1.0, 2.0, 3.0, 5.0, 10.0, 20.0, 50.0, 100.0)}})])

        policy.publish(joint_state(["a"], [0.0], now_ns(), frame_id="act-v3"))
        status.publish(String(data=json.dumps({"state": "idle", "operator": "ana", "task": "pick", "topics": {},
                                               "verdicts": [], "clock": {"cameras": {}}})))
        wait_for(lambda: pick(scrape(port), "teleop_session_info", operator="ana", checkpoint="act-v3"), 30,
                 "the session's labels", poll_s=0.2)  # topics are not ordered among each other
        start = time.time_ns()
        events.publish(String(data=json.dumps({"id": 1, "start_ns": start, "end_ns": start + 200_000_000,
                                               "trigger": "too_slow", "kind": "intervention"})))
        t = now_ns() + 1_000_000_000  # two teleop statuses in policy mode, 1 s apart, after the takeover
        for k in range(2):
            teleop = diag_array([diag_status("teleop: authority", "OK", "ok", {"mode": "policy", "interventions": 1})])
            stamp(teleop.header.stamp, t + k * 1_000_000_000)
            diag_a.publish(teleop)

        def counted() -> dict[tuple[str, frozenset[tuple[str, str]]], float] | None:
            diag_b.publish(driver(10_000))  # rig_b's: never counted by rig_a's exporter
            diag_a.publish(driver(500))
            found = scrape(port)
            done = (pick(found, "teleop_driver_ticks_total", role="leader") is not None
                    and pick(found, "teleop_interventions_total", kind="intervention", checkpoint="act-v3",
                             operator="ana") == 1 and (pick(found, "teleop_policy_seconds_total") or 0) >= 0.999)
            return found if done else None

        found = wait_for(counted, 30, "the rig's messages counted", poll_s=0.2)
        assert pick(found, "teleop_driver_ticks_total", rig="rig_a", role="leader") == 500  # rig_b's 10000: not ours
        assert pick(found, "teleop_driver_overruns_total", role="leader") == 2
        assert pick(found, "teleop_bus_read_latency_seconds_count", role="leader") == 4
        assert pick(found, "teleop_intervention_triggers_total", trigger="too_slow", task="pick") == 1
        assert pick(found, "teleop_policy_seconds_total", checkpoint="act-v3") == pytest.approx(1.0, abs=1e-6)
        assert pick(found, "teleop_session_info", rig="rig_a", operator="ana", task="pick", checkpoint="act-v3") == 1
        assert (pick(found, "teleop_disk_free_bytes") or 0) > 0
    finally:
        spinner.shutdown()
        metrics.close()
        for node in (metrics, rig_a, rig_b):
            node.destroy_node()


def test_an_address_in_use_is_an_error_the_session_survives(context: Context) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        node = MetricsNode(context=context, parameter_overrides=[Parameter("address", value=address)])
        try:
            assert node.server is None and address in node.error and "metrics:=" in node.error
        finally:
            node.close()
            node.destroy_node()


def test_a_publisher_whose_node_is_not_known_yet_is_looked_up_again(context: Context,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """rmw knows an endpoint before its node (its first message once came with the namespace
    `_NODE_NAMESPACE_UNKNOWN_`, 2 runs in 5): remembered as such, that rig's teleop status was never
    counted and its policy seconds stayed 0 in the two-rig Prometheus test (test_namespaces.py)."""
    from rclpy.topic_endpoint_info import TopicEndpointInfo

    from teleop_flywheel.ros.nodes import metrics as module

    monkeypatch.setattr(module, "LOOKUP_EVERY_S", 0.0)
    node = MetricsNode(namespace="/rig_a", context=context, parameter_overrides=[Parameter("address", value="off")])
    gid = list(range(16))
    answers = iter([module.UNKNOWN_NAMESPACE, "/rig_a"])
    monkeypatch.setattr(node, "get_publishers_info_by_topic", lambda _topic: [
        TopicEndpointInfo(node_name="leader_arm", node_namespace=next(answers), endpoint_gid=gid)])
    info = {"publisher_gid": {"data": bytes(gid)}}

    def driver(ticks: int) -> DiagnosticArray:
        return diag_array([diag_status("leader_arm: leader arm", "OK", "ok", {
            "role": "leader", "rate_hz": 200.0, "target_rate_hz": 200.0, "ticks": ticks, "overruns": 0,
            "read_errors": 0, "reads": 0, "read_sum_ms": 0.0, **{f"read_le_{le:g}_ms": 0 for le in (
                0.5, 1.0, 2.0, 3.0, 5.0, 10.0, 20.0, 50.0, 100.0)}})])

    try:
        node._on_diagnostics(driver(100), info)  # not attributable yet: not counted, not remembered
        node._on_diagnostics(driver(300), info)  # the graph knows its node now
        text = node.model.exposition().decode()
        (ticks,) = [s.value for f in text_string_to_metric_families(text) for s in f.samples
                    if s.name == "teleop_driver_ticks_total"]
        assert ticks == 300
    finally:
        node.destroy_node()
