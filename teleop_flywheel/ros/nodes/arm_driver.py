"""`arm_driver`: one SO-101 arm on a Feetech bus ↔ ROS joint topics (radians, source stamps).

The bus loop runs in its own thread at `rate_hz`: one SYNC_READ of Present_Position+Velocity,
publish `/<role>/joint_states` stamped with the bus's arrival-time stamp, then (when torque is
on) one SYNC_WRITE of Goal_Position produced by the shared `safety.CommandGuard` (limits, max
step per tick, stale-command hold). Every `slow_period_s` a second SYNC_READ fetches voltage,
temperature and status bits for `/diagnostics`.

Follower: torque on, tracks `/follower/joint_command`. Leader: torque off (a human moves it);
`/leader/joint_command` with positions → torque on at `leader_torque_limit` and track (the leader
follows the follower while a policy drives); an EMPTY position list, or commands going stale →
torque released at once. A serial failure never crashes the node: diagnostics go to ERROR naming
the port and the bus reconnects with exponential backoff.
"""
from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field

from diagnostic_msgs.msg import DiagnosticArray
from rcl_interfaces.msg import ParameterDescriptor
from rclpy.node import Node
from sensor_msgs.msg import JointState

from teleop_flywheel.core.calibration import RAD_PER_STEP, ArmCalibration, load_calibration
from teleop_flywheel.core.clock import NS_PER_S, now_ns
from teleop_flywheel.core.safety import CommandGuard, JointLimits
from teleop_flywheel.core.so101 import BAUD_RATE, DEFAULT_LIMITS_RAD, JOINT_NAMES, MODEL_NUMBER
from teleop_flywheel.core.topics import DIAGNOSTICS, arm_command, arm_state
from teleop_flywheel.hw.feetech import codec as proto
from teleop_flywheel.hw.feetech.bus import BusError, BusTimeout, FeetechBus, PortUnavailable, ServoError
from teleop_flywheel.hw.feetech.control_table import error_names, register
from teleop_flywheel.ros.nodes.common import CONTROL_QOS, STREAM_QOS, diag_array, diag_status, joint_state, spin_node

ROLES = ("leader", "follower")
POS_ADDR = register("Present_Position").address  # Present_Position (56) + Present_Velocity (58)
SLOW_ADDR = register("Present_Voltage").address  # Voltage (62), Temperature (63), -, Status (65), Moving (66)
# 5 bytes, deliberately not the position read's 4: a late reply to one can never pass for the other.
SLOW_SIZE = register("Moving").address - SLOW_ADDR + 1
BACKOFF_S = (0.1, 2.0)  # first retry, cap


@dataclass
class DriverState:
    """What the bus thread knows, shared with the diagnostics timer under a lock."""

    connected: bool = False
    last_error: str = ""
    ticks: int = 0
    read_errors: int = 0
    reconnects: int = 0
    torque: bool = False
    tick_times: deque[int] = field(default_factory=lambda: deque(maxlen=1000))
    voltage_v: dict[str, float] = field(default_factory=dict)
    temperature_c: dict[str, int] = field(default_factory=dict)
    error_bits: dict[str, int] = field(default_factory=dict)

    def achieved_hz(self) -> float:
        if len(self.tick_times) < 2:
            return 0.0
        span = self.tick_times[-1] - self.tick_times[0]
        return (len(self.tick_times) - 1) * NS_PER_S / span if span > 0 else 0.0


def effective_limits(cal: ArmCalibration, lower: list[float], upper: list[float]) -> JointLimits:
    """Parameter limits intersected with the calibrated range of each joint (radians)."""
    if len(lower) != len(JOINT_NAMES) or len(upper) != len(JOINT_NAMES):
        raise ValueError(f"joint_lower_limits/joint_upper_limits need {len(JOINT_NAMES)} values (radians)")
    cal_range = cal.rad_limits()
    bounds = {}
    for name, lo, hi in zip(JOINT_NAMES, lower, upper):
        clo, chi = cal_range[name]
        bounds[name] = (max(lo, clo), min(hi, chi))
        if bounds[name][0] > bounds[name][1]:
            raise ValueError(f"{name}: limits [{lo}, {hi}] do not overlap the calibrated range [{clo:.3f}, {chi:.3f}]")
    return JointLimits.from_dict(bounds)


