"""Policies: scripted waypoints (smooth, fails on schedule), replay of a recorded bag, plugin lookup,
and the policy node tagging every command with its checkpoint id."""
from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest

from teleop_flywheel.policies.base import load_policy
from teleop_flywheel.policies.scripted import ScriptedPolicy

S = 1_000_000_000


def test_scripted_is_smooth_and_starts_from_the_current_state() -> None:
    pol = ScriptedPolicy(move_s=1.0)
    start = [0.1] * 6
    assert pol.act(None, 0) is None
    out = [pol.act(start, k * S // 200) for k in range(0, 800)]
    assert out[0] == pytest.approx(start)
    arr = np.array(out)
    vel = np.diff(arr, axis=0)
    assert np.abs(np.diff(vel, axis=0)).max() < 1e-3  # no velocity steps, even between moves
    assert arr[200] == pytest.approx(pol.waypoints[0])


def test_scripted_fails_on_schedule() -> None:
    pol = ScriptedPolicy(fail_every=2, fail_offset_rad=0.3)
    assert pol.target(0) == pol.waypoints[0]
    assert pol.target(1) == pytest.approx([w + 0.3 for w in pol.waypoints[1]])


def test_scripted_from_a_bad_file_names_it(tmp_path: Path) -> None:
    bad = tmp_path / "policy.yaml"
    bad.write_text("waypoints: [[1, 2]]\n")
    with pytest.raises(ValueError, match="policy.yaml: waypoints"):
        load_policy("scripted", str(bad), "x")
    with pytest.raises(ValueError, match="unknown policy 'gpt'.*scripted, replay"):
        load_policy("gpt", "", "x")


def test_replay_plays_the_recorded_commands(tmp_path: Path) -> None:
    from teleop_flywheel.data.bag import open_bag
    from teleop_flywheel.data.synthetic_session import SessionSpec, write_session

    truth = write_session(tmp_path / "ep", SessionSpec(duration_s=2.0, cameras=()))
    pol = load_policy("replay", str(truth.bag), "")
    js = open_bag(truth.bag).joint_state("/follower/joint_command")
    assert pol.checkpoint_id.startswith("replay:")
    t0 = 7 * S
    pol.reset(None, t0)
    k = len(js.stamps_ns) // 2
    offset = int(js.stamps_ns[k] - js.stamps_ns[0])
    assert pol.act(None, t0 + offset) == pytest.approx(list(js.position[k]))


def test_policy_node_tags_commands_with_the_checkpoint() -> None:
    rclpy = pytest.importorskip("rclpy")
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.parameter import Parameter
    from sensor_msgs.msg import JointState

    from teleop_flywheel.clock import now_ns
    from teleop_flywheel.nodes.common import STREAM_QOS, joint_state
    from teleop_flywheel.nodes.policy import PolicyNode
    from teleop_flywheel.so101 import JOINT_NAMES

    rclpy.init()
    node = PolicyNode(parameter_overrides=[Parameter("checkpoint_id", value="ckpt-42")])
    got: list[JointState] = []
    node.create_subscription(JointState, "/policy/joint_command", got.append, STREAM_QOS)
    state = node.create_publisher(JointState, "/follower/joint_states", STREAM_QOS)
    ex = SingleThreadedExecutor()
    ex.add_node(node)
    threading.Thread(target=ex.spin, daemon=True).start()
    try:
        deadline = time.monotonic() + 15
        while len(got) < 5 and time.monotonic() < deadline:
            state.publish(joint_state(JOINT_NAMES, [0.0] * 6, now_ns()))
            time.sleep(0.02)
    finally:
        ex.shutdown()
        node.destroy_node()
        rclpy.shutdown()
    assert len(got) >= 5
    assert {m.header.frame_id for m in got} == {"ckpt-42"}
    assert list(got[0].name) == list(JOINT_NAMES)
