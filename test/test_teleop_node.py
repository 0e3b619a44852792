"""The teleop node with real rclpy publishers: takeover on the pedal, labels, mode service."""
from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable

import pytest

rclpy = pytest.importorskip("rclpy")

from rclpy.executors import MultiThreadedExecutor  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402
from sensor_msgs.msg import JointState, Joy  # noqa: E402
from std_msgs.msg import String  # noqa: E402
from std_srvs.srv import Trigger  # noqa: E402

from teleop_flywheel.clock import fill_stamp, now_ns  # noqa: E402
from teleop_flywheel.labels import TRIGGER_LABELS, trigger_code  # noqa: E402
from teleop_flywheel.nodes.common import LATCHED_QOS, STREAM_QOS, joint_state  # noqa: E402
from teleop_flywheel.nodes.teleop import TeleopNode  # noqa: E402
from teleop_flywheel.so101 import JOINT_NAMES  # noqa: E402


@pytest.fixture()
def graph():
    rclpy.init()
    teleop = TeleopNode(parameter_overrides=[Parameter("mode", value="policy"),
                                             Parameter("blend_duration_ms", value=150.0)])
    probe = rclpy.create_node("teleop_probe")
    ex = MultiThreadedExecutor(num_threads=4)
    ex.add_node(teleop)
    ex.add_node(probe)
    thread = threading.Thread(target=ex.spin, daemon=True)
    thread.start()
    yield teleop, probe
    ex.shutdown()
    teleop.destroy_node()
    probe.destroy_node()
    rclpy.shutdown()


class Probe:
    """The probe node's side: inputs to the teleop node, and everything it publishes."""

    def __init__(self, probe) -> None:
        self.commands: list[tuple[int, float]] = []  # (tick stamp, joint 0)
        self.authority: list[list[float]] = []
        self.leader_cmds: list[int] = []
        self.events: list[dict] = []
        probe.create_subscription(JointState, "/follower/joint_command", lambda m: self.commands.append(
            (m.header.stamp.sec * 10**9 + m.header.stamp.nanosec, m.position[0])), STREAM_QOS)
        probe.create_subscription(JointState, "/teleop/authority", lambda m: self.authority.append(list(m.position)),
                                  STREAM_QOS)
        probe.create_subscription(JointState, "/leader/joint_command", lambda m: self.leader_cmds.append(len(m.position)),
                                  STREAM_QOS)
        probe.create_subscription(String, "/teleop/intervention", lambda m: self.events.append(json.loads(m.data)),
                                  LATCHED_QOS)
        self.leader = probe.create_publisher(JointState, "/leader/joint_states", STREAM_QOS)
        self.policy = probe.create_publisher(JointState, "/policy/joint_command", STREAM_QOS)
        self.follower = probe.create_publisher(JointState, "/follower/joint_states", STREAM_QOS)
        self.pedal = probe.create_publisher(Joy, "/pedal/joy", STREAM_QOS)
        deadline = time.monotonic() + 20
        while self.leader.get_subscription_count() == 0 and time.monotonic() < deadline:
            time.sleep(0.05)

    @property
    def alpha(self) -> float | None:
        return self.authority[-1][0] if self.authority else None

    def joy(self, buttons: list[int]) -> None:
        """A /pedal/joy message as the pedal node publishes it: buttons[0] takeover, [1..5] labels."""
        msg = Joy()
        fill_stamp(msg.header.stamp, now_ns())
        msg.buttons = buttons
        self.pedal.publish(msg)

    def drive(self, until: Callable[[], bool], what: str, buttons: list[int] | None = None,
              timeout: float = 60.0) -> None:
        """Feed policy 0.0, leader 0.2, follower 0.0 (and the pedal state) until `until()` holds.

        The pedal state is re-sent every loop: a repeated state is idempotent, a lost sample cannot
        stall. Waits for conditions, not fixed times: the machine is loaded and the node may lag.
        """
        deadline = time.monotonic() + timeout
        while not until():
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            t = now_ns()
            self.policy.publish(joint_state(JOINT_NAMES, [0.0] * 6, t))
            self.leader.publish(joint_state(JOINT_NAMES, [0.2] * 6, t))
            self.follower.publish(joint_state(JOINT_NAMES, [0.0] * 6, t))
            if buttons is not None:
                self.joy(buttons)
            time.sleep(0.005)


