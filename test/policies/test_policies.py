"""Policies: scripted waypoints (smooth, fails on schedule), replay of a recorded bag and of a LeRobot
dataset episode, plugin lookup without torch, and the policy node tagging every command with its
checkpoint id."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from support.imports import loaded_after
from support.procs import node_cmd

from teleop_flywheel.policies import load_policy
from teleop_flywheel.policies.scripted import ScriptedPolicy

S = 1_000_000_000


def test_scripted_is_smooth_and_starts_from_the_current_state() -> None:
    pol = ScriptedPolicy(move_s=1.0)
    start = [0.1] * 6
    assert pol.act(None, 0) is None
    out = [pol.act(start, k * S // 200) for k in range(800)]
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
    with pytest.raises(ValueError, match="unknown policy .gpt.; available: lerobot, replay, scripted"):
        load_policy("gpt", "", "x")


def test_replay_plays_the_recorded_commands(tmp_path: Path) -> None:
    from teleop_flywheel.recording.mcap.reader import open_bag
    from teleop_flywheel.testing.synthetic_session import SessionSpec, write_session

    truth = write_session(tmp_path / "ep", SessionSpec(duration_s=2.0, cameras=()))
    pol = load_policy("replay", str(truth.bag), "")
    js = open_bag(truth.bag).joint_state("/follower/joint_command")
    assert pol.checkpoint_id.startswith("replay:")
    t0 = 7 * S
    pol.reset(None, t0)
    k = len(js.stamps_ns) // 2
    offset = int(js.stamps_ns[k] - js.stamps_ns[0])
    assert pol.act(None, t0 + offset) == pytest.approx(list(js.position[k]))


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Path]]:
    """Two synthetic sessions converted by the project's own converter (state + action, no camera)."""
    from teleop_flywheel.data.convert.converter import convert
    from teleop_flywheel.testing.synthetic_session import SessionSpec, write_session

    root = tmp_path_factory.mktemp("replay")
    bags = [root / f"ep{i}" for i in range(2)]
    for i, bag in enumerate(bags):
        write_session(bag, SessionSpec(cameras=(), seed=10 + i))
    res = convert(bags, root / "ds", workers=1, progress=False)
    assert len(res.converted[str(root / "ds")]) == 2, res
    return root / "ds", bags


