"""`arm_driver`: one SO-101 arm on a Feetech bus ↔ ROS joint topics (radians, source stamps).

A thin node over `hw.arm.ArmDriver` (configure, tick, safety, torque, reconnect — no ROS): its
bus loop runs in this node's thread at `rate_hz` and every sample is published on
`<role>/joint_states`, stamped with the bus's estimate of when the servos latched the sample
(`Reading.stamp_ns`, CLOCK_MONOTONIC) converted to ROS time (`common.stamp`); a servo that stopped
answering is left out of the message (its name missing), the others go on. The command watchdog
runs on the driver's own monotonic clock (when a command arrived), never on a header stamp.
`<role>/joint_command` sets the target (the shared `safety.CommandGuard`: the calibrated range
narrowed by `joint_*_limits`, `max_speed_rad_s`, `max_relative_target_rad`, stale-command hold);
for a leader an EMPTY position list releases the torque at once.

Force feedback on a leader (`feedback`: `off`, `gripper` or `contact`; docs/teleop.md "Force
feedback"): the node listens to the follower's `follower/joint_states` and passes it on — its
gripper mapped into the leader's as the same fraction of each calibrated range when
`follower_calibration_file` is given (`ArmPair`, as the teleop node maps it) — so that while the
follower's jaws hold an object the leader's trigger pushes back softly (`feedback_torque_limit`),
and with `contact` each body joint whose follower meets something resists too
(`feedback_contact_*`). What it feels (the follower's states, the teleop node's authority and fault,
the pedal) the bus thread takes itself right before each tick, every message in order, each
stamped with its arrival; the executor never wakes for them (`BusThreadTakes`).
Every leader, whatever its `feedback`, publishes `leader/feedback` once per bus tick: per joint the
goal minus the present position (rad) and the torque ceiling (Torque_Limit / 1000), 0.0 where a
servo has no torque, stamped right after the tick's write (`hw.arm.rendering.Rendered`).

Faults and the e-stop (`hw.arm.faults`): a servo that protected itself (overload, overcurrent,
overheat, voltage), cut its torque, stopped answering or reached `temperature_stop_c` latches a
hold: every goal frozen where the arm was, commands ignored, ERROR on `/diagnostics` and on
`<role>/fault` (latched DiagnosticStatus, what the teleop node holds on and the validator rejects
as SERVO_FAULT), until the operator calls `~/reset` (std_srvs/Trigger), which re-enables the servos
that cut their torque. `~/estop` (std_srvs/Trigger) holds the same way — or cuts torque, with
`estop_cuts_torque` — latched at once until `~/reset`, across any reconnect; it answers success only
once the servos read back the hold goals (or torque off), failure with the reason otherwise (the port
is away, the bus loop died, no acknowledgement within 0.5 s). A bus loop that dies of any exception
is ERROR on `/diagnostics` and the node exits 1. `/diagnostics` once a second and at once when a
hold begins or ends: connection, achieved against configured rate (a rate the adapter cannot give
is WARN), per-read latency, bus and guard counters, voltage/temperature/fault bits per servo; a
lost port is ERROR naming it while the loop reconnects with backoff (and one line on the console).
`JointState.effort` is Present_Load as a signed fraction of the servo's maximum torque (−1..1).
Every parameter is read-only (a running arm's port, calibration and safety settings do not
change under it). On exit the bus thread stops first, then the arm parks at its rest pose through
the soft start and its torque is released (each servo checked), or it holds (`exit_action`).

Safe by default on real hardware: a port is real unless the session that started its simulator
says `simulated: true`. A real port needs a calibration file of its own (refused at start with
how to make one), and a simulator's calibration (`config/calibration/*_sim.yaml`) is refused on
it; a calibration that differs from what the servos hold in EEPROM stops the node with the joint
and both values (`hw.errors.CalibrationMismatch`) — the driver never writes calibration to EEPROM.
"""
from __future__ import annotations

import sys
import threading
from array import array
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from rclpy.callback_groups import CallbackGroup
from rclpy.node import Node
from rclpy.subscription import MessageInfo, Subscription
from sensor_msgs.msg import JointState, Joy
from std_srvs.srv import Trigger

