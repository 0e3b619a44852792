"""`teleop` node: leader (and policy) in, the command actually sent to the follower out.

Wires `blending.AuthorityBlender` and `safety.CommandGuard` to topics:
- in: `/leader/joint_states`, `/policy/joint_command`, `/pedal/joy` (buttons[0] = takeover,
  buttons[1..5] = trigger labels), `/follower/joint_states`;
- out: `/follower/joint_command` (after blend, limits and max step — this is the dataset's
  action), `/leader/joint_command` (while the policy drives, the follower's position so the
  leader tracks it; an empty message at pedal-down releases the leader's torque),
  `/teleop/authority` (JointState with named numeric fields alpha, mode, intervention_id,
  trigger — plottable in Foxglove), `/teleop/intervention` (JSON events, latched: `kind`
  `intervention` for a takeover from the policy, `correction` for the pedal pressed in teleop
  mode, which marks "I reached in" and never changes authority).
- services: `~/set_policy_mode` (std_srvs/SetBool: true = policy, false = teleop; the same as
  setting the `mode` parameter), `~/label/<trigger>` (std_srvs/Trigger, one per trigger label;
  success false with the blender's reason when the label is refused), `~/estop` and `~/reset`
  (std_srvs/Trigger; below).
- parameters (`TeleopParams`): `mode`, `blend_duration_ms`, `stale_ms` and `label_window_ms` take
  effect at run time (a new blend duration applies to a ramp under way from its current α);
  `rate_hz`, `max_speed_rad_s`, the calibration files and `clock_probe` are read-only.
- clock probe: with a task spec's `clock_probe` (the session passes it), each episode the recorder
  starts (`recorder/status` naming a new episode) gets it in teleop mode, `PROBE_AT_S` after the
  start: the probed joint out and back on top of the leader's command, through the same guard — a
  known, sharp motion for the validator's camera clock check (docs/task_spec.md). A policy plays
  its own; a hold plays nothing.

What is sent goes through the same `safety.CommandGuard` as the arm driver's: the follower's
calibrated range (`follower_calibration_file`) and `max_speed_rad_s`, so a far target — a policy's
first command, an authority change towards a far pose, a leader plugged back in elsewhere — is
approached at bounded speed and what is recorded is what the follower can do. The leader's gripper
is mapped to the follower's as the same fraction (0–100) of each calibrated range (`ArmPair`), both
ways (the leader tracks the follower while the policy drives).

Holds latched until the operator's `~/reset` (each stops the follower where it was last sent;
neither the policy nor the leader drives): `~/estop`; a pedal lost in the middle of a takeover
(the pedal node says so with a Joy without buttons) — the policy that was about to fail must not get
the arm back because a cable came out, and the human no longer holds authority either; the pedal
coming back also ends it, its state deciding who drives. A hold of an arm driver
(`<role>/fault`: a servo fault or its own e-stop) holds the teleop node for as long as it lasts.

A tick runs when a leader sample arrives (so leader→command latency is one callback, not a
timer period) and from a `rate_hz` timer when no leader sample came in the last period (so
the policy keeps driving with the leader silent). Time: the blender, ramps and staleness run on
CLOCK_MONOTONIC; what leaves the node is ROS time — header stamps (the tick's instant) and the
intervention events' start/end, converted at the edge (`common.stamp`, `clock.to_ros_ns`) — and
incoming header stamps (leader, policy, pedal edges) are converted back (`common.msg_stamp_ns`)
before they are compared with the node's clock. The
control inputs keep only their newest sample (`CONTROL_QOS`): a node that fell behind acts on
the present instead of working through a queue of targets that are stale by then.

A stale input holds the last command *sent* (the guard stops at once rather than finishing a
rate-limited move) and is reported on `/diagnostics` the moment the hold begins, and in the
next periodic status even if it lasted only a few ticks.
"""
from __future__ import annotations

import json
import math
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from rclpy.node import Node
from rclpy.parameter import Parameter
from sensor_msgs.msg import JointState, Joy
from std_msgs.msg import String
from std_srvs.srv import SetBool, Trigger