def test_replay_of_a_dataset_episode_plays_the_bag_commands_on_the_frame_grid(
        converted: tuple[Path, list[Path]]) -> None:
    from teleop_flywheel.core.calibration import load_calibration
    from teleop_flywheel.core.so101 import JOINT_NAMES
    from teleop_flywheel.data.convert.align import hold, make_grid
    from teleop_flywheel.recording.mcap.reader import open_bag

    ds, bags = converted
    bag = open_bag(bags[1])
    command = bag.joint_state("/follower/joint_command").stream(list(JOINT_NAMES))
    grid = make_grid([bag.joint_state("/follower/joint_states").stream(list(JOINT_NAMES)), command], 30)
    idx, _ = hold(command, grid.times(1))  # the frame contract: action[k] = command in effect at t_{k+1}
    expected = command.values[idx].copy()
    # LeRobot's gripper unit (RANGE_0_100) clamps into the calibrated range; the body joints are lossless.
    expected[:, -1] = np.clip(expected[:, -1], *load_calibration(sim_follower())["gripper"].rad_range())

    pol = load_policy("replay", f"{ds}#1", "", simulated=True)  # the simulator's calibration, as converted
    assert pol.checkpoint_id == f"replay:{bag.episode_id[:12]}"  # the same tag as replaying the bag itself
    assert pol.cameras == ()
    t0 = 3 * S
    pol.reset(None, t0)
    for k in range(grid.n):
        start = t0 + round(k * S / 30)
        for t in (start, start + S // 60):  # the frame's first instant and its middle
            assert pol.act(None, t) == pytest.approx(list(expected[k]), abs=1e-5), f"frame {k}"
    assert pol.act(None, t0 + 3600 * S) == pytest.approx(list(expected[-1]), abs=1e-5)  # holds the last
    other = load_policy("replay", f"{ds}#0,calibration={sim_follower()}", "tag", simulated=True)
    assert other.checkpoint_id == "tag" and not np.allclose(other.positions[0], pol.positions[0])


def sim_follower() -> Path:
    from teleop_flywheel.core.calibration import sim_calibration_file

    return sim_calibration_file("follower")


def test_replay_dataset_bad_args_name_the_path_and_the_reason(converted: tuple[Path, list[Path]],
                                                              tmp_path: Path) -> None:
    ds, _ = converted
    cases = {
        f"{tmp_path}/nope#0": "nope: no such dataset directory",
        f"{ds}#2": "episode 2 out of range .*2 episodes, episode_index 0..1",
        f"{ds}#first": "#first: the episode must be an integer",
        str(ds): "a LeRobot dataset; name the episode",
        f"{ds}#0,speed=2": "option 'speed=2' is not one of calibration=",
        f"{ds}#0,calibration={tmp_path}/none.yaml": "none.yaml: cannot read calibration",
    }
    for args, reason in cases.items():
        with pytest.raises(ValueError, match=reason):
            load_policy("replay", args, "", simulated=True)
    no_action = tmp_path / "no_action"
    shutil.copytree(ds, no_action)
    info_path = no_action / "meta" / "info.json"
    info = json.loads(info_path.read_text())
    del info["features"]["action"]
    info_path.write_text(json.dumps(info))
    with pytest.raises(ValueError, match="no_action: dataset has no 'action' feature"):
        load_policy("replay", f"{no_action}#0", "", simulated=True)


def test_replay_of_a_dataset_on_a_real_follower_needs_the_followers_calibration(
        converted: tuple[Path, list[Path]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """LeRobot units through a simulator's offsets and ranges would put every joint of a real arm
    at the wrong angle: without `simulated` the file must be named, and no simulator's is taken."""
    from teleop_flywheel.core.calibration import sim_calibration_file
    from teleop_flywheel.core.resources import config_path

    ds, _ = converted
    with pytest.raises(ValueError, match=r"follower is not a simulator \(simulated: false\): add calibration=FILE "
                                         "to policy_args, naming the follower's own calibration"):
        load_policy("replay", f"{ds}#0", "")
    copy = tmp_path / "so101_follower.yaml"
    shutil.copy(sim_follower(), copy)  # the simulator's values under another name
    for sim in (sim_follower(), sim_calibration_file("leader"), copy):
        with pytest.raises(ValueError, match=re.escape(f"{sim}: a simulator's calibration, and the follower is not "
                                                       "a simulator (simulated: false): add calibration=FILE")):
            load_policy("replay", f"{ds}#0,calibration={sim}", "")
    monkeypatch.setenv("HOME", str(tmp_path))
    real = tmp_path / "so101_real.yaml"
    shutil.copy(config_path("calibration/example_real_follower.yaml"), real)
    on_rig = load_policy("replay", f"{ds}#0,calibration=~/so101_real.yaml", "")  # as a ROS parameter: no shell
    on_sim = load_policy("replay", f"{ds}#0", "", simulated=True)
    assert on_rig.positions.shape == on_sim.positions.shape
    assert not np.allclose(on_rig.positions, on_sim.positions, atol=1e-3)  # the rig's own offsets and ranges
    named_on_sim = load_policy("replay", f"{ds}#0,calibration={real}", "", simulated=True)
    np.testing.assert_array_equal(named_on_sim.positions, on_rig.positions)  # a named one wins on a simulator too

    # The policy node of a session not marked simulated: one line saying what to pass, exit 1.
    res = subprocess.run(node_cmd("policy", policy="replay", policy_args=f"{ds}#0"), capture_output=True,
                         text=True, timeout=120)
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 1 and len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
    assert lines[0].startswith(f"/policy: cannot load policy 'replay' with policy_args '{ds}#0': ") and \
        lines[0].endswith("add calibration=FILE to policy_args, naming the follower's own calibration (the file "
                          "its arm driver runs with; teleop-flywheel calibrate writes one)"), lines[0]


def test_plugins_are_imported_only_when_named() -> None:
    """Loading the project and the built-ins (and listing the plugins) imports neither torch nor LeRobot."""
    code = (
        "import teleop_flywheel.ros.nodes.policy\n"
        "from teleop_flywheel.policies import load_policy\n"
        "p = load_policy('scripted', '', '')\n"
        "assert p.checkpoint_id == 'scripted-v0' and p.act([0.0] * 6, 0) == [0.0] * 6\n"
        "try:\n"
        "    load_policy('gpt', '', '')\n"
        "except ValueError as exc:\n"
        "    assert 'lerobot, replay, scripted' in str(exc), exc  # the plugin is listed, not imported\n"
    )
    assert loaded_after(code, "torch", "lerobot", "teleop_flywheel.policies.lerobot_checkpoint") == []


def test_policy_node_tags_commands_with_the_checkpoint() -> None:
    rclpy = pytest.importorskip("rclpy")
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.parameter import Parameter
    from sensor_msgs.msg import JointState

    from teleop_flywheel.core.clock import now_ns
    from teleop_flywheel.core.so101 import JOINT_NAMES
    from teleop_flywheel.ros.nodes.common import STREAM_QOS, joint_state
    from teleop_flywheel.ros.nodes.policy import PolicyNode

    rclpy.init()
    node = PolicyNode(
        parameter_overrides=[Parameter("checkpoint_id", value="ckpt-42"), Parameter("simulated", value=True)]
    )
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


def test_policy_node_reset_service_and_run_time_swap(tmp_path: Path) -> None:
    """`/policy/reset` starts the policy over from the current state; setting policy/policy_args/
    checkpoint_id at run time loads the new policy, idle until a reset starts its episode, and one
    that cannot load is refused with the reason while the running policy keeps commanding."""
    rclpy = pytest.importorskip("rclpy")
    from rclpy.node import Node
    from rclpy.parameter import Parameter
    from rclpy.parameter_client import AsyncParameterClient
    from sensor_msgs.msg import JointState
    from std_srvs.srv import Trigger

    from teleop_flywheel.core.clock import now_ns
    from teleop_flywheel.core.so101 import JOINT_NAMES
    from teleop_flywheel.ros.nodes.common import STREAM_QOS, NodeSpinner, joint_state
    from teleop_flywheel.ros.nodes.policy import PolicyNode

    context = rclpy.Context()
    rclpy.init(context=context, args=[])
    spinner = NodeSpinner(context)
    node = PolicyNode(context=context, parameter_overrides=[Parameter("rate_hz", value=100),  # int: accepted
                                                            Parameter("simulated", value=True)])
    probe = Node("policy_probe", context=context)
    got: list[tuple[int, str, list[float]]] = []
    probe.create_subscription(JointState, "/policy/joint_command", lambda m: got.append(
        (m.header.stamp.sec * S + m.header.stamp.nanosec, m.header.frame_id, list(m.position))), STREAM_QOS)
    state_pub = probe.create_publisher(JointState, "/follower/joint_states", STREAM_QOS)
    params = AsyncParameterClient(probe, "policy")
    state = [0.1] * 6

    def wait(cond, what: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while not cond():
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            state_pub.publish(joint_state(JOINT_NAMES, state, now_ns()))
            time.sleep(0.02)

    def done(future):
        wait(future.done, "a reply")
        return future.result()

    spinner.add(node)
    spinner.add(probe)
    try:
        wait(lambda: any(f == "scripted-v0" and p != pytest.approx(state) for _t, f, p in got), "the policy moving")
        # reset: the next command starts from the follower's state again
        reset = probe.create_client(Trigger, "/policy/reset")
        assert reset.wait_for_service(timeout_sec=30)
        t_reset = now_ns()
        answer = done(reset.call_async(Trigger.Request()))
        assert answer.success and answer.message == "scripted-v0 restarted from the current state"
        wait(lambda: [p for t, _f, p in sorted(got) if t >= t_reset], "a command after the reset")
        after = [p for t, _f, p in sorted(got) if t >= t_reset]
        assert after[0] == pytest.approx(state, abs=1e-3)

        # swap to another scripted checkpoint with its own waypoints, all three parameters at once
        waypoints = tmp_path / "waypoints.yaml"
        waypoints.write_text("waypoints: [[0.7, 0.7, 0.7, 0.7, 0.7, 0.7]]\nmove_s: 0.5\n")
        assert params.wait_for_services(timeout_sec=30)
        result = done(params.set_parameters_atomically([
            Parameter("policy", value="scripted"), Parameter("policy_args", value=str(waypoints)),
            Parameter("checkpoint_id", value="ckpt-2")])).result
        assert result.successful, result.reason
        # loaded, and idle until its episode starts: the arm holds (the teleop node holds the last command)
        n = len(got)
        time.sleep(0.3)
        assert len(got) <= n + 1, got[n:]  # at most the tick that was under way at the swap
        answer = done(reset.call_async(Trigger.Request()))
        assert answer.success and answer.message == "ckpt-2 restarted from the current state"
        wait(
            lambda: got[-1][1] == "ckpt-2" and got[-1][2] == pytest.approx([0.7] * 6), "the new policy at its waypoint"
        )

        # a checkpoint that cannot be loaded: refused with the reason, the running policy unchanged
        result = done(params.set_parameters_atomically([
            Parameter("policy", value="replay"), Parameter("policy_args", value=str(tmp_path / "no_such_bag")),
            Parameter("checkpoint_id", value="ckpt-3")])).result
        assert not result.successful and "no_such_bag" in result.reason, result.reason
        n = len(got)
        wait(lambda: len(got) > n + 5, "commands after the refusal")
        assert {f for _t, f, _p in got[n:]} == {"ckpt-2"}
        assert node.get_parameter("checkpoint_id").value == "ckpt-2"
        assert node.get_parameter("policy_args").value == str(waypoints)
        # hand-back: α back at 0 after a takeover makes the running policy drop its plan, once
        authority = probe.create_publisher(JointState, "/teleop/authority", STREAM_QOS)

        def alpha(value: float) -> JointState:
            return joint_state(["alpha", "mode", "intervention_id", "trigger"], [value, 1.0, 1.0, 0.0], now_ns())

        for value in (0.0, 0.0, 0.4, 1.0, 1.0, 0.5, 0.0, 0.0):
            authority.publish(alpha(value))
            time.sleep(0.05)
        wait(lambda: node.plans_dropped >= 1, "drop_plan at hand-back")
        time.sleep(0.3)
        assert node.plans_dropped == 1 and node.policy.plans_dropped == 1  # type: ignore[attr-defined]
        # and the read-only rate cannot be changed
        (rate,) = done(params.set_parameters([Parameter("rate_hz", value=10.0)])).results
        assert not rate.successful and "read-only" in rate.reason
    finally:
        spinner.shutdown()
        node.destroy_node()
        probe.destroy_node()
        context.shutdown()


def test_scripted_drop_plan_restarts_the_move_under_way_from_the_present_state() -> None:
    pol = load_policy("scripted", "", "")
    start = [0.0] * 6
    first = pol.act(start, 0)
    assert first == pytest.approx(start)
    mid = pol.act(start, int(1.0e9))  # halfway through move 0 toward waypoint 0
    pol.drop_plan()
    moved = [0.9, -0.9, 0.9, -0.9, 0.9, -0.9]  # where the human left the arm
    assert pol.act(moved, int(1.2e9)) == pytest.approx(moved)  # continues from here, no jump back
    assert pol.act(moved, int(3.2e9)) == pytest.approx(pol.target(0))  # and still reaches its target
    assert mid != pytest.approx(moved)


def test_scripted_plays_the_clock_probe_at_every_reset(tmp_path: Path) -> None:
    """The task spec's clock probe: wrist_flex out by 0.1 rad and back in 0.3 s, 0.5 s after each
    reset, on top of the plan (a re-plan after a takeover does not replay it)."""
    f = tmp_path / "p.yaml"
    f.write_text("waypoints: [[0, 0, 0, 0, 0, 0]]\nclock_probe: {joint: wrist_flex, amplitude_rad: 0.1, "
                 "duration_s: 0.3}\n")
    p = ScriptedPolicy.from_args(str(f), "")
    wrist = 3
    for start in (0, 10_000_000_000):
        p.reset([0.0] * 6, start)
        trace = [p.act([0.0] * 6, start + int(t * 1e9))[wrist] for t in np.arange(0.0, 1.5, 0.01)]  # type: ignore[index]
        assert max(trace) == pytest.approx(0.1, abs=1e-3) and abs(trace[int(0.65 / 0.01)] - 0.1) < 1e-3
        assert trace[int(0.45 / 0.01)] == 0.0 and trace[int(0.85 / 0.01)] == 0.0
    p.drop_plan()
    assert p.act([0.0] * 6, 10_000_000_000 + int(3.65e9))[wrist] == 0.0  # type: ignore[index]
    f.write_text("waypoints: [[0, 0, 0, 0, 0, 0]]\nclock_probe: {joint: wrist_flex, amplitude_rad: 0.1, "
                 "duration_s: 0.05}\n")
    with pytest.raises(ValueError, match="speed limit"):
        ScriptedPolicy.from_args(str(f), "")