UP, DOWN = [0] * 6, [1] + [0] * 5


def label_press(down: bool, label: str) -> list[int]:
    buttons = [1 if down else 0] + [0] * 5
    buttons[trigger_code(label)] = 1  # code = 1 + index in TRIGGER_LABELS = the Joy button
    return buttons


def test_takeover_blends_labels_and_releases_the_leader(graph) -> None:
    _teleop, probe_node = graph
    probe = Probe(probe_node)
    label = probe_node.create_client(Trigger, "/teleop/label/wrong_grasp")
    assert label.wait_for_service(timeout_sec=20)
    start = time.monotonic()
    probe.drive(lambda: bool(probe.leader_cmds) and time.monotonic() - start > 0.8, "leader tracking")
    probe.drive(lambda: probe.alpha == pytest.approx(1.0) and bool(probe.commands)
                and probe.commands[-1][1] == pytest.approx(0.2, abs=1e-6), "takeover", DOWN)
    probe.drive(lambda: probe.alpha == 0.0, "hand-back", UP)
    future = label.call_async(Trigger.Request())
    deadline = time.monotonic() + 10
    while not future.done() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert future.result().success, future.result().message
    time.sleep(0.3)

    alphas = [a[0] for a in probe.authority]
    assert min(alphas) == 0.0 and max(alphas) == pytest.approx(1.0)
    assert any(0.05 < a < 0.95 for a in alphas), "alpha must pass through intermediate values (blended)"
    values = [v for _t, v in sorted(probe.commands)]  # executor threads may deliver out of order; order by tick stamp
    assert max(values) == pytest.approx(0.2, abs=1e-6) and values[0] == pytest.approx(0.0, abs=1e-6)
    # No hard switch: the 0.2 rad gap is spread over the 150 ms ramp (a switch through the 0.05 rad
    # max step would cross it in ~4 ticks = 20 ms). Measured in tick stamps, so lost samples don't matter.
    ordered = sorted(probe.commands)
    t_lo = next(t for t, v in ordered if v > 0.02)
    t_hi = next(t for t, v in ordered if t > t_lo and v > 0.18)
    assert t_hi - t_lo > 0.3 * 150e6, f"rise took {(t_hi - t_lo) / 1e6:.1f} ms: a switch, not a blend"
    assert 0 in probe.leader_cmds and 6 in probe.leader_cmds  # tracked the follower, then released at pedal-down
    events = probe.events
    assert events[-1]["id"] == 1 and events[-1]["end_ns"] and events[-1]["trigger"] == "wrong_grasp"
    assert any(a[2] == 1.0 for a in probe.authority), "authority carries the intervention id during the takeover"


def test_trigger_label_from_pedal_buttons(graph) -> None:
    """Labels as the pedal node sends them: a Joy pulse on buttons[1 + index], pedal state in buttons[0]."""
    _teleop, probe_node = graph
    probe = Probe(probe_node)
    probe.drive(lambda: bool(probe.leader_cmds), "policy driving, leader tracking")
    # Before any takeover there is nothing to label: the press is refused (no crash, no label kept).
    probe.joy(label_press(False, "wrong_object"))
    probe.joy(UP)
    probe.drive(lambda: bool(probe.events), "intervention start", DOWN)
    assert probe.events[0] == {"id": 1, "start_ns": probe.events[0]["start_ns"], "end_ns": None, "trigger": None}
    probe.drive(lambda: probe.alpha == pytest.approx(1.0), "human authority", DOWN)

    probe.joy(label_press(True, "too_slow"))  # pressed while holding the takeover pedal
    probe.drive(lambda: probe.events[-1]["trigger"] == "too_slow", "label from the pedal", DOWN)
    probe.drive(lambda: probe.events[-1]["end_ns"] is not None and probe.alpha == 0.0, "hand-back", UP)
    assert [e["id"] for e in probe.events] == [1] * len(probe.events), "one intervention, no extra from the label"
    assert probe.events[-1]["trigger"] == "too_slow"
    codes = {a[3] for a in probe.authority}
    assert float(TRIGGER_LABELS.index("too_slow") + 1) in codes and float(trigger_code("wrong_object")) not in codes
