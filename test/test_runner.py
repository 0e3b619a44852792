"""The in-process runner starts a real graph: simulated arms (sim-bus processes), arm drivers,
a synthetic camera and the recorder; an episode recorded through it reads back."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

pytest.importorskip("rclpy")

from teleop_flywheel.recording.info import bag_info  # noqa: E402
from teleop_flywheel.ros.session.graph import CameraSpec, Graph, SessionConfig, build_graph  # noqa: E402
from teleop_flywheel.ros.session.runner import Session, node_class  # noqa: E402


def _wait(cond, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_runner_records_an_episode_from_simulated_arms(tmp_path: Path) -> None:
    from std_srvs.srv import Trigger

    cfg = SessionConfig(cameras=(CameraSpec("front", source="synthetic", device="synthetic", fps=15.0),),
                        output_dir=str(tmp_path / "bags"), sim_dir=str(tmp_path), task="mirror test")
    full = build_graph("sim", cfg)
    keep = {"leader_arm", "follower_arm", "camera_front", "recorder"}
    graph = Graph("sim", tuple(n for n in full.nodes if n.name in keep), full.sim_arms)
    with Session(graph) as session:
        assert set(session.nodes) == keep
        # Every parameter the graph gives is one the node declares (no silent typos).
        for spec in graph.nodes:
            node = session.nodes[spec.name]
            undeclared = [k for k in spec.parameters if not node.has_parameter(k)]
            assert not undeclared, f"{spec.name} does not declare {undeclared}"
        rec = session.nodes["recorder"]
        client = rec.create_client(Trigger, "/recorder/start")
        assert client.wait_for_service(timeout_sec=20)
        future = client.call_async(Trigger.Request())
        _wait(future.done, 20, "recorder start reply")
        assert future.result().success, future.result().message
        time.sleep(3.0)
        stop = rec.create_client(Trigger, "/recorder/stop")
        future = stop.call_async(Trigger.Request())
        _wait(future.done, 20, "recorder stop reply")
        assert future.result().success, future.result().message
    bags = sorted((tmp_path / "bags").iterdir())
    assert len(bags) == 1
    info = bag_info(bags[0])
    counts = {t.name: t.count for t in info.topics}
    for topic in ("/leader/joint_states", "/follower/joint_states", "/cameras/front/image/compressed"):
        assert counts.get(topic, 0) > 10, f"{topic}: {counts.get(topic)} messages"
    assert not (tmp_path / "leader").exists(), "simulator links are removed at shutdown"



def test_every_graph_node_class_resolves() -> None:
    for kind in ("teleop", "rollout", "record", "sim"):
        for spec in build_graph(kind, SessionConfig(sim_dir="/tmp/tf_graph_probe")).nodes:
            try:
                cls = node_class(spec)
            except ModuleNotFoundError as exc:
                pytest.fail(f"{kind}: node {spec.name} -> {spec.target}: {exc}")
            assert cls.__name__ == spec.target.split(":")[1]