from teleop_flywheel.core.blending import BLEND_MS_DEFAULT, BLEND_MS_RANGE, AuthorityBlender
from teleop_flywheel.core.calibration import ArmPair, load_calibration
from teleop_flywheel.core.clock import now_ns, to_ros_ns
from teleop_flywheel.core.episode import Intervention
from teleop_flywheel.core.errors import TaskSpecError
from teleop_flywheel.core.labels import (
    CORRECTION_KIND,
    INTERVENTION_KIND,
    MODES,
    TRIGGER_LABELS,
    mode_code,
    trigger_code,
)
from teleop_flywheel.core.priority import RT_PRIORITY, Realtime, request_realtime
from teleop_flywheel.core.safety import CommandGuard, JointLimits, nearest_turn
from teleop_flywheel.core.so101 import FULL_TURN_JOINTS, JOINT_NAMES
from teleop_flywheel.core.task_spec import PROBE_AT_S, ClockProbe, clock_probe_of
from teleop_flywheel.core.topics import (
    AUTHORITY,
    AUTHORITY_FIELDS,
    DIAGNOSTICS,
    ESTOP,
    FOLLOWER_COMMAND,
    FOLLOWER_STATE,
    INTERVENTION,
    LEADER_COMMAND,
    LEADER_STATE,
    PEDAL_FRAME,
    PEDAL_HEARTBEAT_FRAME,
    PEDAL_JOY,
    POLICY_COMMAND,
    RECORDER_NODE,
    RECORDER_STATUS,
    RESET,
    TELEOP_FAULT,
    arm_fault,
    label_service,
)
from teleop_flywheel.ros.nodes.common import (
    CONTROL_QOS,
    LATCHED_QOS,
    STREAM_QOS,
    diag_array,
    diag_status,
    joint_state,
    log_at,
    msg_stamp_ns,
    spin_node,
)
from teleop_flywheel.ros.params import Invalid, NodeParameters, NodeParams, spec

# Five of the pedal node's 100 ms heartbeats missed: a process that died or a device that vanished,
# not a heartbeat delayed by a loaded machine. A dead pedal while the policy drives is an operator
# who cannot take over; half a second of that is the most this allows.
PEDAL_TIMEOUT_MS = 500.0


@dataclass
class TeleopParams(NodeParams):
    mode: str = spec("teleop", "teleop (human only) or policy (the policy drives, the pedal takes over); "
                     "changeable at run time, like ~/set_policy_mode", choices=MODES, read_only=False)
    blend_duration_ms: float = spec(BLEND_MS_DEFAULT, "authority ramp duration (ms); changeable at run time: "
                                    "a ramp under way goes on from its current alpha", range=BLEND_MS_RANGE,
                                    read_only=False)
    rate_hz: float = spec(200.0, "tick rate when no leader sample arrives (Hz)", range=(1.0, 2000.0))
    stale_ms: float = spec(100.0, "an input older than this is stale: hold, never extrapolate (ms)",
                           range=(1.0, 10_000.0), read_only=False)
    max_speed_rad_s: float = spec(2.0, "fastest any joint's command may move (rad/s), as the arm driver's",
                                  range=(0.01, 4.7))
    leader_calibration_file: str = spec(
        "",
        "the leader's calibration: with the follower's, the gripper is mapped "
        "0-100 of each range (empty: by angle, as for a leader built like the follower)",
    )
    follower_calibration_file: str = spec("", "the follower's calibration: its range limits the commands (empty: "
                                          "the arm driver alone limits them)")
    pedal_timeout_ms: float = spec(PEDAL_TIMEOUT_MS, "a pedal heard once (its heartbeat) and then silent this long "
                                   "holds the follower, whatever the mode, until it is heard again (ms)",
                                   range=(200.0, 10_000.0))
    label_window_ms: float = spec(10_000.0, "a trigger label still counts this long after its takeover ended (ms)",
                                  range=(0.0, 600_000.0), read_only=False)
    thread_priority: int = spec(RT_PRIORITY, "SCHED_FIFO priority of the thread that ticks (of every thread when the "
                                "node has its own process), where permitted (ros2_control's thread_priority); 0 = "
                                "the normal policy", range=(0, 99))
    lock_memory: bool = spec(True, "lock the process's memory (mlockall) where permitted (ros2_control's lock_memory)")
    clock_probe: str = spec("", "the task spec's clock_probe as JSON ({joint, amplitude_rad, duration_s}; the session "
                            "passes its spec's): in teleop mode added to the follower's command 0.5 s after each "
                            "episode starts recording, a known motion the camera sees (docs/task_spec.md); empty: none")

    def check(self) -> None:
        self.probe()

    def probe(self) -> ClockProbe | None:
        """The clock probe the `clock_probe` parameter holds (Invalid naming it when it is not one)."""
        if not self.clock_probe:
            return None
        try:
            return clock_probe_of(json.loads(self.clock_probe), "clock_probe")
        except (ValueError, TaskSpecError) as exc:  # JSONDecodeError is a ValueError
            raise Invalid("clock_probe", f"a clock probe as JSON ({exc})") from None


