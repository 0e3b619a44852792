"""The teleop node as deployed — its own process, real rclpy/DDS — driven by a probe node.

Inputs (leader, policy, follower, pedal) come from the probe; everything the node publishes is
judged by its own tick stamps, so a loaded machine that delays delivery cannot fake or hide a
jump. Covered: the takeover ramp against the raised-cosine profile (within one tick), command
continuity at takeover and hand-back, leader tracking and release, labels from the pedal's Joy
buttons and from the service, stale policy and stale leader holds with their diagnostics, and a
mode switch in the middle of a takeover.
"""
from __future__ import annotations

import json
import math
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from itertools import pairwise

import pytest
from support.lerobot_act import NEEDS_LEROBOT, save_act

rclpy = pytest.importorskip("rclpy")

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus  # noqa: E402
from rclpy.executors import SingleThreadedExecutor  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402
from rclpy.parameter_client import AsyncParameterClient  # noqa: E402
from sensor_msgs.msg import JointState, Joy  # noqa: E402
from std_msgs.msg import String  # noqa: E402
from std_srvs.srv import SetBool, Trigger  # noqa: E402

from teleop_flywheel.core.clock import now_ns, to_ros_ns  # noqa: E402
from teleop_flywheel.core.labels import TRIGGER_LABELS, trigger_code  # noqa: E402
from teleop_flywheel.core.safety import TURN_RAD  # noqa: E402
from teleop_flywheel.core.so101 import JOINT_NAMES  # noqa: E402
from teleop_flywheel.ros.commands.run import end_process  # noqa: E402
from teleop_flywheel.ros.nodes.common import LATCHED_QOS, STREAM_QOS, joint_state, msg_stamp_ns, stamp  # noqa: E402

BLEND_MS = 150.0
TICK_MS = 5.0  # the node's rate_hz = 200
UP, DOWN = [0] * 6, [1] + [0] * 5