from teleop_flywheel.core.calibration import ArmPair, load_calibration, sim_calibration_file
from teleop_flywheel.core.clock import from_ros_ns, now_ns
from teleop_flywheel.core.labels import mode_code
from teleop_flywheel.core.priority import RT_PRIORITY, Realtime, request_realtime
from teleop_flywheel.core.safety import CommandGuard
from teleop_flywheel.core.so101 import BAUD_RATE, JOINT_NAMES
from teleop_flywheel.core.topics import (
    AUTHORITY,
    AUTHORITY_FIELDS,
    DIAGNOSTICS,
    ESTOP,
    LEADER_FEEDBACK,
    PEDAL_FRAME,
    PEDAL_HEARTBEAT_FRAME,
    PEDAL_JOY,
    RESET,
    TELEOP_FAULT,
    arm_command,
    arm_fault,
    arm_state,
)
from teleop_flywheel.hw.arm import ROLES, ArmConfig, ArmDriver, Reading, effective_limits
from teleop_flywheel.hw.arm.config import EXIT_ACTIONS, FEEDBACK_MODES
from teleop_flywheel.hw.arm.settings import DEFAULT_ACCELERATION
from teleop_flywheel.hw.feetech.bus import FeetechBus
from teleop_flywheel.recording.mcap.cdr import JointStateReader
from teleop_flywheel.recording.mcap.exceptions import CdrError
from teleop_flywheel.ros.errors import ParameterError
from teleop_flywheel.ros.nodes.common import (
    CONTROL_QOS,
    LATCHED_QOS,
    STREAM_QOS,
    diag_array,
    diag_status,
    joint_state,
    log_at,
    spin_node,
    stamp,
)
from teleop_flywheel.ros.params import NodeParameters, NodeParams, spec

ESTOP_ACK_S = 0.5  # how long ~/estop waits for the servos to read back the hold before it answers failure
_LIMIT = (-6.3, 6.3)  # any joint limit (rad) is within one turn either way: the defaults leave the calibrated range


Handler = Callable[[Any, MessageInfo], None]  # a taken subscription's: (message or its bytes, its info)


class BusThreadTakes(CallbackGroup):
    """Subscriptions no executor waits on or runs: the bus thread takes their messages itself. A
    message rclpy's executor delivers costs the process a wait-set build and a wake-up (~0.6 ms of
    CPU each, bench/rig_cpu.py --part feedback): the follower's 200 Hz stream tripled a feeling
    leader's CPU per tick, to feel what the bus thread reads once per tick anyway."""

    def can_execute(self, entity: object) -> bool:
        return False

    def beginning_execution(self, entity: object) -> bool:
        return False


def arrived_ns(info: MessageInfo) -> int:
    """When the middleware received a message (`now_ns` clock); now if it does not say."""
    received = info["received_timestamp"]
    return from_ros_ns(received) if received else now_ns()


