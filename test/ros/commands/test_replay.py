"""`teleop-flywheel replay --ros`: a bag republished onto a real graph, its recorded QoS kept."""
from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support.replay_bags import STEP_NS, T0, N, make_bag

from teleop_flywheel.recording.mcap.player import BagSource


def _drain(rclpy: Any, node: Any, done: Callable[[], bool]) -> None:
    """Take what the player sent before it exited and is still queued: until `done` says all of it
    came, or a second (then the test's own assertion says what is missing)."""
    deadline = time.monotonic() + 1.0
    while not done() and time.monotonic() < deadline:
        rclpy.spin_once(node, timeout_sec=0.05)


def test_ros_republish_reaches_a_subscriber(tmp_path: Path) -> None:
    rclpy = pytest.importorskip("rclpy")
    from std_msgs.msg import String


    bag = make_bag(tmp_path)
    received: list[str] = []
    rclpy.init()
    try:
        node = rclpy.create_node("replay_listener")
        from teleop_flywheel.ros.nodes.common import STREAM_QOS

        node.create_subscription(String, "/chatter", lambda m: received.append(m.data), STREAM_QOS)
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "teleop_flywheel.cli",
                "replay",
                str(bag),
                "--ros",
                "--rate",
                "2",
                "--wait-for-subscribers",
                "1",
            ]
        )
        deadline = time.monotonic() + 30
        while proc.poll() is None and time.monotonic() < deadline:
            rclpy.spin_once(node, timeout_sec=0.05)
        _drain(rclpy, node, lambda: len(received) >= N)
        assert proc.wait(5) == 0
        node.destroy_node()
    finally:
        rclpy.shutdown()
    # Playback waited for the subscriber to match, so every message arrives, in order.
    assert received == [f"m{i}" for i in range(N)]


def make_latched_bag(root: Path) -> Path:
    """A stream (/chatter, volatile) and a latched topic (/teleop/intervention, transient-local),
    each with the QoS its publisher offered in the channel metadata, as rosbag2 and our recorder write it."""
    from mcap.writer import Writer

    from teleop_flywheel.recording.mcap.cdr import string_cdr
    from teleop_flywheel.recording.mcap.metadata import Qos, qos_yaml
    from teleop_flywheel.recording.mcap.msgdefs import definition

    bag = root / "latched"
    bag.mkdir()
    sd = definition("std_msgs/msg/String")
    with (bag / "latched_0.mcap").open("wb") as f:
        writer = Writer(f)
        writer.start(profile="ros2")
        schema = writer.register_schema(name=sd.type_name, encoding="ros2msg", data=sd.text.encode())
        chatter = writer.register_channel("/chatter", "cdr", schema,
                                          {"offered_qos_profiles": qos_yaml([Qos(depth=50)])})
        events = writer.register_channel("/teleop/intervention", "cdr", schema, {
            "offered_qos_profiles": qos_yaml([Qos(depth=20, durability="transient_local")])})
        for i in range(N):
            t = T0 + i * STEP_NS
            writer.add_message(chatter, log_time=t, data=string_cdr(f"m{i}"), publish_time=t)
            if i in (0, 10, 20):
                writer.add_message(events, log_time=t, data=string_cdr(f'{{"id": {i}}}'), publish_time=t)
        writer.finish()
    return bag


def test_ros_republish_keeps_recorded_qos_and_waits_for_subscribers(tmp_path: Path) -> None:
    """`replay --ros` (no options) publishes the latched topic transient-local, as recorded, so the
    console's transient-local subscriber matches it; and it waits for subscribers: ones created
    seconds after the start still get the first message."""
    rclpy = pytest.importorskip("rclpy")
    from rclpy.qos import DurabilityPolicy
    from std_msgs.msg import String

    from teleop_flywheel.ros.nodes.common import LATCHED_QOS, STREAM_QOS
    from teleop_flywheel.ros.session.republish import recorded_qos

    bag = make_latched_bag(tmp_path)
    src = BagSource(bag)
    by_topic = {ch.topic: ch for ch in src.channels.values()}
    assert recorded_qos(by_topic["/teleop/intervention"]).durability == "transient_local"
    assert recorded_qos(by_topic["/chatter"]).durability == "volatile"
    proc = subprocess.Popen([sys.executable, "-m", "teleop_flywheel.cli", "replay", str(bag), "--ros", "--rate", "2"],
                            stdout=subprocess.PIPE, text=True)
    chatter: list[str] = []
    events: list[str] = []
    rclpy.init()
    try:
        assert "waiting for subscribers" in proc.stdout.readline()  # type: ignore[union-attr]
        time.sleep(2.0)  # discovery long done: without waiting, the first second would be lost
        node = rclpy.create_node("replay_console_like")
        node.create_subscription(String, "/teleop/intervention", lambda m: events.append(m.data), LATCHED_QOS)
        node.create_subscription(String, "/chatter", lambda m: chatter.append(m.data), STREAM_QOS)
        deadline = time.monotonic() + 30
        offered = []
        while proc.poll() is None and time.monotonic() < deadline:
            rclpy.spin_once(node, timeout_sec=0.05)
            offered = offered or node.get_publishers_info_by_topic("/teleop/intervention")
        _drain(rclpy, node, lambda: len(chatter) >= N and len(events) >= 3)
        assert proc.wait(5) == 0
        node.destroy_node()
    finally:
        if proc.poll() is None:
            proc.kill()
        rclpy.shutdown()
    assert offered and offered[0].qos_profile.durability == DurabilityPolicy.TRANSIENT_LOCAL
    assert events == ['{"id": 0}', '{"id": 10}', '{"id": 20}']
    assert chatter == [f"m{i}" for i in range(N)]
