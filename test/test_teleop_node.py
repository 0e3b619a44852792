"""The teleop node with real rclpy publishers: takeover on the pedal, labels, mode service."""
from __future__ import annotations

import json
import threading
import time

import pytest

rclpy = pytest.importorskip("rclpy")

from rclpy.executors import MultiThreadedExecutor  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402
from sensor_msgs.msg import JointState, Joy  # noqa: E402
from std_msgs.msg import String  # noqa: E402
from std_srvs.srv import Trigger  # noqa: E402

from teleop_flywheel.clock import fill_stamp, now_ns  # noqa: E402
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


def test_takeover_blends_labels_and_releases_the_leader(graph) -> None:
    teleop, probe = graph
    commands: list[tuple[int, float]] = []
    authority: list[list[float]] = []
    leader_cmds: list[int] = []
    events: list[dict] = []
    probe.create_subscription(JointState, "/follower/joint_command",
                              lambda m: commands.append((m.header.stamp.sec * 10**9 + m.header.stamp.nanosec, m.position[0])), STREAM_QOS)
    probe.create_subscription(JointState, "/teleop/authority", lambda m: authority.append(list(m.position)), STREAM_QOS)
    probe.create_subscription(JointState, "/leader/joint_command", lambda m: leader_cmds.append(len(m.position)), STREAM_QOS)
    probe.create_subscription(String, "/teleop/intervention", lambda m: events.append(json.loads(m.data)), LATCHED_QOS)
    leader = probe.create_publisher(JointState, "/leader/joint_states", STREAM_QOS)
    policy = probe.create_publisher(JointState, "/policy/joint_command", STREAM_QOS)
    follower = probe.create_publisher(JointState, "/follower/joint_states", STREAM_QOS)
    pedal = probe.create_publisher(Joy, "/pedal/joy", STREAM_QOS)
    label = probe.create_client(Trigger, "/teleop/label/wrong_grasp")
    assert label.wait_for_service(timeout_sec=20)
    deadline = time.monotonic() + 20
    while leader.get_subscription_count() == 0 and time.monotonic() < deadline:
        time.sleep(0.05)

    def press(down: bool) -> None:
        joy = Joy()
        fill_stamp(joy.header.stamp, now_ns())
        joy.buttons = [1 if down else 0] + [0] * 5
        pedal.publish(joy)

    # Wait for conditions, not fixed times: the machine is loaded and the node may lag.
    start = time.monotonic()
    phase = 0
    while phase < 3 and time.monotonic() - start < 60.0:
        t = now_ns()
        policy.publish(joint_state(JOINT_NAMES, [0.0] * 6, t))
        leader.publish(joint_state(JOINT_NAMES, [0.2] * 6, t))
        follower.publish(joint_state(JOINT_NAMES, [0.0] * 6, t))
        if phase in (1, 2):
            press(phase == 1)  # re-sent every loop: a repeated state is idempotent, a lost sample cannot stall
        alpha = authority[-1][0] if authority else None
        if phase == 0 and leader_cmds and time.monotonic() - start > 0.8:
            press(True)
            phase = 1
        elif phase == 1 and alpha == pytest.approx(1.0) and commands and commands[-1][1] == pytest.approx(0.2, abs=1e-6):
            press(False)
            phase = 2
        elif phase == 2 and alpha == 0.0:
            phase = 3
        time.sleep(0.005)
    assert phase == 3, f"takeover and hand-back did not complete (phase {phase})"
    future = label.call_async(Trigger.Request())
    deadline = time.monotonic() + 10
    while not future.done() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert future.result().success, future.result().message
    time.sleep(0.3)

    alphas = [a[0] for a in authority]
    assert min(alphas) == 0.0 and max(alphas) == pytest.approx(1.0)
    assert any(0.05 < a < 0.95 for a in alphas), "alpha must pass through intermediate values (blended)"
    values = [v for _t, v in sorted(commands)]  # executor threads may deliver out of order; order by tick stamp
    assert max(values) == pytest.approx(0.2, abs=1e-6) and values[0] == pytest.approx(0.0, abs=1e-6)
    # No hard switch: the 0.2 rad gap is spread over the 150 ms ramp (a switch through the 0.05 rad
    # max step would cross it in ~4 ticks = 20 ms). Measured in tick stamps, so lost samples don't matter.
    ordered = sorted(commands)
    t_lo = next(t for t, v in ordered if v > 0.02)
    t_hi = next(t for t, v in ordered if t > t_lo and v > 0.18)
    assert t_hi - t_lo > 0.3 * 150e6, f"rise took {(t_hi - t_lo) / 1e6:.1f} ms: a switch, not a blend"
    assert 0 in leader_cmds and 6 in leader_cmds  # tracked the follower, then released at pedal-down
    assert events[-1]["id"] == 1 and events[-1]["end_ns"] and events[-1]["trigger"] == "wrong_grasp"
    assert any(a[2] == 1.0 for a in authority), "authority carries the intervention id during the takeover"