@dataclass
class ArmDriverParams(NodeParams):
    port: str = spec("/dev/so101_follower", "serial port of the arm's bus (a stable udev link)", required=True)
    role: str = spec("follower", "leader (human-moved, torque off) or follower (torque on)", choices=ROLES)
    rate_hz: float = spec(200.0, "bus loop rate (Hz): one sync read + one sync write per tick", range=(1.0, 2000.0))
    baudrate: int = spec(BAUD_RATE, "bus baud rate", range=(9600, 1_000_000))
    calibration_file: str = spec(
        "", "calibration YAML (or LeRobot JSON) of this arm, made by teleop-flywheel calibrate"
    )
    simulated: bool = spec(False, "the port is a simulator this session started (allows simulator calibrations)")
    max_speed_rad_s: float = spec(2.0, "fastest any joint's goal may move (rad/s): a far target is approached at "
                                  "this speed, never snapped to (the STS3215 tops out near 4.7)", range=(0.1, 4.7))
    max_relative_target_rad: float = spec(0.35, "largest goal minus present position of any joint (rad), as "
                                          "LeRobot's max_relative_target; 0 = off", range=(0.0, 6.3))
    watchdog_ms: float = spec(100.0, "hold position when no command for this long (ms); 0 = off",
                              range=(0.0, 10_000.0))
    exit_action: str = spec("park", "when the node exits (Ctrl-C, SIGTERM, the supervisor's death): park (move to "
                            "rest_pose at max_speed_rad_s, then release torque), hold (torque left on) or release "
                            "(at once: a raised arm falls)", choices=EXIT_ACTIONS)
    rest_pose: list[float] = spec([], "the pose parked in at exit (rad, joint order, 6 values); empty = where the "
                                  "arm was found at start with every servo limp (a pose it rests in unpowered)",
                                  range=_LIMIT)
    joint_lower_limits: list[float] = spec([_LIMIT[0]] * len(JOINT_NAMES),
                                           "lower joint limits (rad), joint order of so101.JOINT_NAMES; the "
                                           "calibrated range is always the outer bound (the default)",
                                           range=_LIMIT, length=len(JOINT_NAMES))
    joint_upper_limits: list[float] = spec([_LIMIT[1]] * len(JOINT_NAMES),
                                           "upper joint limits (rad), joint order of so101.JOINT_NAMES; the "
                                           "calibrated range is always the outer bound (the default)",
                                           range=_LIMIT, length=len(JOINT_NAMES))
    leader_torque_limit: int = spec(300, "Torque_Limit while the leader follows commands", range=(0, 1000))
    slow_period_s: float = spec(1.0, "period of voltage/temperature/status/torque reads (s)", range=(0.05, 60.0))
    acceleration: int = spec(DEFAULT_ACCELERATION, "the servos' Acceleration register (100 steps/s² units; "
                             "254 = LeRobot's, a snap)", range=(0, 254))
    grip_force_limit: float = spec(0.2, "follower gripper: a close stops pressing at this load (fraction of the "
                                   "servo's maximum torque, below its 0.25 overload setting); 0 = off",
                                   range=(0.0, 1.0))
    temperature_warn_c: float = spec(55.0, "a servo this hot is a warning (°C)", range=(20.0, 70.0))
    temperature_stop_c: float = spec(65.0, "a servo this hot holds the arm until reset (°C); the servo cuts its "
                                     "own torque at 70", range=(20.0, 70.0))
    estop_cuts_torque: bool = spec(False, "~/estop cuts torque (the arm falls limp) instead of holding")
    feedback: str = spec("off", "leader: force feedback, off, gripper (the follower's grasp pushes back on the "
                         "leader's trigger) or contact (that, and every joint whose follower meets something; "
                         "docs/teleop.md)", choices=FEEDBACK_MODES)
    feedback_torque_limit: int = spec(150, "leader: the gripper's Torque_Limit while it renders a grasp (0.1 %; "
                                      "150 = ~0.08 N·m at the trigger's axis, docs/teleop.md)", range=(0, 300))
    feedback_grasp_load: float = spec(0.1, "leader: the follower gripper's load (fraction of its maximum torque) "
                                      "that is a grasp", range=(0.01, 1.0))
    feedback_contact_load: float = spec(0.15, "leader, contact: the follower's load beyond what free motion and "
                                        "gravity produce (fraction of its maximum torque) at which a joint "
                                        "resists (half of it for a joint standing still: blocked)",
                                        range=(0.05, 1.0))
    feedback_contact_gain: float = spec(1.0, "leader, contact: the joint's torque ceiling (fraction of its maximum "
                                        "torque) per unit of excess load above where it lets go (half that "
                                        "threshold)",
                                        range=(0.0, 10.0))
    feedback_contact_torque_limit: int = spec(300, "leader, contact: the highest Torque_Limit a body joint resists "
                                              "with (0.1 %; 300 = ~0.39 N·m at shoulder_lift, ~1.2 N at the "
                                              "handle, ~0.16 N·m at the wrist, docs/teleop.md)", range=(0, 300))
    follower_calibration_file: str = spec("", "leader with feedback: the follower's calibration, to map its gripper "
                                          "into the leader's (empty: by angle)")
    thread_priority: int = spec(RT_PRIORITY, "SCHED_FIFO priority of the bus loop's thread (of every thread when "
                                "the node has its own process), where permitted (ros2_control's thread_priority); "
                                "0 = the normal policy", range=(0, 99))
    lock_memory: bool = spec(True, "lock the process's memory (mlockall) where permitted (ros2_control's lock_memory)")