def event(iv: Intervention, kind: str = INTERVENTION_KIND) -> dict[str, Any]:
    """An `/teleop/intervention` event: the blender's monotonic start/end in ROS time, the clock of
    the header stamps the data engine aligns them with; `kind` intervention or correction."""
    return {"id": iv.id, "start_ns": to_ros_ns(iv.start_ns),
            "end_ns": None if iv.end_ns is None else to_ros_ns(iv.end_ns), "trigger": iv.trigger, "kind": kind}


def _ordered(msg: JointState) -> list[float] | None:
    """Positions in JOINT_NAMES order, or None if a joint is missing or not a finite number (such a
    sample is dropped and does not refresh its input: a sender emitting NaN goes stale and holds)."""
    by_name = dict(zip(msg.name, msg.position, strict=False))
    if all(n in by_name for n in JOINT_NAMES):
        out = [float(by_name[n]) for n in JOINT_NAMES]
        if all(math.isfinite(v) for v in out):
            return out
    return None


class TeleopNode(Node):
    def __init__(self, node_name: str = "teleop", **kwargs: Any) -> None:
        super().__init__(node_name, **kwargs)
        self._lock = threading.Lock()
        self.params = NodeParameters(self, TeleopParams, self._on_params)
        p = self.params.values
        self.rate_hz = p.rate_hz
        self.blender = AuthorityBlender(mode=p.mode, blend_ms=p.blend_duration_ms, stale_ms=p.stale_ms,
                                        label_window_ms=p.label_window_ms, max_speed=p.max_speed_rad_s)
        leader = load_calibration(p.leader_calibration_file) if p.leader_calibration_file else None
        follower = load_calibration(p.follower_calibration_file) if p.follower_calibration_file else None
        self.arms = ArmPair(leader, follower)
        limits = JointLimits.from_dict(follower.rad_limits()) if follower else JointLimits.unbounded()
        self.guard = CommandGuard(JOINT_NAMES, limits, max_speed=p.max_speed_rad_s)
        self._turning = [JOINT_NAMES.index(name) for name in FULL_TURN_JOINTS]
        self._latched = {"estop": "", "pedal": ""}  # holds only ~/reset ends (the pedal's also its return)
        self._arm_holds: dict[str, str] = {}  # role -> what its driver says while it holds
        self._pedal_lost = False
        self._pedal_heard_ns: int | None = None  # when the pedal node's last message arrived (its heartbeat)
        self._pedal_silent = False
        self._fault_said: tuple[int, str] | None = None
        self.realtime: Realtime | None = None  # asked by the thread that ticks, at its first tick
        self._follower: list[float] | None = None
        self._last_tick_ns = 0
        # Each source's buttons apart: the pedal node (its edges and heartbeats re-assert the device's
        # state) and the console's space bar (frame "console") share /pedal/joy, and a heartbeat
        # saying "up" must not hand back a takeover the console asked for. Down on any source is down.
        self._buttons: dict[str, list[int]] = {}
        self._leader_released = False
        self._reported: dict[tuple[str, int], tuple[int | None, str | None]] = {}  # (kind, id) → (end, trigger)
        self._hold_reason = ""  # the current hold, "" when not holding
        self._holds: dict[str, int] = {}  # hold reason → ticks held since the last diagnostics
        self._probe = p.probe()
        self._probe_joint = JOINT_NAMES.index(self._probe.joint) if self._probe is not None else 0
        self._probe_start_ns: int | None = None  # when the probe of the episode recording began (teleop mode)
        self._recording = ""  # the episode the recorder says it records ("" when idle)

        self._cmd_pub = self.create_publisher(JointState, FOLLOWER_COMMAND, STREAM_QOS)
        self._leader_pub = self.create_publisher(JointState, LEADER_COMMAND, STREAM_QOS)
        self._auth_pub = self.create_publisher(JointState, AUTHORITY, STREAM_QOS)
        self._event_pub = self.create_publisher(String, INTERVENTION, LATCHED_QOS)
        self._diag_pub = self.create_publisher(DiagnosticArray, DIAGNOSTICS, 10)
        self._fault_pub = self.create_publisher(DiagnosticStatus, TELEOP_FAULT, LATCHED_QOS)
        self.create_subscription(JointState, LEADER_STATE, self._on_leader, CONTROL_QOS)
        self.create_subscription(JointState, POLICY_COMMAND, self._on_policy, CONTROL_QOS)
        self.create_subscription(JointState, FOLLOWER_STATE, self._on_follower, CONTROL_QOS)
        self.create_subscription(Joy, PEDAL_JOY, self._on_pedal, STREAM_QOS)
        if self._probe is not None:
            self.create_subscription(String, f"{RECORDER_NODE}/{RECORDER_STATUS}", self._on_recorder, LATCHED_QOS)
        for role in ("leader", "follower"):
            self.create_subscription(DiagnosticStatus, arm_fault(role),
                                     lambda m, r=role: self._on_arm_hold(r, m), LATCHED_QOS)
        self.create_service(SetBool, "~/set_policy_mode", self._srv_mode)
        self.create_service(Trigger, f"~/{ESTOP}", self._srv_estop)
        self.create_service(Trigger, f"~/{RESET}", self._srv_reset)
        for label in TRIGGER_LABELS:
            self.create_service(Trigger, f"~/{label_service(label)}", self._label_service(label))
        self.create_timer(1.0 / self.rate_hz, self._on_timer)
        self.create_timer(1.0, self._publish_diagnostics)

    def _on_params(self, old: TeleopParams, new: TeleopParams, names: set[str]) -> str | None:
        """Run-time changes take effect at once (under the tick lock)."""
        with self._lock:
            t = now_ns()
            if "blend_duration_ms" in names:
                self.blender.set_blend_ms(new.blend_duration_ms, t)
            self.blender.stale_ms = new.stale_ms
            self.blender.label_window_ms = new.label_window_ms
            if "mode" in names:
                self.blender.set_mode(new.mode, t)
                self._drive_leader(t)
                self._publish_events()
        return None

    # -- inputs ---------------------------------------------------------------------------
    def _on_leader(self, msg: JointState) -> None:
        positions = _ordered(msg)
        if positions is None:
            return
        with self._lock:  # ROS time back to monotonic: staleness
            self.blender.human(self._near_follower(self.arms.to_follower(positions)), msg_stamp_ns(msg))
            self._tick(now_ns())

    def _on_policy(self, msg: JointState) -> None:
        positions = _ordered(msg)
        if positions is not None:
            with self._lock:
                self.blender.policy(self._near_follower(positions), msg_stamp_ns(msg))

    def _near_follower(self, positions: list[float]) -> list[float]:
        """A full-turn joint (wrist_roll) of an input taken modulo a turn nearest the command last
        sent (else the follower's state): a leader and a policy a turn apart as read across the
        encoder's seam are one pose, and the blend between them must not sweep the long way."""
        reference = self.guard.sent or self._follower
        if reference is not None:
            for i in self._turning:
                positions[i] = nearest_turn(positions[i], reference[i])
        return positions

    def _on_follower(self, msg: JointState) -> None:
        positions = _ordered(msg)
        if positions is not None:
            with self._lock:
                self._follower = positions

    def _on_recorder(self, msg: String) -> None:
        """An episode starting to record starts the clock probe `PROBE_AT_S` later."""
        try:
            status = json.loads(msg.data)
            episode = str(status.get("episode") or "") if status.get("state") == "recording" else ""
        except (ValueError, AttributeError):  # not the recorder's JSON object: nothing started
            return
        with self._lock:
            if episode and episode != self._recording:
                self._probe_start_ns = now_ns() + int(PROBE_AT_S * 1e9)
            self._recording = episode

    def _probed(self, command: list[float], t: int) -> list[float]:
        """`command` with the clock probe's displacement at `t` (teleop mode only: a policy plays its own)."""
        if self._probe is None or self._probe_start_ns is None or self.blender.mode != "teleop":
            return command
        offset = self._probe.offset((t - self._probe_start_ns) / 1e9)
        if not offset:
            return command
        out = list(command)
        out[self._probe_joint] += offset
        return out

    def _on_pedal(self, msg: Joy) -> None:
        stamp = msg_stamp_ns(msg)  # the kernel's event time, on this node's monotonic clock
        buttons = list(msg.buttons)
        with self._lock:
            if msg.header.frame_id in (PEDAL_FRAME, PEDAL_HEARTBEAT_FRAME):  # the pedal node's, not the console's
                self._pedal_heard_ns = now_ns()
                if self._pedal_silent:
                    self._pedal_silent = False
                    self._latched["pedal"] = ""  # heard again: its state decides, through the normal ramp
                    self.get_logger().info("the pedal is heard again")
            if not buttons:  # the pedal node lost its device
                if not self._pedal_lost:
                    self._pedal_lost = True
                    if self.blender.takeover:
                        self._latch("pedal", "the pedal was lost during a takeover: holding until it is back "
                                             "or ~/reset (then the policy resumes)")
                    elif self.blender.mode == "policy":  # the operator could not take over
                        self._latch("pedal", "the pedal was lost while the policy drives: no takeover is possible; "
                                             "holding until it is back or ~/reset (then the policy resumes)")
                return
            if self._pedal_lost:
                self._pedal_lost = False
                self._latched["pedal"] = ""  # back: its state decides who drives, through the normal ramp
            source = "device" if msg.header.frame_id in (PEDAL_FRAME, PEDAL_HEARTBEAT_FRAME) else msg.header.frame_id
            mine = self._buttons.get(source, [])
            previous = mine + [0] * (len(buttons) - len(mine))
            was_down = any(b and bool(b[0]) for b in self._buttons.values())
            self._buttons[source] = buttons
            down = any(b and bool(b[0]) for b in self._buttons.values())
            if down != was_down:
                known = now_ns()
                self.blender.pedal(down, stamp, known)
                self._drive_leader(known)
            for i, label in enumerate(TRIGGER_LABELS, start=1):
                if i < len(buttons) and buttons[i] and not previous[i]:
                    accepted, message = self._label(label, stamp)
                    if not accepted:
                        self.get_logger().warning(f"pedal label {label} refused: {message}")
            self._publish_events()

    def _label(self, label: str, t_ns: int) -> tuple[bool, str]:
        """(accepted, what happened): the blender's verdict, never read back from its text."""
        try:
            iv = self.blender.label(label, t_ns)
        except ValueError as exc:  # refused: no intervention, or beyond the labelling window
            return False, str(exc)
        kind = INTERVENTION_KIND if any(iv is i for i in self.blender.interventions) else CORRECTION_KIND
        return True, f"{kind} {iv.id} labelled {label}"

    def _label_service(self, label: str) -> Callable[[Trigger.Request, Trigger.Response], Trigger.Response]:
        return lambda _request, response: self._srv_label(label, response)

    def _srv_label(self, label: str, response: Trigger.Response) -> Trigger.Response:
        with self._lock:
            response.success, response.message = self._label(label, now_ns())
            self._publish_events()
        return response

    def _latch(self, kind: str, reason: str) -> None:
        if not self._latched[kind]:
            self.get_logger().error(f"holding the follower: {reason}")
        self._latched[kind] = reason
        self._tick(now_ns())

    def _on_arm_hold(self, role: str, msg: DiagnosticStatus) -> None:
        with self._lock:
            if msg.level == DiagnosticStatus.OK:
                self._arm_holds.pop(role, None)
            else:
                self._arm_holds[role] = f"{role} arm held ({msg.message})"

    def _srv_estop(self, _request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        with self._lock:
            self._latch("estop", "e-stop (~/estop)")
        response.success, response.message = True, "teleop e-stopped: the follower holds until ~/reset"
        return response

    def _srv_reset(self, _request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        """Clear the e-stop and a lost-pedal hold; a pedal still lost counts as up (the policy resumes
        through the normal ramp in policy mode)."""
        with self._lock:
            cleared = [r for r in self._latched.values() if r]
            self._latched = {"estop": "", "pedal": ""}
            if self._pedal_lost and self.blender.pedal_down:
                t = now_ns()
                self.blender.pedal(False, t, t)
                self._buttons = {}
                self._publish_events()
        response.success = True
        response.message = "reset: " + ("; ".join(cleared) if cleared else "nothing held")
        return response

    def _srv_mode(self, request: SetBool.Request, response: SetBool.Response) -> SetBool.Response:
        """The same as setting the `mode` parameter (one path, so the parameter always tells the mode)."""
        mode = "policy" if request.data else "teleop"
        (result,) = self.set_parameters([Parameter("mode", value=mode)])
        response.success = result.successful
        response.message = f"mode {mode}" if result.successful else result.reason
        return response

    # -- ticking --------------------------------------------------------------------------
    def _on_timer(self) -> None:
        with self._lock:
            t = now_ns()
            if t - self._last_tick_ns >= 1e9 / self.rate_hz:
                self._tick(t)

    def _drive_leader(self, t: int) -> None:
        """While the policy alone drives, the leader tracks the follower (torque on), so a takeover
        joins two nearly equal commands; whenever the human has any authority it is released
        (an empty command), at once on the pedal edge or mode switch that gives it."""
        policy_alone = (self.blender.mode == "policy" and not self.blender.pedal_down
                        and self.blender.alpha(t) == 0.0)
        if policy_alone:
            if self._follower is not None:
                self._leader_released = False
                self._leader_pub.publish(joint_state(JOINT_NAMES, self.arms.to_leader(self._follower), t))
        elif not self._leader_released:
            self._leader_released = True
            self._leader_pub.publish(joint_state([], [], t))  # empty = release torque now

    def _held(self) -> str:
        """Why the follower must hold whatever the inputs say ("" = it need not)."""
        return "; ".join([r for r in self._latched.values() if r] + list(self._arm_holds.values()))

    def _watch_pedal(self, t: int) -> None:
        """Hold once the pedal node, heard before, has been silent for longer than pedal_timeout_ms."""
        if self._pedal_heard_ns is None or self._pedal_silent:
            return
        silent_ms = (t - self._pedal_heard_ns) / 1e6
        bound = self.params.values.pedal_timeout_ms
        if silent_ms > bound:
            self._pedal_silent = True
            reason = (f"the pedal is silent ({silent_ms:.0f} ms without its heartbeat, bound {bound:.0f} ms: its node "
                      "died or its device vanished): no takeover is possible; holding until it is heard again")
            self.get_logger().error(f"holding the follower: {reason}")
            self._latched["pedal"] = reason

    def _tick(self, t: int) -> None:
        self._watch_pedal(t)
        if self.realtime is None:
            p = self.params.values
            self.realtime = request_realtime(p.thread_priority, lock_memory=p.lock_memory,
                                             say=lambda message: log_at(self, "warning", message))
        self._last_tick_ns = t
        out = self.blender.tick(t)
        held = self._held()
        if held:
            out.holding, out.reason = True, held
        begins = bool(out.reason) and out.reason != self._hold_reason
        if out.reason != self._hold_reason:
            self._publish_fault(out.reason)
        self._hold_reason = out.reason
        if out.reason:
            self._holds[out.reason] = self._holds.get(out.reason, 0) + 1
        if begins:  # say so now, not at the next 1 Hz status
            self.get_logger().warning(f"holding the follower: {out.reason}")
            self._publish_diagnostics_locked()
        self._drive_leader(t)
        if out.command is not None:
            seed = self._follower if self._follower is not None else out.command
            if out.holding:
                self.guard.hold()
            else:
                self.guard.command(JOINT_NAMES, self._probed(out.command, t), t)
            sent = self.guard.step(seed, t)
            self._cmd_pub.publish(joint_state(JOINT_NAMES, sent, t))
        values = [out.alpha, float(mode_code(out.mode)), float(out.intervention_id), float(trigger_code(out.trigger))]
        self._auth_pub.publish(joint_state(AUTHORITY_FIELDS, values, t))
        self._publish_events()

    def _publish_fault(self, reason: str) -> None:
        """`teleop/fault` (latched), as a hold begins, changes or ends: what holds the follower."""
        level = (DiagnosticStatus.ERROR if self._arm_holds or self._latched["pedal"]
                 else DiagnosticStatus.WARN if reason else DiagnosticStatus.OK)
        said = (int.from_bytes(level, "little") if isinstance(level, bytes) else int(level), reason)
        if said != self._fault_said:
            self._fault_said = said
            self._fault_pub.publish(DiagnosticStatus(level=level, name=f"{self.get_name()}: hold",
                                                     message=reason or "not held"))

    def _publish_events(self) -> None:
        for kind, spans in (
            (INTERVENTION_KIND, self.blender.interventions),
            (CORRECTION_KIND, self.blender.corrections),
        ):
            for iv in spans:
                state = (iv.end_ns, iv.trigger)
                if self._reported.get((kind, iv.id)) != state:
                    self._reported[(kind, iv.id)] = state
                    self._event_pub.publish(String(data=json.dumps(event(iv, kind))))

    def _publish_diagnostics(self) -> None:
        with self._lock:
            self._publish_diagnostics_locked()

    def _publish_diagnostics_locked(self) -> None:
        """WARN while holding or when any hold happened since the last status (a stall of a few
        ticks between two statuses is still reported), or when interventions are unlabelled."""
        holds, self._holds = self._holds, {}
        unlabelled = [iv.id for iv in self.blender.interventions if iv.end_ns is not None and iv.trigger is None]
        unlabelled_c = [c.id for c in self.blender.corrections if c.end_ns is not None and c.trigger is None]
        values = {"mode": self.blender.mode, "interventions": len(self.blender.interventions),
                  "unlabelled": unlabelled, "corrections": len(self.blender.corrections),
                  "unlabelled_corrections": unlabelled_c, "held_ticks": sum(holds.values()),
                  "clamped": self.guard.stats.clamped, "rate_limited": self.guard.stats.rate_limited}
        values["held"] = self._held()
        values.update((self.realtime or Realtime(0, 0, False)).values)
        values["pedal_lost"] = self._pedal_lost
        # How old the pedal node's last message is (None: never heard, so a silence is not watched).
        values["pedal_heard_ms_ago"] = (None if self._pedal_heard_ns is None
                                        else round((now_ns() - self._pedal_heard_ns) / 1e6))
        if self._hold_reason:
            message = f"holding: {self._hold_reason}"
        elif holds:
            message = "held since the last status: " + ", ".join(f"{r} ({n} ticks)" for r, n in holds.items())
        else:
            message = "; ".join([f"unlabelled interventions {unlabelled}"] * bool(unlabelled)
                                + [f"unlabelled corrections {unlabelled_c}"] * bool(unlabelled_c)) or "ok"
        level = "OK" if message == "ok" else "ERROR" if self._arm_holds or self._latched["pedal"] else "WARN"
        if self._pedal_lost and level == "OK":
            message, level = "the pedal is lost: no takeover is possible until it is back", "WARN"
        self._diag_pub.publish(diag_array([diag_status(f"{self.get_name()}: authority", level, message, values)]))


def main() -> int:
    return spin_node(TeleopNode, name="teleop")


if __name__ == "__main__":
    sys.exit(main())
