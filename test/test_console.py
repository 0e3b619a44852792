"""Operator console: the view model as plain functions, and the real console driven in a pty."""
from __future__ import annotations

import json
import os
import pty
import re
import sys

import pytest
from terminal import read_until

from teleop_flywheel.core.labels import TRIGGER_LABELS
from teleop_flywheel.ros.session.console_view import KEYS, ConsoleState


def test_view_shows_authority_streams_and_labels() -> None:
    st = ConsoleState(session="sim")
    st.on_authority(["alpha", "mode", "intervention_id", "trigger"], [0.42, 1.0, 3.0, 0.0])
    st.on_recorder_status(json.dumps({
        "state": "recording", "episode": "ep_0007", "elapsed_s": 12.5, "outcome": "unset",
        "topics": {"/follower/joint_states": {"rate_hz": 200.0, "count": 2500, "drops": 2}},
        "missing_topics": ["/cameras/wrist/image/compressed"], "disk_free_bytes": 5e9,
    }))
    st.on_diagnostic("follower_arm", "ERROR", "port /dev/ttyACM1 unplugged", {})
    text = "\n".join(st.render())
    assert "mode policy" in text and "alpha 0.42" in text
    assert "intervention 3" in text and "UNLABELLED" in text
    assert "ep_0007" in text and "recording" in text
    assert re.search(r"/follower/joint_states\s+200.0\s+2500\s+2", text)
    assert "/cameras/wrist/image/compressed" in text and "MISSING" in text
    assert "! follower_arm: ERROR port /dev/ttyACM1 unplugged" in text


def test_keys_cover_every_trigger_label_and_lifecycle() -> None:
    assert {arg for a, arg in KEYS.values() if a == "trigger"} == set(TRIGGER_LABELS)
    assert {a for a, _ in KEYS.values()} >= {"start", "stop", "discard", "outcome", "mode", "quit", "pedal"}


def test_console_in_a_pty_starts_and_stops_a_real_recorder(tmp_path) -> None:
    pytest.importorskip("rclpy")
    recorder_mod = pytest.importorskip("teleop_flywheel.ros.nodes.recorder", reason="recorder node not available")
    import threading

    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.parameter import Parameter

    rclpy.init()
    from sensor_msgs.msg import Joy

    from teleop_flywheel.ros.nodes.common import STREAM_QOS

    pid, fd = pty.fork()
    if pid == 0:
        os.execv(sys.executable, [sys.executable, "-m", "teleop_flywheel.cli", "console", "--session", "pty-test"])
    node = executor = None
    try:
        # The operator presses start before the recorder exists: the key waits for the service
        # (a recorder's status can also reach the console before its services are discovered).
        read_until(fd, r"teleop_flywheel console", 60)
        os.write(fd, b"s")
        read_until(fd, r"waiting for /recorder/start", 30)
        node = recorder_mod.RecorderNode(parameter_overrides=[
            Parameter("output_dir", value=str(tmp_path)), Parameter("topics", value=["/chatter"]),
        ])
        joys: list[list[int]] = []
        node.create_subscription(Joy, "/pedal/joy", lambda m: joys.append(list(m.buttons)), STREAM_QOS)
        executor = SingleThreadedExecutor()
        executor.add_node(node)
        threading.Thread(target=executor.spin, daemon=True).start()
        read_until(fd, r"recording: recording", 30)
        os.write(fd, b"y")
        read_until(fd, r"outcome: success", 30)
        os.write(fd, b" ")  # the terminal fallback pedal
        read_until(fd, r"takeover \(pedal down\)", 30)
        os.write(fd, b"e")
        read_until(fd, r"recording: idle", 30)
        os.write(fd, b"q")
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass
        if node is not None:
            node.close()
            executor.shutdown()
            node.destroy_node()
        rclpy.shutdown()
    assert joys and joys[0][0] == 1, "space bar must press the takeover on /pedal/joy"
    bags = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert len(bags) == 1, f"expected one saved episode, found {bags}"
    assert "outcome: success" in (bags[0] / "metadata.yaml").read_text()