class ArmDriverNode(Node):
    """One arm's bus loop, joint states, commands with safety, diagnostics (see module doc)."""

    def __init__(self, node_name: str = "arm_driver", **kwargs: Any) -> None:
        super().__init__(node_name, **kwargs)
        self.params = NodeParameters(self, ArmDriverParams)
        p = self.params.values
        self._check_calibration_choice(p)
        calibration = load_calibration(p.calibration_file)  # CalibrationError names the file and field
        try:
            limits = effective_limits(calibration, p.joint_lower_limits, p.joint_upper_limits)
        except ValueError as exc:
            raise ParameterError(self.get_fully_qualified_name(), "joint_lower_limits/joint_upper_limits",
                                 [p.joint_lower_limits, p.joint_upper_limits], str(exc)) from None
        guard = CommandGuard(JOINT_NAMES, limits, max_speed=p.max_speed_rad_s,
                             max_relative=p.max_relative_target_rad or None,
                             watchdog_ns=int(p.watchdog_ms * 1e6) or None)
        try:
            config = ArmConfig(role=p.role, leader_torque_limit=p.leader_torque_limit, slow_period_s=p.slow_period_s,
                               acceleration=p.acceleration, grip_force_limit=p.grip_force_limit,
                               temperature_warn_c=p.temperature_warn_c, temperature_stop_c=p.temperature_stop_c,
                               estop_cuts_torque=p.estop_cuts_torque, exit_action=p.exit_action,
                               rest_pose=tuple(p.rest_pose) if p.rest_pose else None, feedback=p.feedback,
                               feedback_torque_limit=p.feedback_torque_limit,
                               feedback_grasp_load=p.feedback_grasp_load,
                               feedback_contact_load=p.feedback_contact_load,
                               feedback_contact_gain=p.feedback_contact_gain,
                               feedback_contact_torque_limit=p.feedback_contact_torque_limit)
        except ValueError as exc:
            if "feedback" in str(exc):
                raise ParameterError(self.get_fully_qualified_name(), "feedback", p.feedback, str(exc)) from None
            what = "rest_pose" if "rest_pose" in str(exc) else "temperature_warn_c/temperature_stop_c"
            value = p.rest_pose if what == "rest_pose" else [p.temperature_warn_c, p.temperature_stop_c]
            raise ParameterError(self.get_fully_qualified_name(), what, value, str(exc)) from None
        self._pub = self.create_publisher(JointState, arm_state(p.role), STREAM_QOS)
        self._feedback_pub = (self.create_publisher(JointState, LEADER_FEEDBACK, STREAM_QOS) if p.role == "leader"
                              else None)
        self._feedback: JointState | None = None
        self._diag = self.create_publisher(DiagnosticArray, DIAGNOSTICS, 10)
        self._fault = self.create_publisher(DiagnosticStatus, arm_fault(p.role), LATCHED_QOS)
        self._fault_state: tuple[str, str] | None = None
        self._diag_lock = threading.Lock()  # the timer and the bus thread (a hold begins) both publish
        self.arm = ArmDriver(FeetechBus(p.port, p.baudrate), calibration, guard, config, log=self._log,
                             on_change=self._publish_diagnostics)
        self.create_subscription(JointState, arm_command(p.role), self._on_command, CONTROL_QOS)
        self._taken: list[Subscription[Any]] = []  # each handler takes (message, MessageInfo)
        self._follower_cdr = JointStateReader()  # the follower's samples are taken raw (`_on_follower`)
        self._authority_cdr = JointStateReader()  # and so is the teleop node's authority
        self._follower_order: tuple[tuple[str, ...], list[int] | None] = ((), None)
        if p.feedback != "off":
            follower = load_calibration(p.follower_calibration_file) if p.follower_calibration_file else None
            self._pair = ArmPair(calibration if follower else None, follower)
            # The rig's say (`hw.arm.ArmDriver.gate`): rendered only while the teleop node says the
            # human alone drives, nothing holds it, and the pedal is not lost.
            self._rig = {"authority": "the teleop node's authority not heard yet", "held": "", "pedal": ""}
            self._authority_ns = 0
            self.arm.gate(self._rig["authority"], 0)
            taken = BusThreadTakes()
            self._taken = [
                self.create_subscription(JointState, arm_state("follower"), self._on_follower, STREAM_QOS,
                                         callback_group=taken, raw=True),
                self.create_subscription(JointState, AUTHORITY, self._on_authority, CONTROL_QOS, callback_group=taken,
                                         raw=True),
                self.create_subscription(DiagnosticStatus, TELEOP_FAULT, self._on_teleop_fault, LATCHED_QOS,
                                         callback_group=taken),
                self.create_subscription(Joy, PEDAL_JOY, self._on_pedal, STREAM_QOS, callback_group=taken)]
        self.create_service(Trigger, f"~/{ESTOP}", self._srv_estop)
        self.create_service(Trigger, f"~/{RESET}", self._srv_reset)
        self.create_timer(1.0, self._publish_diagnostics)
        self._closed = False
        self._stop = threading.Event()
        self.realtime = Realtime(0, 0, False)  # until the bus thread has asked
        self._sample: JointState | None = None
        self._thread = threading.Thread(target=self._bus_loop, args=(p.rate_hz,), name=f"arm-driver-{p.role}",
                                        daemon=True)
        self._thread.start()

    def _bus_loop(self, rate_hz: float) -> None:
        """The bus thread: real-time where permitted (said once, with the fix, if refused), then the loop."""
        p = self.params.values
        self.realtime = request_realtime(p.thread_priority, lock_memory=p.lock_memory,
                                         say=lambda message: self._log("warning", message))
        self.arm.run(rate_hz, self._stop, self._publish, self._take_inputs if self._taken else None)

    def _take_inputs(self) -> None:
        """Bus thread, right before a tick: every message that arrived since the last, in order."""
        for sub in self._taken:
            handler = cast(Handler, sub.callback)
            with sub.handle:
                while (taken := sub.handle.take_message(sub.msg_type, sub.raw)) is not None:
                    handler(*taken)

    @property
    def failure(self) -> str:
        """Why this node cannot go on (spin_node ends the process with it), else empty."""
        return self.arm.state.fatal

    def _check_calibration_choice(self, p: ArmDriverParams) -> None:
        node = self.get_fully_qualified_name()
        make_one = (f"make one with: teleop-flywheel calibrate --port {p.port} --arm {p.role} --out "
                    f"~/so101_{p.role}.yaml (docs/arm_driver.md)")
        if not p.calibration_file:
            raise ParameterError(node, "calibration_file", "", f"a calibration of this arm is required; {make_one}")
        sims = {sim_calibration_file(role).resolve() for role in ROLES}
        if not p.simulated and Path(p.calibration_file).expanduser().resolve() in sims:
            raise ParameterError(node, "calibration_file", p.calibration_file,
                                 f"a simulator's calibration is used only with simulators (simulated: true) and "
                                 f"{p.port} is a real port; {make_one}")

    def _log(self, level: str, message: str) -> None:
        log_at(self, level, message)

    def _publish(self, reading: Reading) -> None:
        """Bus thread: one sample out, stamped at the bus. One message, refilled each tick: the bus
        thread is its only user and publishing serialises it at once."""
        msg = self._sample
        if msg is None or tuple(msg.name) != reading.names:
            msg = self._sample = joint_state(reading.names, (), 0, frame_id=self.arm.calibration.arm_id)
        stamp(msg.header.stamp, reading.stamp_ns)
        msg.position = array("d", reading.positions)
        msg.velocity = array("d", reading.velocities)
        msg.effort = array("d", reading.efforts)
        self._pub.publish(msg)
        rendered = self.arm.rendered
        if self._feedback_pub is not None and rendered is not None:
            out = self._feedback
            if out is None:
                out = self._feedback = joint_state(JOINT_NAMES, (), 0, frame_id=self.arm.calibration.arm_id)
            stamp(out.header.stamp, rendered.stamp_ns)
            out.position = array("d", rendered.offsets)
            out.effort = array("d", rendered.ceilings)
            self._feedback_pub.publish(out)

    def _srv_estop(self, _request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        """Success only once the servos read back the hold (or torque off); else why not. The e-stop
        is latched either way (a port that comes back is held)."""
        ok, why = self.arm.estop("~/estop called").wait(ESTOP_ACK_S)
        response.success = ok
        done = "torque cut" if self.arm.config.estop_cuts_torque else "holding"
        response.message = (f"{self.arm.role} arm e-stopped: {done} until ~/reset ({why})" if ok
                            else f"{self.arm.role} arm e-stop not acknowledged: {why}")
        return response

    def _srv_reset(self, _request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        holding = self.arm.state.holding
        self.arm.reset()
        response.success = True
        response.message = f"{self.arm.role} arm reset" + (f" (was: {holding})" if holding else " (nothing held)")
        return response

    def _on_command(self, msg: JointState) -> None:
        if not msg.position:
            self.arm.release()  # empty = a leader lets go (a follower ignores it)
            return
        self.arm.command(msg.name, msg.position, now_ns())

    def _on_follower(self, data: bytes, info: MessageInfo) -> None:
        """The follower, felt by this leader; its staleness counts from arrival (this host's
        monotonic clock), so a follower whose samples stop is let go of. A sample without every
        joint's position, velocity and load is not felt (a silent servo: the follower holds), nor
        is one that does not decode. Taken as CDR bytes and read by `JointStateReader`: rclpy's
        JointState, built and checked field by field per sample, cost the leader more than the
        rest of feeling it (bench/rig_cpu.py --part feedback)."""
        try:
            names, position, velocity, effort = self._follower_cdr.read(data)
        except CdrError:
            return
        if names is not self._follower_order[0]:  # a new layout (the reader keeps one while it lasts)
            whole = not set(JOINT_NAMES) - set(names)
            self._follower_order = (names, [names.index(name) for name in JOINT_NAMES] if whole else None)
        order = self._follower_order[1]
        if order is None or not len(position) == len(velocity) == len(effort) == len(names):
            return
        self.arm.feel(self._pair.to_leader([position[k] for k in order]), [effort[k] for k in order],
                      [velocity[k] for k in order], arrived_ns(info))

    def _on_authority(self, data: bytes, info: MessageInfo) -> None:
        """The teleop node's every tick (its authority, taken raw as the follower's states are)."""
        try:
            names, position, _velocity, _effort = self._authority_cdr.read(data)
        except CdrError:
            return
        values = dict(zip(names, position, strict=False))
        alpha, mode = values.get(AUTHORITY_FIELDS[0]), values.get(AUTHORITY_FIELDS[1])
        if alpha is None or mode is None:
            return
        why = ("" if mode == mode_code("teleop") and alpha >= 1.0 else
               "policy mode" if mode != mode_code("teleop") else "the human does not drive alone")
        self._say("authority", why, arrived_ns(info))  # a teleop node that goes quiet is let go of

    def _on_teleop_fault(self, msg: DiagnosticStatus, _info: MessageInfo) -> None:
        self._say("held", "" if msg.level == DiagnosticStatus.OK else f"the teleop node holds ({msg.message})")

    def _on_pedal(self, msg: Joy, _info: MessageInfo) -> None:
        """The pedal node's own messages (the console's space bar shares the topic): one without
        buttons says its device is lost."""
        if msg.header.frame_id in (PEDAL_FRAME, PEDAL_HEARTBEAT_FRAME):
            self._say("pedal", "" if msg.buttons else "the pedal is lost")

    def _say(self, what: str, why: str, authority_ns: int | None = None) -> None:
        self._rig[what] = why
        self._authority_ns = self._authority_ns if authority_ns is None else authority_ns
        self.arm.gate("; ".join(r for r in self._rig.values() if r), self._authority_ns)

    def _publish_diagnostics(self) -> None:
        """Once a second, and from the bus thread the moment a hold begins or ends."""
        with self._diag_lock:
            self._publish_diagnostics_locked()

    def _publish_diagnostics_locked(self) -> None:
        health = self.arm.health(self.params.values.rate_hz)
        self.arm.acknowledge()
        status = diag_status(f"{self.get_name()}: {self.arm.role} arm", health.level, health.message,
                             {**health.values, **self.realtime.values}, hardware_id=self.arm.port)
        self._diag.publish(diag_array([status]))
        holding = self.arm.state.holding
        fault = ("ERROR" if self.arm.state.faults else "WARN" if holding else "OK",
                 holding or f"{self.arm.role} arm not held")
        if fault != self._fault_state:
            self._fault_state = fault
            self._fault.publish(diag_status(f"{self.arm.role} arm", fault[0], fault[1],
                                            {"servo_fault": self.arm.state.faults.summary(),
                                             "estop": self.arm.state.estop}, hardware_id=self.arm.port))

    def close(self) -> None:
        """Stop the bus thread (it publishes no more), then park and release torque, or hold, as
        `exit_action` says (`hw.arm.parking`). Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        self._thread.join(5.0)
        self.arm.close()


def main() -> int:
    return spin_node(ArmDriverNode, name="arm_driver")


if __name__ == "__main__":
    sys.exit(main())
