"""Pedal: real struct input_event bytes through a FIFO into the real pedal node."""
from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from teleop_flywheel.pedal.events import EV_KEY, EV_SYN, EVENT, InputEvent, KeyMap, PedalState, decode, encode

MS = 1_000_000


def test_decode_matches_kernel_layout() -> None:
    assert EVENT.size == 24  # 64-bit Linux: 16-byte timeval + 2 + 2 + 4
    raw = encode(InputEvent(12_345_678_000, EV_KEY, 30, 1)) + encode(InputEvent(12_345_679_000, EV_SYN, 0, 0))
    events, rest = decode(raw + b"\x01\x02")
    assert events == [InputEvent(12_345_678_000, EV_KEY, 30, 1), InputEvent(12_345_679_000, EV_SYN, 0, 0)]
    assert rest == b"\x01\x02"


def test_debounce_ignores_bounce_and_keeps_event_time() -> None:
    st = PedalState(KeyMap(takeover=30, labels={48: "wrong_grasp"}, debounce_ms=30))
    t = 1_000 * MS
    for dt, value in ((0, 1), (5, 0), (9, 1), (12, 0)):  # bouncing contact, ends up
        st.feed(InputEvent(t + dt * MS, EV_KEY, 30, value))
    assert st.settle(t + 100 * MS) == []  # settled on "up": no handover
    st.feed(InputEvent(t + 200 * MS, EV_KEY, 30, 1))
    assert st.settle(t + 210 * MS) == []  # not held long enough yet
    assert st.settle(t + 240 * MS) == [("takeover", True, t + 200 * MS)]
    assert st.feed(InputEvent(t + 300 * MS, EV_KEY, 48, 1)) == [("label", "wrong_grasp", t + 300 * MS)]
    assert st.feed(InputEvent(t + 301 * MS, EV_KEY, 30, 2)) == []  # autorepeat is not a press


def test_keymap_rejects_unknown_labels(tmp_path: Path) -> None:
    bad = tmp_path / "pedal.yaml"
    bad.write_text("takeover: 30\nlabels:\n  48: bored\n")
    with pytest.raises(ValueError, match="pedal.yaml.*unknown trigger label"):
        KeyMap.load(bad)


def test_pedal_node_reads_a_fifo(tmp_path: Path) -> None:
    rclpy = pytest.importorskip("rclpy")
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.parameter import Parameter
    from sensor_msgs.msg import Joy

    from teleop_flywheel.clock import now_ns
    from teleop_flywheel.nodes.common import STREAM_QOS
    from teleop_flywheel.nodes.pedal import PedalNode

    fifo = tmp_path / "pedal"
    os.mkfifo(fifo)
    rclpy.init()
    node = PedalNode(parameter_overrides=[Parameter("device", value=str(fifo))])
    got: list[tuple[int, list[int]]] = []
    node.create_subscription(Joy, "/pedal/joy", lambda m: got.append(
        (m.header.stamp.sec * 10**9 + m.header.stamp.nanosec, list(m.buttons))), STREAM_QOS)
    ex = SingleThreadedExecutor()
    ex.add_node(node)
    spin = threading.Thread(target=ex.spin, daemon=True)
    spin.start()
    try:
        writer = os.open(fifo, os.O_WRONLY)
        t_down = (now_ns() - 5 * MS) // 1000 * 1000  # kernel event time (µs resolution), before we read it
        os.write(writer, encode(InputEvent(t_down, EV_KEY, 30, 1)) + encode(InputEvent(t_down, EV_SYN, 0, 0)))
        deadline = time.monotonic() + 10
        while not got and time.monotonic() < deadline:
            time.sleep(0.02)
        os.write(writer, encode(InputEvent(now_ns(), EV_KEY, 3, 1)))  # KEY_2 = wrong_grasp in config/pedal.yaml
        deadline = time.monotonic() + 10
        while len(got) < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        os.close(writer)
    finally:
        node.close()
        ex.shutdown()
        node.destroy_node()
        rclpy.shutdown()
    assert got[0] == (t_down, [1, 0, 0, 0, 0, 0])
    assert got[1][1] == [1, 0, 1, 0, 0, 0] and got[2][1] == [1, 0, 0, 0, 0, 0]