class Probe:
    """The probe node's side: inputs to the teleop node, and everything it publishes."""

    def __init__(self, node) -> None:
        self.node = node
        self.commands: list[tuple[int, float]] = []  # (tick stamp, joint 0)
        self.wrist: list[tuple[int, float]] = []  # (tick stamp, wrist_flex)
        self.authority: list[tuple[int, list[float]]] = []  # (tick stamp, [alpha, mode, id, trigger])
        self.leader_cmds: list[int] = []  # len(position): 6 = tracking, 0 = release
        self.events: list[dict] = []
        self.diagnostics: list[tuple[bytes, str]] = []  # (level, message) of the teleop's status
        self.inputs = {"policy": 0.0, "leader": 0.2, "follower": 0.0}
        self.age_ms = {"policy": 0.0, "leader": 0.0, "follower": 0.0}  # how old each input's stamp is when sent
        self.raw_stamps: list[int] = []  # header stamps of /follower/joint_command as sent (ROS time)
        node.create_subscription(JointState, "/follower/joint_command", self._on_command, STREAM_QOS)
        node.create_subscription(JointState, "/teleop/authority", lambda m: self.authority.append(
            (msg_stamp_ns(m), list(m.position))), STREAM_QOS)
        node.create_subscription(JointState, "/leader/joint_command", lambda m: self.leader_cmds.append(
            len(m.position)), STREAM_QOS)
        node.create_subscription(String, "/teleop/intervention", lambda m: self.events.append(json.loads(m.data)),
                                 LATCHED_QOS)
        node.create_subscription(DiagnosticArray, "/diagnostics", lambda m: self.diagnostics.extend(
            (s.level, s.message) for s in m.status if "authority" in s.name), 50)
        self.pubs = {"leader": node.create_publisher(JointState, "/leader/joint_states", STREAM_QOS),
                     "policy": node.create_publisher(JointState, "/policy/joint_command", STREAM_QOS),
                     "follower": node.create_publisher(JointState, "/follower/joint_states", STREAM_QOS)}
        self.pedal = node.create_publisher(Joy, "/pedal/joy", STREAM_QOS)

    def _on_command(self, m: JointState) -> None:
        self.commands.append((msg_stamp_ns(m), m.position[0]))  # on this host's monotonic clock
        self.wrist.append((msg_stamp_ns(m), m.position[JOINT_NAMES.index("wrist_flex")]))
        self.raw_stamps.append(m.header.stamp.sec * 10**9 + m.header.stamp.nanosec)

    def wait_matched(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while any(p.get_subscription_count() == 0 for p in [*self.pubs.values(), self.pedal]):
            assert time.monotonic() < deadline, "the teleop node did not subscribe to its inputs"
            time.sleep(0.05)

    @property
    def alpha(self) -> float | None:
        return self.authority[-1][1][0] if self.authority else None

    def joy(self, buttons: list[int]) -> None:
        """A /pedal/joy message as the pedal node publishes it: buttons[0] takeover, [1..5] labels."""
        msg = Joy()
        stamp(msg.header.stamp, now_ns())  # ROS time, as the pedal node stamps
        msg.buttons = buttons
        self.pedal.publish(msg)

    def drive(self, until: Callable[[], bool], what: str, buttons: list[int] | None = None,
              silent: tuple[str, ...] = (), timeout: float = 60.0) -> None:
        """Publish the inputs (except `silent` ones) and the pedal state at 100 Hz until `until()`.

        The pedal state is re-sent every loop: a repeated state is idempotent, a lost sample cannot
        stall. Waits for conditions, not fixed times: the machine may be loaded.
        """
        deadline = time.monotonic() + timeout
        while not until():
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            t = now_ns()
            for name, pub in self.pubs.items():
                if name not in silent:
                    pub.publish(joint_state(JOINT_NAMES, [self.inputs[name]] * 6, t - int(self.age_ms[name] * 1e6)))
            if buttons is not None:
                self.joy(buttons)
            time.sleep(0.01)

    def call(self, srv_type, name: str, request) -> object:
        client = self.node.create_client(srv_type, name)
        assert client.wait_for_service(timeout_sec=30), f"{name} not offered"
        future = client.call_async(request)
        deadline = time.monotonic() + 10
        while not future.done():
            assert time.monotonic() < deadline, f"{name} did not answer"
            time.sleep(0.02)
        return future.result()

    def set_params(self, **values: object) -> list:
        """Set the teleop node's parameters over its parameter service (as `ros2 param set` does)."""
        client = AsyncParameterClient(self.node, "teleop")
        assert client.wait_for_services(timeout_sec=30), "teleop parameter services not offered"
        future = client.set_parameters([Parameter(k, value=v) for k, v in values.items()])
        deadline = time.monotonic() + 10
        while not future.done():
            assert time.monotonic() < deadline, "set_parameters did not answer"
            time.sleep(0.02)
        return list(future.result().results)

    def caught_up(self, t_ns: int) -> bool:
        """Whether commands and authority stamped at or after `t_ns` have been read."""
        return bool(self.commands and self.authority) and min(self.commands[-1][0], self.authority[-1][0]) >= t_ns

    def commands_since(self, t_ns: int) -> list[tuple[int, float]]:
        return sorted(c for c in self.commands if c[0] >= t_ns)


def start_teleop(**params: object) -> subprocess.Popen:
    args = [f"{k}:={v}" for k, v in {"mode": "policy", "blend_duration_ms": BLEND_MS, **params}.items()]
    cmd = [sys.executable, "-m", "teleop_flywheel.ros.nodes.teleop", "--ros-args"]
    for a in args:
        cmd += ["-p", a]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@pytest.fixture()
def teleop_factory() -> Iterator[Callable[..., Probe]]:
    rclpy.init()
    procs: list[subprocess.Popen] = []
    ex = SingleThreadedExecutor()
    thread = threading.Thread(target=ex.spin, daemon=True)
    nodes = []

    def make(**params: object) -> Probe:
        procs.append(start_teleop(**params))
        node = rclpy.create_node(f"teleop_probe_{len(nodes)}")
        nodes.append(node)
        ex.add_node(node)
        if not thread.is_alive():
            thread.start()
        probe = Probe(node)
        probe.wait_matched()
        return probe

    yield make
    for p in procs:
        end_process(p, 10.0)
    ex.shutdown()
    for n in nodes:
        n.destroy_node()
    rclpy.shutdown()


def ramp_time_error_ms(samples: list[tuple[int, float]], rising: bool, blend_ms: float = BLEND_MS) -> list[float]:
    """For authority samples (tick stamp, α) inside a ramp: how far each tick is from where the
    raised-cosine profile puts its α, in ms, after fitting the ramp's start time (the median)."""
    inner = [(t, a) for t, a in samples if 0.02 < a < 0.98]
    assert len(inner) >= 5, f"only {len(inner)} ticks inside the ramp: {samples}"
    def phase_ms(a: float) -> float:
        x = math.acos(1.0 - 2.0 * a) / math.pi  # inverse of α = (1 − cos πx)/2
        return (x if rising else 1.0 - x) * blend_ms
    starts = sorted(t / 1e6 - phase_ms(a) for t, a in inner)
    t_start = starts[len(starts) // 2]
    return [abs(t / 1e6 - t_start - phase_ms(a)) for t, a in inner]


def test_takeover_blends_labels_and_releases_the_leader(teleop_factory) -> None:
    # Fast enough that the 0.2 rad gap is blended in 150 ms (a slower limit stretches the ramp:
    # test_blending's test_a_ramp_between_far_commands_is_stretched_to_the_speed_limit).
    probe = teleop_factory(max_speed_rad_s=4.0)
    start = time.monotonic()
    probe.drive(lambda: 6 in probe.leader_cmds and time.monotonic() - start > 0.5, "leader tracking")
    t_down = now_ns()
    probe.drive(lambda: probe.alpha == pytest.approx(1.0) and bool(probe.commands)
                and probe.commands[-1][1] == pytest.approx(0.2, abs=1e-6), "takeover", DOWN)
    t_up = now_ns()
    probe.drive(lambda: probe.alpha == 0.0 and probe.commands[-1][1] == pytest.approx(0.0, abs=1e-6),
                "hand-back", UP)
    result = probe.call(Trigger, "/teleop/label/wrong_grasp", Trigger.Request())
    assert result.success, result.message
    probe.drive(lambda: probe.events[-1]["trigger"] == "wrong_grasp", "the label event")

    # α(t) follows the raised cosine within one control tick, up and down. (A linear ramp would be
    # off by up to 12 ms at α = 0.25 and fail.)
    auth = sorted(probe.authority)
    rise = [(t, a[0]) for t, a in auth if t_down <= t < t_up]
    fall = [(t, a[0]) for t, a in auth if t >= t_up]
    assert max(ramp_time_error_ms(rise, rising=True)) <= TICK_MS
    assert max(ramp_time_error_ms(fall, rising=False)) <= TICK_MS

    # Continuity at takeover and at hand-back: between any two ticks the command moves no faster
    # than the blend's own peak slope (0.2 rad gap · π/2 / 150 ms ≈ 2.1 rad/s); a hard switch
    # through the 0.05 rad max step would move 10 rad/s at 200 Hz.
    peak = 0.2 * (math.pi / 2) / (BLEND_MS / 1e3)
    cmds = probe.commands_since(t_down - 50_000_000)
    slopes = [abs(v1 - v0) / ((t1 - t0) / 1e9) for (t0, v0), (t1, v1) in pairwise(cmds) if t1 > t0]
    assert max(slopes) <= peak * 1.05, f"command moved at {max(slopes):.2f} rad/s (blend peak {peak:.2f})"
    assert max(v for _t, v in cmds) == pytest.approx(0.2, abs=1e-6) and cmds[-1][1] == pytest.approx(0.0, abs=1e-6)

    # The leader tracked the follower (6 joints), was released at pedal-down (empty), then tracked again.
    first_release = probe.leader_cmds.index(0)
    assert 6 in probe.leader_cmds[:first_release] and 6 in probe.leader_cmds[first_release:]
    events = probe.events
    assert events[-1]["id"] == 1 and events[-1]["end_ns"] and events[-1]["trigger"] == "wrong_grasp"
    assert any(a[2] == 1.0 for _t, a in auth), "authority carries the intervention id during the takeover"
    # The intervention's start/end are the pedal edges' stamps, in ROS time (the clock the data
    # engine aligns them with header stamps on): start after the pedal went down, end after it came up.
    assert to_ros_ns(t_down) <= events[-1]["start_ns"] <= to_ros_ns(t_up) <= events[-1]["end_ns"] <= time.time_ns()


def label_press(down: bool, label: str) -> list[int]:
    buttons = [1 if down else 0] + [0] * 5
    buttons[trigger_code(label)] = 1  # code = 1 + index in TRIGGER_LABELS = the Joy button
    return buttons


def test_trigger_label_from_pedal_buttons(teleop_factory) -> None:
    """Labels as the pedal node sends them: a Joy pulse on buttons[1 + index], pedal state in buttons[0]."""
    probe = teleop_factory()
    probe.drive(lambda: bool(probe.leader_cmds), "policy driving, leader tracking")
    # Before any takeover there is nothing to label: the press is refused (no crash, no label kept).
    probe.joy(label_press(False, "wrong_object"))
    probe.joy(UP)
    probe.drive(lambda: bool(probe.events), "intervention start", DOWN)
    assert probe.events[0] == {"id": 1, "start_ns": probe.events[0]["start_ns"], "end_ns": None, "trigger": None,
                               "kind": "intervention"}
    probe.drive(lambda: probe.alpha == pytest.approx(1.0), "human authority", DOWN)

    probe.joy(label_press(True, "too_slow"))  # pressed while holding the takeover pedal
    probe.drive(lambda: probe.events[-1]["trigger"] == "too_slow", "label from the pedal", DOWN)
    probe.drive(lambda: probe.events[-1]["end_ns"] is not None and probe.alpha == 0.0, "hand-back", UP)
    assert [e["id"] for e in probe.events] == [1] * len(probe.events), "one intervention, no extra from the label"
    assert probe.events[-1]["trigger"] == "too_slow"
    codes = {a[3] for _t, a in probe.authority}
    assert float(TRIGGER_LABELS.index("too_slow") + 1) in codes and float(trigger_code("wrong_object")) not in codes


def test_stale_inputs_hold_at_once_and_are_reported(teleop_factory) -> None:
    """A silent policy (while it drives) and a silent leader (while the human does) each hold the
    last command sent — stopping a rate-limited move where it is — and WARN on /diagnostics."""
    probe = teleop_factory(max_speed_rad_s=0.4, stale_ms=100.0)  # a move of 1 rad takes 2.5 s
    probe.drive(lambda: bool(probe.commands), "policy driving")
    probe.inputs["policy"] = 1.0
    probe.drive(lambda: probe.commands[-1][1] > 0.1, "the move toward 1.0 under way")
    t_silent, seen = now_ns(), len(probe.diagnostics)
    probe.drive(lambda: any("policy stale" in m for _l, m in probe.diagnostics[seen:]),
                "the policy-stale diagnostic", silent=("policy",))
    # The first word of it is the hold itself, sent the tick it began (not "held since…" a second later).
    first = next((level, m) for level, m in probe.diagnostics[seen:] if "policy stale" in m)
    assert first == (DiagnosticStatus.WARN, "holding: policy stale"), first
    probe.drive(lambda: probe.caught_up(t_silent + 650_000_000), "a while silent", silent=("policy",))
    held = [v for t, v in probe.commands_since(t_silent + 150_000_000)]
    assert held and max(held) - min(held) < 1e-9, "the hold must not finish the move"
    assert max(v for _t, v in probe.commands) < 0.5, "the follower kept moving toward the stale target"

    # Human authority, then the leader goes silent: hold again, reported as leader stale.
    probe.inputs.update(policy=0.3, leader=0.3)
    probe.drive(lambda: probe.alpha == pytest.approx(1.0), "takeover", DOWN)
    t_silent = now_ns()
    _wait_hold(probe, "leader stale", DOWN, silent=("leader",))
    t_check = max(now_ns(), t_silent + 2 * STALE_NS)  # stale whatever the node said before the silence
    probe.drive(lambda: probe.caught_up(t_check + 400_000_000), "a while silent", DOWN, silent=("leader",))
    after = [v for t, v in probe.commands_since(t_check)]
    assert after and max(after) - min(after) < 1e-9


def test_a_policy_publishing_nan_goes_stale_and_holds(teleop_factory) -> None:
    """NaN is no sign of life: a policy that publishes only NaN is a silent one."""
    probe = teleop_factory(max_speed_rad_s=0.4, stale_ms=100.0)
    probe.drive(lambda: bool(probe.commands), "policy driving")
    probe.inputs["policy"] = 1.0
    probe.drive(lambda: probe.commands[-1][1] > 0.1, "the move toward 1.0 under way")
    probe.inputs["policy"] = math.nan
    t_nan = now_ns()
    _wait_hold(probe, "policy stale", timeout=15.0)
    t_check = max(now_ns(), t_nan + 2 * STALE_NS)  # stale whatever the node said before the NaN
    probe.drive(lambda: probe.caught_up(t_check + 300_000_000), "a while of NaN")
    after = _published_since(probe, t_check)
    assert after and max(after) - min(after) < 1e-9 and max(after) < 0.5, "held, not finishing the move"


def test_header_stamps_are_ros_time_and_an_old_one_is_stale_on_the_node_clock(teleop_factory) -> None:
    """Header stamps carry ROS time both ways: the node's commands are stamped in ROS time (within a
    second of the wall clock), and an incoming leader stamp is converted back onto the node's
    monotonic clock before the staleness check: one stamped now drives, one stamped 200 ms in the
    past (stale_ms 100) is held as stale at once. Read as monotonic, a ROS-time stamp lies ~1.8e9 s
    in the future of the node's clock and would never be stale."""
    probe = teleop_factory(mode="teleop", stale_ms=100.0)
    probe.inputs["leader"] = 0.3
    probe.drive(lambda: bool(probe.commands) and probe.commands[-1][1] == pytest.approx(0.3, abs=1e-6),
                "the command following a leader stamped now")
    assert abs(probe.raw_stamps[-1] - time.time_ns()) < 1_000_000_000, "commands are stamped in ROS time"
    assert not any("stale" in m for _l, m in probe.diagnostics)
    probe.age_ms["leader"] = 200.0
    probe.inputs["leader"] = 0.6  # fresh samples would move the command; old ones must not
    t_old = now_ns()
    probe.drive(lambda: any("leader stale" in m for _l, m in probe.diagnostics)
                and len(probe.commands_since(t_old)) >= 20, "the leader-stale diagnostic and held commands")
    held = [v for _t, v in probe.commands_since(t_old)]
    assert max(held) == pytest.approx(0.3, abs=1e-6), "a 200 ms old leader sample was acted on"
    probe.age_ms["leader"] = 0.0
    probe.drive(lambda: probe.commands[-1][1] > 0.35, "fresh samples drive again")


def test_mode_switch_during_a_takeover_ends_the_intervention(teleop_factory) -> None:
    """Switching to teleop while the pedal is held ends the running intervention (the human keeps
    authority, now as teleoperation); back in policy mode with the pedal up, the policy drives and
    no intervention is left open."""
    probe = teleop_factory()
    probe.drive(lambda: 6 in probe.leader_cmds, "leader tracking")
    probe.drive(lambda: bool(probe.events) and probe.alpha == pytest.approx(1.0), "takeover", DOWN)
    assert probe.call(SetBool, "/teleop/set_policy_mode", SetBool.Request(data=False)).success
    interventions = lambda: [e for e in probe.events if e["kind"] == "intervention"]  # noqa: E731
    probe.drive(lambda: interventions()[-1]["end_ns"] is not None, "the intervention's end", DOWN)
    t_up = now_ns()  # the pedal comes up in teleop mode: it ends the correction it held there
    probe.drive(lambda: probe.caught_up(t_up + 300_000_000) and probe.authority[-1][1][1] == 0.0,
                "teleop mode on /teleop/authority", UP)
    assert probe.authority[-1][1][2] == 0.0 and probe.alpha == pytest.approx(1.0)
    assert probe.call(SetBool, "/teleop/set_policy_mode", SetBool.Request(data=True)).success
    probe.drive(lambda: probe.alpha == 0.0 and probe.leader_cmds[-1] == 6, "policy driving again, leader tracking", UP)
    assert {e["id"] for e in interventions()} == {1} and interventions()[-1]["end_ns"] is not None
    corrections = [e for e in probe.events if e["kind"] == "correction"]  # the pedal held on in teleop mode
    assert {e["id"] for e in corrections} == {1} and corrections[-1]["end_ns"] is not None


def test_a_label_the_blender_refuses_is_reported_as_refused(teleop_factory) -> None:
    """The refusal text of a label after the labelling window starts with "intervention": the
    service must report the blender's verdict, not match on the text."""
    probe = teleop_factory(label_window_ms=100.0)
    probe.drive(lambda: 6 in probe.leader_cmds, "policy driving, leader tracking")
    probe.drive(lambda: bool(probe.events) and probe.alpha == pytest.approx(1.0), "takeover", DOWN)
    probe.drive(lambda: probe.events[-1]["end_ns"] is not None, "hand-back", UP)
    ended = time.monotonic()
    probe.drive(lambda: time.monotonic() - ended > 0.3, "the 100 ms labelling window to pass", UP)
    result = probe.call(Trigger, "/teleop/label/wrong_grasp", Trigger.Request())
    assert not result.success, result.message
    assert result.message.startswith("intervention 1 ended") and "labelling window" in result.message
    assert probe.events[-1]["trigger"] is None  # nothing was labelled
    # inside the window a label is accepted and said so
    probe.drive(lambda: probe.events[-1]["id"] == 2 and probe.alpha == pytest.approx(1.0), "second takeover", DOWN)
    result = probe.call(Trigger, "/teleop/label/too_slow", Trigger.Request())
    assert result.success and result.message == "intervention 2 labelled too_slow"


def test_blend_duration_set_at_run_time_changes_the_ramp(teleop_factory) -> None:
    """`ros2 param set /teleop blend_duration_ms 400` (an integer, as the CLI sends it) takes effect:
    the next takeover ramps over 400 ms, not the 150 ms the node started with."""
    probe = teleop_factory()
    (result,) = probe.set_params(blend_duration_ms=400)
    assert result.successful, result.reason
    probe.drive(lambda: 6 in probe.leader_cmds, "policy driving, leader tracking")
    t_down = now_ns()
    probe.drive(lambda: probe.alpha == pytest.approx(1.0), "takeover", DOWN)
    rise = [(t, a[0]) for t, a in sorted(probe.authority) if t >= t_down]
    assert max(ramp_time_error_ms(rise, rising=True, blend_ms=400.0)) <= TICK_MS
    inner = [t for t, a in rise if 0.0 < a < 1.0]
    assert (inner[-1] - inner[0]) / 1e6 > 250, "a 150 ms ramp cannot span this long"


def test_parameters_refused_at_run_time_say_why(teleop_factory) -> None:
    probe = teleop_factory()
    (read_only,) = probe.set_params(rate_hz=100.0)
    assert not read_only.successful and "read-only" in read_only.reason
    (out_of_range,) = probe.set_params(blend_duration_ms=5000.0)
    assert not out_of_range.successful
    # the descriptor's range, checked by rclpy before the node sees the value
    assert all(w in out_of_range.reason for w in ("blend_duration_ms", "Min: 20.0", "Max: 1000.0", "5000.0"))
    (bad_mode,) = probe.set_params(mode="autopilot")
    assert not bad_mode.successful and "'teleop', 'policy'" in bad_mode.reason
    # the mode parameter and the service are one path: the service's switch shows in the parameter
    assert probe.call(SetBool, "/teleop/set_policy_mode", SetBool.Request(data=False)).success
    (same,) = probe.set_params(mode="policy")
    assert same.successful
    probe.drive(lambda: probe.authority and probe.authority[-1][1][1] == 1.0, "policy mode on /teleop/authority")


def test_a_pedal_in_teleop_mode_marks_a_labelled_correction_and_never_changes_authority(teleop_factory) -> None:
    """Teleop mode: the pedal marks a correction span (kind correction on /teleop/intervention),
    labelled through the same services and pedal keys; α stays 1, the mode teleop, no intervention,
    and the command sent stays the leader's."""
    probe = teleop_factory(mode="teleop")
    probe.drive(lambda: bool(probe.commands) and probe.commands[-1][1] == pytest.approx(0.2, abs=1e-6),
                "teleoperation")
    t_down = now_ns()
    t_down_ros = to_ros_ns(t_down)  # converted at once: the wall clock may step before the test ends
    probe.drive(lambda: bool(probe.events), "the correction's start", DOWN)
    assert probe.events[0] == {"id": 1, "start_ns": probe.events[0]["start_ns"], "end_ns": None, "trigger": None,
                               "kind": "correction"}
    result = probe.call(Trigger, "/teleop/label/other", Trigger.Request())
    assert result.success and result.message == "correction 1 labelled other"
    probe.drive(lambda: probe.events[-1]["trigger"] == "other", "the label event", DOWN)
    probe.drive(lambda: probe.events[-1]["end_ns"] is not None, "the correction's end", UP)
    t_up = now_ns()
    t_up_ros = to_ros_ns(t_up)
    probe.joy(label_press(False, "too_slow"))  # a pedal label key relabels it (within the window)
    probe.joy(UP)
    probe.drive(lambda: probe.events[-1]["trigger"] == "too_slow", "the pedal's label", UP)
    assert {(e["kind"], e["id"]) for e in probe.events} == {("correction", 1)}
    assert t_down_ros <= probe.events[-1]["start_ns"] <= probe.events[-1]["end_ns"] <= t_up_ros
    # Each executor pass takes one message a topic: the rare events arrive while 200 Hz streams
    # still queue, so a loaded probe can have read no authority sample of the span yet.
    probe.drive(lambda: probe.caught_up(t_up), "authority and commands past the correction", UP)
    during = [a for t, a in probe.authority if t >= t_down]
    assert during and all(a[0] == 1.0 and a[1] == 0.0 and a[2] == 0.0 for a in during), "authority never changed"
    assert all(v == pytest.approx(0.2, abs=1e-6) for t, v in probe.commands_since(t_down))


STALE_NS = 100_000_000  # the stale_ms these tests give the node


def _wait_hold(probe: Probe, reason: str, buttons: list[int] | None = None, silent: tuple[str, ...] = (),
               timeout: float = 60.0) -> None:
    """Until the node says a hold for `reason` has begun, counting only what it says from now on.
    Its 1 Hz status also reports a hold that already ended ("held since the last status: policy
    stale (3 ticks)"): a test loop starved for 100 ms before the silence makes one, and a check over
    everything it ever said took that for the hold and looked while the move still went on."""
    seen = len(probe.diagnostics)
    probe.drive(lambda: any(m == f"holding: {reason}" for _l, m in probe.diagnostics[seen:]),
                f"the {reason} hold", buttons, silent, timeout)


def _published_since(probe: Probe, t_ns: int) -> list[float]:
    return [v for _t, v in probe.commands_since(t_ns)]


def test_an_e_stop_holds_the_follower_until_reset(teleop_factory) -> None:
    probe = teleop_factory()
    probe.drive(lambda: bool(probe.commands), "policy driving")
    result = probe.call(Trigger, "/teleop/estop", Trigger.Request())
    assert result.success
    held = probe.commands[-1][1]
    probe.inputs["policy"] = 1.0
    t0 = now_ns()
    probe.drive(lambda: probe.caught_up(t0 + 300_000_000), "300 ms e-stopped")
    assert set(_published_since(probe, t0)) == {held}, "the e-stopped node moved the follower"
    probe.drive(lambda: any("e-stop" in m for _l, m in probe.diagnostics), "the e-stop on /diagnostics")
    result = probe.call(Trigger, "/teleop/reset", Trigger.Request())
    assert result.success and "e-stop" in result.message
    t1 = now_ns()
    probe.drive(lambda: probe.commands[-1][1] == pytest.approx(1.0), "the policy drives again")
    cmds = probe.commands_since(t1)
    slopes = [abs(v1 - v0) / ((b - a) / 1e9) for (a, v0), (b, v1) in pairwise(cmds) if b - a > 2_000_000]
    assert max(slopes) <= 2.0 * 1.05, "resumed at bounded speed"


def test_a_pedal_lost_during_a_takeover_holds_until_it_is_back(teleop_factory) -> None:
    """An unplugged pedal used to end the takeover: the policy about to fail got the arm back."""
    probe = teleop_factory()
    probe.drive(lambda: 6 in probe.leader_cmds, "policy driving, leader tracking")
    probe.drive(lambda: probe.alpha == pytest.approx(1.0) and probe.commands[-1][1] == pytest.approx(0.2),
                "takeover", DOWN)
    probe.joy([])  # the pedal node lost its device
    probe.inputs.update(leader=0.5, policy=-0.5)
    t0 = now_ns()
    probe.drive(lambda: probe.caught_up(t0 + 400_000_000), "400 ms without a pedal")
    got = _published_since(probe, t0 + 50_000_000)
    # Held where it was when the loss arrived (the leader's new input may have come in a tick before it).
    assert len(set(got)) == 1 and got[0] == pytest.approx(0.2, abs=0.02), f"neither drives: {got}"
    assert probe.alpha == pytest.approx(1.0) and probe.events[-1]["end_ns"] is None, "the takeover is not ended"
    probe.drive(lambda: any(level == DiagnosticStatus.ERROR and "pedal was lost" in m
                            for level, m in probe.diagnostics), "an ERROR naming the lost pedal")
    probe.drive(lambda: probe.alpha == 0.0 and probe.commands[-1][1] == pytest.approx(-0.5), "pedal back, up", UP)


def test_a_pedal_lost_while_the_policy_drives_holds(teleop_factory) -> None:
    """A pedal unplugged while the policy drives: the operator cannot take over, so the follower
    holds (it used to drive on with a warning) until the pedal is back."""
    probe = teleop_factory(max_speed_rad_s=0.4)
    probe.drive(lambda: bool(probe.commands), "policy driving")
    probe.inputs["policy"] = 1.0
    probe.drive(lambda: probe.commands[-1][1] > 0.05, "the move toward 1.0 under way")
    probe.joy([])  # the pedal node lost its device
    probe.drive(lambda: any("lost while the policy drives" in m for _l, m in probe.diagnostics), "the hold reported")
    t0 = now_ns()
    probe.drive(lambda: probe.caught_up(t0 + 300_000_000), "300 ms held")
    got = _published_since(probe, t0)
    assert len(set(got)) == 1 and got[0] < 0.9, got
    probe.drive(lambda: probe.commands[-1][1] > got[0] + 0.05, "the pedal back, up: the policy drives on", UP)


def test_a_pedal_process_killed_while_the_policy_drives_holds_and_is_reported(teleop_factory, tmp_path) -> None:
    """The pedal node published only edges: killed while the policy drove, nothing noticed, and the
    operator's press did nothing. Its heartbeat stops; the teleop node holds once 500 ms passed
    without it, says so on /diagnostics and teleop/fault, and a pedal heard again ends the hold."""
    import os

    from teleop_flywheel.hw.pedal.virtual import VirtualPedal

    fifo = tmp_path / "pedal"
    os.mkfifo(fifo)
    foot = VirtualPedal(str(fifo))  # the device stays plugged in: only the process dies
    probe = teleop_factory(max_speed_rad_s=0.4)  # policy mode: a move of 1 rad takes 2.5 s
    faults: list[DiagnosticStatus] = []
    beats: list[int] = []
    heard: list[str] = []  # the teleop node's pedal_heard_ms_ago, once a second
    probe.node.create_subscription(DiagnosticStatus, "/teleop/fault", faults.append, LATCHED_QOS)
    probe.node.create_subscription(DiagnosticArray, "/diagnostics", lambda m: heard.extend(
        kv.value for st in m.status if "authority" in st.name for kv in st.values
        if kv.key == "pedal_heard_ms_ago"), 50)
    probe.node.create_subscription(Joy, "/pedal/joy", lambda m: beats.append(now_ns())
                                   if m.header.frame_id == "pedal_heartbeat" else None, STREAM_QOS)

    def pedal_node() -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "teleop_flywheel.ros.nodes.pedal", "--ros-args", "-p",
                                 f"device:={fifo}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    pedal = pedal_node()
    try:
        # The teleop node must have heard the pedal (its discovery of the new node may come later
        # than the probe's): a pedal never heard is not watched.
        probe.drive(lambda: bool(probe.commands) and bool(heard) and heard[-1] != "None",
                    "the policy driving, the teleop node hearing the pedal")
        probe.inputs["policy"] = 1.0
        probe.drive(lambda: probe.commands[-1][1] > 0.05, "the move toward 1.0 under way")
        t_kill = now_ns()
        pedal.kill()
        pedal.wait()
        try:
            probe.drive(lambda: any("pedal is silent" in m for _l, m in probe.diagnostics), "the silent pedal reported",
                        timeout=20.0)
        except AssertionError:
            raise AssertionError(f"no hold; the teleop node said {probe.diagnostics[-3:]}, heard {heard[-3:]}, "
                                 f"{len(beats)} beats") from None
        t_check = now_ns()
        probe.drive(lambda: probe.caught_up(t_check + 300_000_000), "a while held")
        cmds = probe.commands_since(t_kill - 200_000_000)
        last = cmds[-1][1]
        held_from = next(t for t, v in cmds if all(w == last for _t, w in cmds if _t >= t))
        assert last < 0.9, "held, not finishing the move"
        assert 0.35e9 <= held_from - t_kill <= 0.65e9, f"held {(held_from - t_kill) / 1e6:.0f} ms after the kill"
        level, message = next((lv, m) for lv, m in probe.diagnostics if "pedal is silent" in m)
        assert level == DiagnosticStatus.ERROR and message.startswith("holding: the pedal is silent"), message
        assert any(f.level == DiagnosticStatus.ERROR and "pedal is silent" in f.message for f in faults), faults
        pedal = pedal_node()  # heard again: the policy drives on
        probe.drive(lambda: probe.commands[-1][1] > last + 0.05, "the policy driving once the pedal is back")
        probe.drive(lambda: faults[-1].level == DiagnosticStatus.OK, "teleop/fault OK again")
    finally:
        pedal.kill()
        pedal.wait()
        foot.close()


def test_a_takeover_across_wrist_rolls_seam_takes_the_short_way(teleop_factory) -> None:
    """Policy at +3.10 rad, leader at -3.10 (0.08 rad away the short way, across the seam): the
    takeover's blend used to sweep wrist_roll the long way round, through 0."""
    probe = teleop_factory()
    wrist: list[float] = []
    probe.node.create_subscription(JointState, "/follower/joint_command", lambda m: wrist.append(m.position[4]),
                                   STREAM_QOS)
    probe.inputs.update(policy=3.10, follower=3.10, leader=-3.10)
    probe.drive(lambda: bool(wrist) and wrist[-1] == pytest.approx(3.10), "the policy holding the wrist at 3.10")
    start = len(wrist)
    probe.drive(lambda: probe.alpha == pytest.approx(1.0), "takeover", DOWN)
    probe.drive(lambda: wrist[-1] == pytest.approx(-3.10 + TURN_RAD, abs=1e-6), "the wrist at the leader's angle",
                DOWN)
    swept = wrist[start:]
    assert min(swept) > 3.0 and max(swept) < 3.3, f"the wrist went {min(swept):.2f}..{max(swept):.2f} rad"


def test_a_held_arm_holds_the_teleop_node(teleop_factory) -> None:
    probe = teleop_factory()
    fault = probe.node.create_publisher(DiagnosticStatus, "/follower/fault", LATCHED_QOS)
    probe.drive(lambda: bool(probe.commands), "policy driving")
    fault.publish(DiagnosticStatus(level=DiagnosticStatus.ERROR, name="follower arm",
                                   message="servo fault: elbow_flex (servo 3): overload (status 0x20)"))
    probe.drive(lambda: any("follower arm held" in m for _l, m in probe.diagnostics), "the hold reported")
    held = probe.commands[-1][1]
    probe.inputs["policy"] = 1.0
    t0 = now_ns()
    probe.drive(lambda: probe.caught_up(t0 + 300_000_000), "300 ms held")
    assert set(_published_since(probe, t0)) == {held}
    fault.publish(DiagnosticStatus(level=DiagnosticStatus.OK, name="follower arm", message="not held"))
    probe.drive(lambda: probe.commands[-1][1] == pytest.approx(1.0), "driving again once the arm is reset")


PROBE = {"joint": "wrist_flex", "amplitude_rad": 0.1, "duration_s": 0.3}


def test_a_task_specs_clock_probe_plays_on_the_command_as_an_episode_starts(teleop_factory) -> None:
    """Teleop mode with the spec's clock probe: the recorder saying an episode records starts it 0.5 s
    later on the follower's command, wrist_flex out by 0.1 rad and back within 0.3 s on the node's own
    tick stamps; the same episode's status again plays nothing."""
    probe = teleop_factory(mode="teleop", clock_probe=f"'{json.dumps(PROBE)}'")
    status = probe.node.create_publisher(String, "/recorder/status", LATCHED_QOS)
    probe.drive(lambda: bool(probe.wrist) and probe.wrist[-1][1] == pytest.approx(0.2), "the leader driving")

    def recording(episode: str) -> tuple[int, list[tuple[int, float]]]:
        """Say `episode` records; 1.5 s later, the wrist's commands that left the leader's 0.2 rad."""
        t0 = now_ns()
        status.publish(String(data=json.dumps({"state": "recording", "episode": episode})))
        probe.drive(lambda: probe.caught_up(t0 + 1_500_000_000), "1.5 s recording")
        return t0, [(t, v - 0.2) for t, v in sorted(probe.wrist) if t >= t0 and abs(v - 0.2) > 1e-6]

    t0, moved = recording("episode_000001")
    assert moved, "no probe"
    assert moved[0][0] - t0 >= 0.5e9, "played before 0.5 s into the episode"
    assert max(v for _t, v in moved) == pytest.approx(0.1, abs=0.005)
    assert (moved[-1][0] - moved[0][0]) / 1e9 <= 0.3 + 2 * TICK_MS / 1e3  # out and back in 300 ms
    _t1, again = recording("episode_000001")
    assert not again, "the same episode's status played the probe again"


def test_the_leader_gripper_maps_to_the_same_fraction_of_the_followers_range(teleop_factory, tmp_path) -> None:
    """A leader whose trigger travels less than the follower's jaws still opens and closes them fully."""
    import yaml

    from teleop_flywheel.core.calibration import load_calibration, sim_calibration_file
    docs = {role: yaml.safe_load(sim_calibration_file(role).read_text()) for role in ("leader", "follower")}
    docs["leader"]["joints"]["gripper"].update(range_min=2400, range_max=2900)  # a short trigger
    files = {}
    for role, doc in docs.items():
        files[role] = tmp_path / f"{role}.yaml"
        files[role].write_text(yaml.safe_dump(doc))
    leader, follower = (load_calibration(files[r])["gripper"] for r in ("leader", "follower"))
    probe = teleop_factory(mode="teleop", leader_calibration_file=files["leader"],
                           follower_calibration_file=files["follower"])
    gripper_cmds: list[float] = []
    probe.node.create_subscription(JointState, "/follower/joint_command",
                                   lambda m: gripper_cmds.append(m.position[5]), STREAM_QOS)
    t_open = float(leader.raw_to_rad(leader.range_max))  # the trigger fully open
    pub = probe.pubs["leader"]
    deadline = time.monotonic() + 30
    want = float(follower.raw_to_rad(follower.range_max))
    while not (gripper_cmds and gripper_cmds[-1] == pytest.approx(want, abs=1e-3)):
        assert time.monotonic() < deadline, f"gripper command {gripper_cmds[-1:]} never reached {want}"
        pub.publish(joint_state(JOINT_NAMES, [0.0] * 5 + [t_open], now_ns()))
        time.sleep(0.01)
    assert t_open < want - 0.5, "by angle the follower's jaws would have stayed half closed"


@NEEDS_LEROBOT
def test_a_learned_policy_is_blended_and_recorded_exactly_as_the_scripted_one(teleop_factory, tmp_path) -> None:
    """The same takeover and hand-back with the `lerobot` plugin (a tiny ACT checkpoint on a camera)
    as with the `scripted` policy, on one teleop node: α follows the same raised cosine up and down,
    the authority message carries the same fields, the intervention ids count on, and the policy
    node drops its plan at each hand-back. Both policies command the leader's pose (the ACT's
    action statistics pin it there), so no speed-limit stretch can tell them apart either."""
    import numpy as np
    from sensor_msgs.msg import CompressedImage

    from teleop_flywheel.core.calibration import load_calibration, sim_calibration_file
    from teleop_flywheel.hw.camera.source import encode_jpeg
    from teleop_flywheel.ros.nodes.common import IMAGE_QOS
    from teleop_flywheel.ros.nodes.policy import PolicyNode

    pose = [0.2] * 6
    units = load_calibration(sim_calibration_file("follower")).rad_to_lerobot(np.asarray(pose))
    ckpt = save_act(tmp_path / "act", {"observation.state": ("STATE", (6,)),
                                       "observation.images.front": ("VISUAL", (3, 24, 32))}, [float(u) for u in units])
    waypoints = tmp_path / "hold.yaml"
    waypoints.write_text(f"waypoints: [{pose}]\nmove_s: 0.2\n")
    probe = teleop_factory(max_speed_rad_s=4.0)
    probe.inputs.update(leader=0.2, follower=0.2)
    node = PolicyNode(parameter_overrides=[Parameter("policy", value="scripted"),
                                           Parameter("policy_args", value=str(waypoints)),
                                           Parameter("simulated", value=True)])
    tags: list[str] = []
    node.create_subscription(JointState, "/policy/joint_command", lambda m: tags.append(m.header.frame_id),
                             STREAM_QOS)
    camera = node.create_publisher(CompressedImage, "/cameras/front/image/compressed", IMAGE_QOS)
    frame = CompressedImage(format="jpeg", data=encode_jpeg(np.zeros((24, 32, 3), np.uint8), 90))
    ex = SingleThreadedExecutor()
    ex.add_node(node)
    threading.Thread(target=ex.spin, daemon=True).start()
    stop = threading.Event()

    def cameras() -> None:
        while not stop.wait(1 / 30):
            stamp(frame.header.stamp, now_ns())
            camera.publish(frame)

    threading.Thread(target=cameras, daemon=True).start()
    profiles = {}
    try:
        for policy, args in (("scripted", str(waypoints)), ("lerobot", str(ckpt))):
            result = node.set_parameters_atomically([Parameter("policy", value=policy),
                                                     Parameter("policy_args", value=args)])
            assert result.successful, result.reason
            node.restart()  # a swapped-in policy commands once its episode starts
            tag = node.policy.checkpoint_id
            dropped = node.plans_dropped
            probe.drive(lambda tag=tag: tags[-5:] == [tag] * 5 and probe.alpha == 0.0, f"{policy} driving",
                        silent=("policy",))
            t_down = now_ns()
            probe.drive(lambda: probe.alpha == pytest.approx(1.0), f"takeover from {policy}", DOWN, silent=("policy",))
            t_up = now_ns()
            probe.drive(lambda: probe.alpha == 0.0, f"hand-back to {policy}", UP, silent=("policy",))
            probe.drive(lambda d=dropped: node.plans_dropped == d + 1, f"{policy} dropping its plan",
                        silent=("policy",))
            auth = sorted(probe.authority)
            profiles[policy] = ([(t, a[0]) for t, a in auth if t_down <= t < t_up],
                                [(t, a[0]) for t, a in auth if t >= t_up], {tuple(a[1:3]) for t, a in auth
                                                                          if t_down <= t < t_up and a[0] > 0})
    finally:
        stop.set()
        ex.shutdown()
        node.destroy_node()
    for policy, (rise, fall, _ids) in profiles.items():
        assert max(ramp_time_error_ms(rise, rising=True)) <= TICK_MS, policy
        assert max(ramp_time_error_ms(fall, rising=False)) <= TICK_MS, policy
    # The same fields (mode policy = 1.0) and the next intervention id for the learned policy's takeover.
    assert profiles["scripted"][2] == {(1.0, 1.0)} and profiles["lerobot"][2] == {(1.0, 2.0)}
    assert tags[-1].startswith("lerobot:act:")
