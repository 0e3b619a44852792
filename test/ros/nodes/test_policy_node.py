"""The policy node's inference time per action, and what a late action does on the rig.

The real `PolicyNode` and `TeleopNode` run in this process on real rclpy/DDS, each spun by its
own executor thread (as their own processes would be); the policy they run is a plain
`policies.base.Policy` written here — a ramp of actions, one of which takes longer than the
node's period to compute, as an ACT chunk on a busy CPU does. What the teleop node sends to the
follower shows whether the late action holds then plays, or is skipped for a jump.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import pytest

rclpy = pytest.importorskip("rclpy")

from rclpy.executors import SingleThreadedExecutor  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402
from sensor_msgs.msg import JointState  # noqa: E402

from teleop_flywheel.core.so101 import JOINT_NAMES  # noqa: E402
from teleop_flywheel.policies.base import NO_IMAGES, Images, Policy  # noqa: E402
from teleop_flywheel.ros.nodes.common import STREAM_QOS, msg_stamp_ns  # noqa: E402
from teleop_flywheel.ros.nodes.policy import INFERENCE_FIELDS, PolicyNode  # noqa: E402
from teleop_flywheel.ros.nodes.teleop import TeleopNode  # noqa: E402

STEP = 0.01  # rad per action: well under the rig's speed bound at 50 Hz
LATE = 6  # the action that takes SLOW_S to compute
SLOW_S = 0.3  # longer than the node's 20 ms period and the teleop node's 100 ms stale_ms


class SlowRamp(Policy):
    """Action k is k·STEP on every joint; computing action LATE takes SLOW_S."""

    checkpoint_id = "slow-ramp"
    cameras: tuple[str, ...] = ()

    def __init__(self) -> None:
        self.k = 0

    def reset(self, state: Sequence[float] | None, t_ns: int) -> None:
        self.k = 0

    def act(self, state: Sequence[float] | None, t_ns: int, images: Images = NO_IMAGES) -> list[float] | None:
        self.k += 1
        if self.k == LATE:
            time.sleep(SLOW_S)
        return [self.k * STEP] * 6


def test_a_late_action_holds_the_last_command_then_plays_in_order() -> None:
    rclpy.init()
    policy_node = PolicyNode(parameter_overrides=[Parameter("simulated", value=True), Parameter("rate_hz", value=50.0)])
    policy_node.policy = SlowRamp()  # before it spins: what a swap of the `policy` parameter puts there
    teleop = TeleopNode(parameter_overrides=[Parameter("mode", value="policy")])
    probe = rclpy.create_node("probe")
    sent: list[tuple[int, float]] = []  # (received monotonic ns, joint 0) of /follower/joint_command
    inference: list[JointState] = []
    arrived: dict[int, int] = {}  # id of an inference message -> its receive time (monotonic, as msg_stamp_ns)
    probe.create_subscription(JointState, "/follower/joint_command",
                              lambda m: sent.append((time.monotonic_ns(), round(m.position[0], 6))), STREAM_QOS)

    def on_inference(m: JointState) -> None:
        arrived[id(m)] = time.monotonic_ns()
        inference.append(m)

    probe.create_subscription(JointState, "/policy/inference", on_inference, STREAM_QOS)
    executors = []
    for node in (policy_node, teleop, probe):
        ex = SingleThreadedExecutor()
        ex.add_node(node)
        threading.Thread(target=ex.spin, daemon=True).start()
        executors.append(ex)
    try:
        deadline = time.monotonic() + 30
        while not any(v >= (LATE + 8) * STEP for _t, v in sent) and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        for ex in executors:
            ex.shutdown()
        for node in (policy_node, teleop, probe):
            node.destroy_node()
        rclpy.shutdown()

    ramp = [(t, v) for t, v in sent if v > 0 and abs(v / STEP - round(v / STEP)) < 1e-6]
    values = [v for _t, v in ramp]
    distinct = list(dict.fromkeys(values))
    steps = [round(v / STEP) for v in distinct]
    assert LATE in steps and LATE + 8 in steps, steps
    # In order, none skipped: the late action is sent, then the next — no jump over it.
    after = steps[steps.index(LATE - 1):]
    assert after[:10] == list(range(LATE - 1, LATE + 9)), after
    # While it was being computed the follower was held at the action before it (nothing in between).
    held = [t for t, v in ramp if round(v / STEP) == LATE - 1]
    assert (held[-1] - held[0]) / 1e9 >= 0.8 * SLOW_S, (held[-1] - held[0]) / 1e9
    assert all(abs(v / STEP - round(v / STEP)) < 1e-6 for _t, v in sent if v > 0)  # no blend, no extrapolation
    # The inference topic: one message per action, the late one flagged, stamped when its action became
    # available (its tick is the stamp less inference_ms): the recorded stream's receive-minus-stamp
    # latency is the transport's, as the validator's CLOCK_OFFSET check expects of every stream.
    slow = [m for m in inference if m.header.frame_id == "slow-ramp"]
    fields = [dict(zip(m.name, m.position, strict=True)) for m in slow]
    assert all(tuple(m.name) == INFERENCE_FIELDS for m in slow)
    late = [f for f in fields if f["late"] == 1.0]
    assert len(late) == 1 and late[0]["inference_ms"] >= SLOW_S * 1e3 and late[0]["period_ms"] == 20.0
    assert all(f["inference_ms"] < f["period_ms"] for f in fields if f["late"] == 0.0)
    stamps = [msg_stamp_ns(m) for m in slow]
    assert stamps == sorted(stamps)
    late_msg = next(m for m in slow if dict(zip(m.name, m.position, strict=True))["late"] == 1.0)
    assert (arrived[id(late_msg)] - msg_stamp_ns(late_msg)) / 1e9 < SLOW_S / 2


def test_swapping_back_reuses_a_policy_it_ran_lately(tmp_path) -> None:
    """A start-pose move and two checkpoints, interleaved as an unattended walk does: each is loaded
    once; a fourth is loaded afresh and the oldest is then forgotten; a refused one leaves the
    running one."""
    waypoints = tmp_path / "pose.yaml"
    waypoints.write_text("waypoints: [[0.1, 0.1, 0.1, 0.1, 0.1, 0.1]]\n")
    rclpy.init()
    node = PolicyNode(parameter_overrides=[Parameter("simulated", value=True)])
    try:
        first = node.policy

        def swap(**values: str) -> bool:
            return node.set_parameters_atomically([Parameter(k, value=v) for k, v in values.items()]).successful

        assert swap(policy_args=str(waypoints), checkpoint_id="sim-reset")
        reset_move = node.policy
        assert reset_move is not first and reset_move.checkpoint_id == "sim-reset"
        assert swap(policy_args="", checkpoint_id="")
        assert node.policy is first  # back: not loaded again
        assert swap(policy_args=str(waypoints), checkpoint_id="sim-reset") and node.policy is reset_move
        assert swap(policy_args=str(waypoints), checkpoint_id="other")
        other = node.policy
        assert other is not reset_move and other is not first
        for _ in range(2):  # reset, first, reset, other, ...: nothing loaded again
            assert swap(checkpoint_id="sim-reset") and node.policy is reset_move
            assert swap(policy_args="", checkpoint_id="") and node.policy is first
            assert swap(policy_args=str(waypoints), checkpoint_id="sim-reset") and node.policy is reset_move
            assert swap(checkpoint_id="other") and node.policy is other
        assert swap(checkpoint_id="fourth") and swap(checkpoint_id="sim-reset") and swap(checkpoint_id="other")
        assert node.policy is other and swap(policy_args="", checkpoint_id="") and node.policy is not first
        assert not swap(policy="nosuch") and node.policy.checkpoint_id == "scripted-v0"
    finally:
        node.destroy_node()
        rclpy.shutdown()


def test_a_swapped_in_policy_commands_nothing_until_its_episode_is_reset() -> None:
    """Between a start-pose move and a trial the arm must hold: a swap loads the checkpoint, and
    only `~/reset` (the trial's start, once its bag records) lets it command."""
    rclpy.init()
    node = PolicyNode(parameter_overrides=[Parameter("simulated", value=True), Parameter("rate_hz", value=50.0)])
    probe = rclpy.create_node("probe")
    tags: list[tuple[int, str]] = []  # (received monotonic ns, checkpoint id) of /policy/joint_command
    probe.create_subscription(JointState, "/policy/joint_command",
                              lambda m: tags.append((time.monotonic_ns(), m.header.frame_id)), STREAM_QOS)
    state = probe.create_publisher(JointState, "/follower/joint_states", 10)
    executors = []
    for n in (node, probe):
        ex = SingleThreadedExecutor()
        ex.add_node(n)
        threading.Thread(target=ex.spin, daemon=True).start()
        executors.append(ex)

    def wait_for(tag: str, after_ns: int, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            msg = JointState(name=list(JOINT_NAMES), position=[0.1] * len(JOINT_NAMES))
            state.publish(msg)
            if any(t > after_ns and f == tag for t, f in tags):
                return True
            time.sleep(0.02)
        return False

    try:
        assert wait_for(node.policy.checkpoint_id, 0, 10.0)  # the policy it started with acts at once
        assert node.set_parameters_atomically([Parameter("checkpoint_id", value="swapped-in")]).successful
        swapped = time.monotonic_ns()
        assert not wait_for("swapped-in", swapped, 0.5)  # idle: nothing from either policy
        assert not any(t > swapped + 100_000_000 for t, _f in tags), tags[-3:]
        node.restart()
        assert wait_for("swapped-in", swapped, 10.0)
    finally:
        for ex in executors:
            ex.shutdown()
        for n in (node, probe):
            n.destroy_node()
        rclpy.shutdown()


class Gate(Policy):
    """Commands 0.5 on every joint; its third action waits for `release`, signalling `entered`."""

    checkpoint_id = "gate"
    cameras: tuple[str, ...] = ()

    def __init__(self) -> None:
        self.k = 0
        self.entered, self.release = threading.Event(), threading.Event()

    def reset(self, state: Sequence[float] | None, t_ns: int) -> None:
        self.k = 0

    def act(self, state: Sequence[float] | None, t_ns: int, images: Images = NO_IMAGES) -> list[float] | None:
        self.k += 1
        if self.k == 3:
            self.entered.set()
            self.release.wait(10.0)
        return [0.5] * 6


def test_once_a_swap_returns_the_policy_it_replaced_sends_nothing_more() -> None:
    """An evaluation walk swaps from the start-pose move (`sim-reset`) to a checkpoint and starts
    recording at once: a command of the move still on its way then lands in the trial's bag. A swap
    asked for while an action is computed waits for that action's command to go out. The command
    publisher is watched as it is called: when the action's command is about to go out it waits (up
    to 1 s) for the swap to return, which the swap can do only if the command is not yet sent under
    the lock it takes."""
    rclpy.init()
    node = PolicyNode(parameter_overrides=[Parameter("simulated", value=True), Parameter("rate_hz", value=50.0)])
    gate = node.policy = Gate()
    said: list[str] = []  # in order: "gate" for each gate command published, "swapped" when the swap returned
    swapped = threading.Event()
    send = node._pub.publish

    def watched(msg: JointState) -> None:
        if msg.header.frame_id == "gate" and gate.release.is_set():
            swapped.wait(1.0)
        said.append(msg.header.frame_id)
        send(msg)

    node._pub.publish = watched  # type: ignore[method-assign]
    ex = SingleThreadedExecutor()
    ex.add_node(node)
    threading.Thread(target=ex.spin, daemon=True).start()

    def swap() -> None:
        assert node.set_parameters_atomically([Parameter("checkpoint_id", value="next")]).successful
        said.append("swapped")
        swapped.set()

    try:
        assert gate.entered.wait(10.0), "the gate policy never acted a third time"
        swapper = threading.Thread(target=swap)
        swapper.start()
        time.sleep(0.05)  # the swap has loaded its policy and waits for the action to end
        gate.release.set()
        swapper.join(10.0)
        assert not swapper.is_alive()
        time.sleep(0.1)
    finally:
        ex.shutdown()
        node.destroy_node()
        rclpy.shutdown()
    assert said.count("swapped") == 1 and said.count("gate") >= 3, said
    assert "gate" not in said[said.index("swapped"):], said