class ArmDriverNode(Node):
    """One arm's bus loop, joint states, commands with safety, diagnostics (see module doc)."""

    def __init__(self, node_name: str = "arm_driver", **kwargs: object) -> None:
        super().__init__(node_name, **kwargs)

        def param(name: str, default: object, text: str) -> object:
            return self.declare_parameter(name, default, ParameterDescriptor(description=text)).value

        self.port = str(param("port", "/dev/so101_follower", "serial port of the arm's bus (a stable udev link)"))
        self.role = str(param("role", "follower", "leader (human-moved, torque off) or follower (torque on)"))
        if self.role not in ROLES:
            raise ValueError(f"arm_driver: role must be one of {ROLES}, got {self.role!r}")
        self.rate_hz = float(param("rate_hz", 200.0, "bus loop rate (Hz): one sync read + one sync write per tick"))
        if not 1.0 <= self.rate_hz <= 2000.0:
            raise ValueError(f"arm_driver: rate_hz must be within 1..2000, got {self.rate_hz}")
        self.baudrate = int(param("baudrate", BAUD_RATE, "bus baud rate"))
        cal_file = str(param("calibration_file", "", "calibration YAML of this arm (config/calibration/*.yaml)"))
        if not cal_file:
            raise ValueError("arm_driver: parameter calibration_file is empty; give this arm's calibration YAML")
        self.calibration = load_calibration(cal_file)
        max_step = float(param("max_step_rad", 0.05, "largest change of a joint's goal per tick (rad); 0 = off"))
        watchdog_ms = float(param("watchdog_ms", 100.0, "hold position when no command for this long (ms); 0 = off"))
        self.torque_on_exit = bool(param("torque_on_exit", False, "keep torque on when the node exits"))
        lower = list(param("joint_lower_limits", [lo for lo, _ in DEFAULT_LIMITS_RAD.values()],
                           "lower joint limits (rad), joint order of so101.JOINT_NAMES"))
        upper = list(param("joint_upper_limits", [hi for _, hi in DEFAULT_LIMITS_RAD.values()],
                           "upper joint limits (rad), joint order of so101.JOINT_NAMES"))
        self.leader_torque_limit = int(param("leader_torque_limit", 300,
                                             "Torque_Limit (0..1000) while the leader follows commands"))
        self.slow_period_s = float(param("slow_period_s", 1.0, "period of voltage/temperature/status reads (s)"))
        self.limits = effective_limits(self.calibration, lower, upper)
        self.guard = CommandGuard(JOINT_NAMES, self.limits, max_step=max_step if max_step > 0 else None,
                                  watchdog_ns=int(watchdog_ms * 1e6) if watchdog_ms > 0 else None)

        self.state = DriverState()
        self._lock = threading.Lock()
        self._release = threading.Event()  # leader: empty command → release torque next tick
        self._bus: FeetechBus | None = None
        self._closed = False
        self._ever_connected = False
        self._ids = self.calibration.ids
        self._pub = self.create_publisher(JointState, arm_state(self.role), STREAM_QOS)
        self._diag = self.create_publisher(DiagnosticArray, DIAGNOSTICS, 10)
        self.create_subscription(JointState, arm_command(self.role), self._on_command, CONTROL_QOS)
        self.create_timer(1.0, self._publish_diagnostics)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"arm-driver-{self.role}", daemon=True)
        self._thread.start()

    # -- commands (executor thread) ------------------------------------------------------
    def _on_command(self, msg: JointState) -> None:
        if not msg.position:
            if self.role == "leader":
                self._release.set()
            return
        with self._lock:
            self.guard.command(msg.name, msg.position, now_ns())

    # -- bus thread ----------------------------------------------------------------------
    def _loop(self) -> None:
        period_ns = int(NS_PER_S / self.rate_hz)
        backoff = BACKOFF_S[0]
        next_tick = now_ns()
        next_slow = 0
        while not self._stop.is_set():
            if self._bus is None:
                if not self._connect():
                    self._stop.wait(backoff)
                    backoff = min(backoff * 2, BACKOFF_S[1])
                    continue
                backoff = BACKOFF_S[0]
                next_tick = now_ns()
            try:
                self._tick()
                if now_ns() >= next_slow:
                    self._slow_read()
                    next_slow = now_ns() + int(self.slow_period_s * NS_PER_S)
            except PortUnavailable as exc:
                self._lost(str(exc))
                continue
            except (BusTimeout, ServoError) as exc:
                with self._lock:
                    self.state.read_errors += 1
                    self.state.last_error = str(exc)
            next_tick += period_ns
            delay = next_tick - now_ns()
            if delay > 0:
                time.sleep(delay / NS_PER_S)
            elif delay < -period_ns:
                next_tick = now_ns()  # fell behind (load, retries): resync rather than burst

    def _connect(self) -> bool:
        bus = FeetechBus(self.port, self.baudrate)
        try:
            bus.open()
            self._configure(bus)
        except BusError as exc:
            bus.close()
            with self._lock:
                self.state.connected = False
                self.state.last_error = str(exc)
            return False
        with self._lock:
            if self._ever_connected:
                self.state.reconnects += 1
                self.get_logger().info(f"{self.port}: reconnected")
            self._ever_connected = True
            self.state.connected, self.state.last_error = True, ""
        self._bus = bus
        return True

    def _configure(self, bus: FeetechBus) -> None:
        """Check the servos, write calibration (only registers that differ) and the torque state.

        Reads are sync reads and fault bits on a write's acknowledgement are recorded, not
        raised: a servo reporting e.g. overheat must still be configured and show up in
        diagnostics, not keep the whole arm offline.
        """
        models = bus.sync_read_register("Model_Number", self._ids)
        for joint in self.calibration.joints:
            if models.values[joint.id] != MODEL_NUMBER:
                raise BusError(self.port, f"servo {joint.id} ({joint.name}) is model {models.values[joint.id]}, "
                                          f"expected {MODEL_NUMBER}")
        self._record_faults(models.errors)
        bus.sync_write_register("Torque_Enable", {i: 0 for i in self._ids})
        wanted = {j.id: {"Return_Delay_Time": 0, "Homing_Offset": j.homing_offset,
                         "Min_Position_Limit": j.range_min, "Max_Position_Limit": j.range_max}
                  for j in self.calibration.joints}
        current = {name: bus.sync_read_register(name, self._ids).values for name in wanted[self._ids[0]]}
        for sid, regs in wanted.items():
            changed = {name: v for name, v in regs.items() if current[name][sid] != v}
            for name, value in ([("Lock", 0)] + list(changed.items()) + [("Lock", 1)]) if changed else []:
                try:
                    bus.write_register(sid, name, value)
                except ServoError as exc:  # acknowledged, with fault bits
                    self._record_faults({sid: exc.bits})
        present = self._read_positions(bus)[0]
        with self._lock:
            self.guard.reset(present)
        if self.role == "follower":
            bus.sync_write_register("Goal_Position", dict(zip(self._ids, self.calibration.rad_to_raw(present))))
            bus.sync_write_register("Torque_Enable", {i: 1 for i in self._ids})
        with self._lock:
            self.state.torque = self.role == "follower"
        self._release.clear()

    def _read_positions(self, bus: FeetechBus) -> tuple[list[float], list[float], int, dict[int, int]]:
        reading = bus.sync_read(POS_ADDR, 4, self._ids)
        raw_pos, vel = [], []
        for sid in self._ids:
            value = reading.values[sid]
            raw_pos.append(proto.from_sign_magnitude(value & 0xFFFF, 15))
            vel.append(proto.from_sign_magnitude(value >> 16, 15))
        rad = self.calibration.raw_to_rad(raw_pos)
        rad_s = [j.sign * v * RAD_PER_STEP for j, v in zip(self.calibration.joints, vel)]
        return rad, rad_s, reading.stamp_ns, reading.errors

    def _tick(self) -> None:
        bus = self._bus
        assert bus is not None
        positions, velocities, stamp, errors = self._read_positions(bus)
        self._pub.publish(joint_state(JOINT_NAMES, positions, stamp, velocities, frame_id=self.calibration.arm_id))
        now = now_ns()
        with self._lock:
            self.state.ticks += 1
            self.state.tick_times.append(now)
            if errors:
                self.state.error_bits.update({self._name(sid): bits for sid, bits in errors.items()})
            torque = self.state.torque
            if self.role == "leader":
                release = self._release.is_set() or (torque and self.guard.stale(now))
                engage = not torque and not release and self.guard.has_command and not self.guard.stale(now)
            else:
                release = engage = False
            if release:
                self.guard.reset(positions)
            elif engage:
                self.guard.restart_from(positions)
            goal = self.guard.step(positions, now) if (torque or engage) and not release else None
        if release:
            self._release.clear()
            if torque:
                bus.sync_write_register("Torque_Enable", {i: 0 for i in self._ids})
            self._set_torque(False)
            return
        if engage:
            bus.sync_write_register("Torque_Limit", {i: self.leader_torque_limit for i in self._ids})
        if goal is not None:
            bus.sync_write_register("Goal_Position", dict(zip(self._ids, self.calibration.rad_to_raw(goal))))
        if engage:
            bus.sync_write_register("Torque_Enable", {i: 1 for i in self._ids})
            self._set_torque(True)

    def _set_torque(self, on: bool) -> None:
        with self._lock:
            self.state.torque = on

    def _slow_read(self) -> None:
        assert self._bus is not None
        reading = self._bus.sync_read(SLOW_ADDR, SLOW_SIZE, self._ids)
        with self._lock:
            for sid, value in reading.values.items():
                data = value.to_bytes(SLOW_SIZE, "little")
                name = self._name(sid)
                self.state.voltage_v[name] = data[0] / 10.0
                self.state.temperature_c[name] = data[1]
                self.state.error_bits[name] = data[3] | reading.errors.get(sid, 0)

    def _record_faults(self, errors: dict[int, int]) -> None:
        with self._lock:
            self.state.error_bits.update({self._name(sid): bits for sid, bits in errors.items()})

    def _name(self, sid: int) -> str:
        return JOINT_NAMES[self._ids.index(sid)]

    def _lost(self, reason: str) -> None:
        if self._bus is not None:
            self._bus.close()
        self._bus = None
        with self._lock:
            self.state.connected, self.state.torque = False, False
            self.state.last_error = reason
        self.get_logger().error(f"{self.port}: bus lost ({reason}); reconnecting with backoff")

    # -- diagnostics (executor thread) ----------------------------------------------------
    def diagnostics(self) -> tuple[str, str, dict[str, object]]:
        """(level, message, values) of this driver now; also what `/diagnostics` carries."""
        with self._lock:
            s = self.state
            stats = self._bus.stats if self._bus is not None else None
            values: dict[str, object] = {
                "port": self.port, "role": self.role, "connected": s.connected,
                "rate_hz": round(s.achieved_hz(), 1), "target_rate_hz": self.rate_hz,
                "read_errors": s.read_errors, "reconnects": s.reconnects, "torque": s.torque,
                "retries": stats.retries if stats else 0, "timeouts": stats.timeouts if stats else 0,
                "bad_checksums": stats.bad_checksums if stats else 0,
                "commands": self.guard.stats.commands, "clamped": self.guard.stats.clamped,
                "rate_limited": self.guard.stats.rate_limited, "stale_ticks": self.guard.stats.stale_ticks,
                "command_stale": self.guard.stale(now_ns()),
            }
            for name in JOINT_NAMES:
                if name in s.temperature_c:
                    values[f"{name}.temperature_c"] = s.temperature_c[name]
                    values[f"{name}.voltage_v"] = s.voltage_v[name]
                bits = s.error_bits.get(name, 0)
                values[f"{name}.error_bits"] = f"0x{bits:02x}" + (f" ({', '.join(error_names(bits))})" if bits else "")
            faults = [n for n in JOINT_NAMES if s.error_bits.get(n, 0)]
            if not s.connected:
                return "ERROR", f"port {self.port} unavailable: {s.last_error or 'not connected yet'}; reconnecting", values
            if faults:
                return "WARN", f"servo faults on {', '.join(faults)}", values
            if s.last_error:
                return "WARN", f"bus errors (last: {s.last_error})", values
            return "OK", f"{self.role} arm on {self.port} at {values['rate_hz']} Hz", values

    def _publish_diagnostics(self) -> None:
        level, message, values = self.diagnostics()
        with self._lock:
            self.state.last_error = "" if self.state.connected else self.state.last_error
        self._diag.publish(diag_array([diag_status(f"{self.get_name()}: {self.role} arm", level, message, values,
                                                   hardware_id=self.port)]))

    # -- shutdown -------------------------------------------------------------------------
    def close(self) -> None:
        """Stop the bus thread; release torque unless torque_on_exit. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        self._thread.join(5.0)
        bus, self._bus = self._bus, None
        if bus is not None:
            if not self.torque_on_exit:
                try:
                    bus.sync_write_register("Torque_Enable", {i: 0 for i in self._ids})
                except BusError:
                    pass
            bus.close()


def main() -> int:
    return spin_node(ArmDriverNode)
