"""One SO-101 arm on a Feetech bus, without ROS: configure, tick, commands with safety, torque, reconnect.

`ArmDriver(bus, calibration, guard, role)` owns one `FeetechBus` (one thread drives it):

- `connect()` opens the port and `configure()`s the arm: checks every servo is an STS3215, checks
  that the servos' EEPROM holds this calibration (homing offset, position limits) and refuses to
  drive the arm if not (`CalibrationMismatch`, naming the joint and both values: only `calibrate`
  and `setup-motors` write EEPROM identity and calibration, never a session start), writes the
  operating settings that differ (`OPERATING`), and sets the torque state (follower: on, holding
  where it is; leader: off, a human moves it);
- `tick(now)` is one control period: one SYNC_READ of Present_Position, Velocity and Load (one
  contiguous block) → a `Reading` (radians, rad/s, load as a signed fraction of the servo's
  maximum torque, the bus's arrival-time stamp), then, while torque is on, one SYNC_WRITE of the
  goal the `CommandGuard` allows (joint limits, max step per tick, stale-command hold);
- `command(names, positions, stamp)` sets a target (any thread); `release()` asks a leader to let go
  (torque off next tick); a leader engages (torque on at `leader_torque_limit`) when commands
  arrive and releases when they go stale;
- `run(rate_hz, stop, on_reading)` is the bus loop: paced ticks, a slow read of voltage,
  temperature and status every `slow_period_s`, and on a lost port: close, retry with exponential
  backoff (0.1 s doubling to 2 s), re-`configure()` on return;
- `health()` is what `/diagnostics` says (level, message, values), including the age of the last
  good reading: a loop that stopped getting readings (line noise, a stuck adapter) is WARN and
  then ERROR naming the port, however good its average rate was; `close(torque_on_exit)`.

A serial failure never raises out of `run()`: it becomes state (`connected`, `last_error`) that
`health()` reports, naming the port.
"""
from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from teleop_flywheel.core.backoff import Backoff
from teleop_flywheel.core.calibration import RAD_PER_STEP, ArmCalibration
from teleop_flywheel.core.clock import NS_PER_S, now_ns
from teleop_flywheel.core.errors import FlywheelError
from teleop_flywheel.core.safety import CommandGuard, JointLimits
from teleop_flywheel.core.so101 import JOINT_NAMES, MODEL_NUMBER
from teleop_flywheel.hw.feetech import codec as proto
from teleop_flywheel.hw.feetech.bus import BusError, BusTimeout, FeetechBus, PortUnavailable, ServoError
from teleop_flywheel.hw.feetech.control_table import error_names, register

ROLES = ("leader", "follower")
# The fast read: Present_Position (56), Present_Velocity (58), Present_Load (60), one block.
POS_ADDR = register("Present_Position").address
POS_SIZE = register("Present_Load").address + register("Present_Load").size - POS_ADDR
# The slow read: Voltage (62), Temperature (63), -, Status (65), Moving (66), -, -, Present_Current (69-70).
SLOW_ADDR = register("Present_Voltage").address
SLOW_SIZE = register("Present_Current").address + register("Present_Current").size - SLOW_ADDR
LOAD_FULL_SCALE = 1000.0  # Present_Load counts 0.1 % of the servo's maximum torque
CURRENT_MA_PER_UNIT = 6.5  # Present_Current of an STS3215
STALE_READING_S = (0.1, 0.5)  # age of the last good reading that makes health WARN, then ERROR
# Operating settings the driver may write at start, idempotently (only a register that differs),
# the EEPROM ones behind the Lock register (LeRobot's SO-101 values). Never identity or calibration.
OPERATING = {"Return_Delay_Time": 0, "Operating_Mode": 0, "P_Coefficient": 16, "I_Coefficient": 0,
             "D_Coefficient": 32, "Acceleration": 254, "Maximum_Acceleration": 254}
CALIBRATION_REGISTERS = ("Homing_Offset", "Min_Position_Limit", "Max_Position_Limit")


class CalibrationMismatch(FlywheelError, RuntimeError):
    """The servos' EEPROM does not hold the calibration the driver was given: it refuses to drive."""

Log = Callable[[str, str], None]  # (level "info" | "error", message)


@dataclass(frozen=True)
class Reading:
    """One sample of the arm: so101.JOINT_NAMES order, radians and rad/s, bus stamp (monotonic ns)."""

    positions: list[float]
    velocities: list[float]
    stamp_ns: int
    errors: dict[int, int] = field(default_factory=dict)  # servo id → fault bits seen on this read
    efforts: list[float] = field(default_factory=list)  # Present_Load / 1000: signed fraction of max torque


@dataclass
class DriverState:
    """What the bus thread knows, shared with `health()` under the driver's lock."""

    connected: bool = False
    fatal: str = ""  # a reason the driver refuses to drive this arm at all (stops the loop)
    last_error: str = ""
    last_reading_ns: int = 0  # monotonic time of the last good reading (0 = none yet)
    ticks: int = 0
    read_errors: int = 0
    reconnects: int = 0
    torque: bool = False
    tick_times: deque[int] = field(default_factory=lambda: deque(maxlen=1000))
    voltage_v: dict[str, float] = field(default_factory=dict)
    temperature_c: dict[str, int] = field(default_factory=dict)
    current_ma: dict[str, float] = field(default_factory=dict)
    error_bits: dict[str, int] = field(default_factory=dict)

    def achieved_hz(self) -> float:
        if len(self.tick_times) < 2:
            return 0.0
        span = self.tick_times[-1] - self.tick_times[0]
        return (len(self.tick_times) - 1) * NS_PER_S / span if span > 0 else 0.0


@dataclass(frozen=True)
class Health:
    level: str  # OK | WARN | ERROR
    message: str
    values: dict[str, object]


def effective_limits(cal: ArmCalibration, lower: Sequence[float], upper: Sequence[float]) -> JointLimits:
    """Limits intersected with the calibrated range of each joint (radians); ValueError naming the
    joint if they do not overlap."""
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


class ArmDriver:
    """One arm's bus, calibration, command guard and torque state (see the module doc)."""

    def __init__(self, bus: FeetechBus, calibration: ArmCalibration, guard: CommandGuard, role: str = "follower",
                 leader_torque_limit: int = 300, slow_period_s: float = 1.0, log: Log | None = None) -> None:
        if role not in ROLES:
            raise ValueError(f"role must be one of {ROLES}, got {role!r}")
        self.bus = bus
        self.calibration = calibration
        self.guard = guard
        self.role = role
        self.leader_torque_limit = leader_torque_limit
        self.slow_period_s = slow_period_s
        self.state = DriverState()
        self._log = log or (lambda _level, _message: None)
        self._lock = threading.Lock()
        self._release = threading.Event()  # leader: let go at the next tick
        self._ids = calibration.ids
        self._ever_connected = False

    @property
    def port(self) -> str:
        return self.bus.port

    # -- commands (any thread) --------------------------------------------------------------
    def command(self, names: Sequence[str], positions: Sequence[float], stamp_ns: int) -> None:
        with self._lock:
            self.guard.command(names, positions, stamp_ns)

    def release(self) -> None:
        """A leader releases its torque at the next tick (a human takes it); a follower ignores it."""
        if self.role == "leader":
            self._release.set()

    # -- connection -------------------------------------------------------------------------
    def connect(self) -> bool:
        """Open and configure; False (the reason in `state.last_error`) if the arm is not there."""
        self.bus.close()  # a no-op unless a caller connects twice
        try:
            self.bus.open()
            self.configure()
        except CalibrationMismatch as exc:
            self.bus.close()
            with self._lock:  # the owner ends with this reason (the node: one line, exit 1)
                self.state.connected, self.state.fatal = False, str(exc)
            return False
        except BusError as exc:
            self.bus.close()
            with self._lock:
                first = not self._ever_connected and self.state.last_error != str(exc)
                self.state.connected, self.state.last_error = False, str(exc)
            if first:  # one line on the console (then /diagnostics) while the loop retries
                self._log("error", f"{exc}; retrying with backoff")
            return False
        with self._lock:
            if self._ever_connected:
                self.state.reconnects += 1
                self._log("info", f"{self.port}: reconnected")
            self._ever_connected = True
            self.state.connected, self.state.last_error = True, ""
        return True

    def check_calibration(self) -> None:
        """CalibrationMismatch unless every servo's EEPROM holds this calibration."""
        current = {name: self.bus.sync_read_register(name, self._ids).values for name in CALIBRATION_REGISTERS}
        for joint in self.calibration.joints:
            wanted = dict(zip(CALIBRATION_REGISTERS, (joint.homing_offset, joint.range_min, joint.range_max)))
            for name, value in wanted.items():
                if current[name][joint.id] != value:
                    raise CalibrationMismatch(
                        f"{self.port}: {joint.name} (servo {joint.id}) {name} is {current[name][joint.id]} in the servo "
                        f"but {value} in {self.calibration.source or self.calibration.arm_id}: this arm was calibrated "
                        f"with another file. Give the driver that file, or recalibrate: teleop-flywheel calibrate "
                        f"--port {self.port} --arm {self.role} --out NEW.yaml")

    def configure(self) -> None:
        """Check the servos and their calibration, write operating settings that differ, set torque.

        Fault bits on a read or on a write's acknowledgement are recorded, not raised: a servo
        reporting e.g. overheat must still be configured and show up in diagnostics, not keep the
        whole arm offline.
        """
        bus = self.bus
        models = bus.sync_read_register("Model_Number", self._ids)
        for joint in self.calibration.joints:
            if models.values[joint.id] != MODEL_NUMBER:
                raise BusError(self.port, f"servo {joint.id} ({joint.name}) is model {models.values[joint.id]}, "
                                          f"expected {MODEL_NUMBER}")
        self._record_faults(models.errors)
        bus.sync_write_register("Torque_Enable", {i: 0 for i in self._ids})
        self.check_calibration()
        current = {name: bus.sync_read_register(name, self._ids).values for name in OPERATING}
        for sid in self._ids:
            changed = {name: v for name, v in OPERATING.items() if current[name][sid] != v}
            for name, value in ([("Lock", 0)] + list(changed.items()) + [("Lock", 1)]) if changed else []:
                try:
                    bus.write_register(sid, name, value)
                except ServoError as exc:  # acknowledged, with fault bits
                    self._record_faults({sid: exc.bits})
        present = self.read().positions
        with self._lock:
            self.guard.reset(present)
        if self.role == "follower":
            bus.sync_write_register("Goal_Position", dict(zip(self._ids, self.calibration.rad_to_raw(present))))
            bus.sync_write_register("Torque_Enable", {i: 1 for i in self._ids})
        self._set_torque(self.role == "follower")
        self._release.clear()

    def lost(self, reason: str) -> None:
        """The port went away: close it, say so; `run()` reconnects with backoff."""
        self.bus.close()
        with self._lock:
            self.state.connected, self.state.torque = False, False
            self.state.last_error = reason
        self._log("error", f"{self.port}: bus lost ({reason}); reconnecting with backoff")

    # -- the control period ----------------------------------------------------------------
    def read(self) -> Reading:
        """One SYNC_READ of position, velocity and load."""
        reading = self.bus.sync_read(POS_ADDR, POS_SIZE, self._ids)
        raw_pos, vel, load = [], [], []
        for sid in self._ids:
            value = reading.values[sid]
            raw_pos.append(proto.from_sign_magnitude(value & 0xFFFF, 15))
            vel.append(proto.from_sign_magnitude((value >> 16) & 0xFFFF, 15))
            load.append(proto.from_sign_magnitude((value >> 32) & 0xFFFF, register("Present_Load").sign_bit or 10))
        rad = self.calibration.raw_to_rad(raw_pos)
        rad_s = [j.sign * v * RAD_PER_STEP for j, v in zip(self.calibration.joints, vel)]
        effort = [j.sign * f / LOAD_FULL_SCALE for j, f in zip(self.calibration.joints, load)]
        with self._lock:
            self.state.last_reading_ns = now_ns()
        return Reading(rad, rad_s, reading.stamp_ns, dict(reading.errors), effort)

    def tick(self, now: int | None = None) -> Reading:
        """Read, then write what the guard allows; `now` (default: after the read) is the time the
        watchdog judges commands by. Raises BusError (PortUnavailable: the port is gone)."""
        reading = self.read()
        positions = reading.positions
        now = now_ns() if now is None else now
        with self._lock:
            self.state.ticks += 1
            self.state.tick_times.append(now)
            if reading.errors:
                self.state.error_bits.update({self._name(sid): bits for sid, bits in reading.errors.items()})
            torque = self.state.torque
            release = engage = False
            if self.role == "leader":
                release = self._release.is_set() or (torque and self.guard.stale(now))
                engage = not torque and not release and self.guard.has_command and not self.guard.stale(now)
            if release:
                self.guard.reset(positions)
            elif engage:
                self.guard.restart_from(positions)
            goal = self.guard.step(positions, now) if (torque or engage) and not release else None
        if release:
            self._release.clear()
            if torque:
                self.bus.sync_write_register("Torque_Enable", {i: 0 for i in self._ids})
            self._set_torque(False)
            return reading
        if engage:
            self.bus.sync_write_register("Torque_Limit", {i: self.leader_torque_limit for i in self._ids})
        if goal is not None:
            self.bus.sync_write_register("Goal_Position", dict(zip(self._ids, self.calibration.rad_to_raw(goal))))
        if engage:
            self.bus.sync_write_register("Torque_Enable", {i: 1 for i in self._ids})
            self._set_torque(True)
        return reading

    def slow_read(self) -> None:
        """Voltage, temperature, status bits and current of every servo (for `health()`)."""
        reading = self.bus.sync_read(SLOW_ADDR, SLOW_SIZE, self._ids)
        current_at = register("Present_Current").address - SLOW_ADDR
        with self._lock:
            for sid, value in reading.values.items():
                data = value.to_bytes(SLOW_SIZE, "little")
                name = self._name(sid)
                self.state.voltage_v[name] = data[0] / 10.0
                self.state.temperature_c[name] = data[1]
                self.state.error_bits[name] = data[3] | reading.errors.get(sid, 0)
                raw = int.from_bytes(data[current_at:current_at + 2], "little")
                self.state.current_ma[name] = abs(proto.from_sign_magnitude(raw, 15)) * CURRENT_MA_PER_UNIT

    # -- the bus loop -----------------------------------------------------------------------
    def run(self, rate_hz: float, stop: threading.Event, on_reading: Callable[[Reading], None]) -> None:
        """Tick at `rate_hz` until `stop` is set, reconnecting with backoff; `on_reading` gets every
        sample (called on this thread, right after the tick)."""
        period_ns = int(NS_PER_S / rate_hz)
        backoff = Backoff()
        next_tick = now_ns()
        next_slow = 0
        while not stop.is_set() and not self.state.fatal:
            if not self.state.connected:
                if not self.connect():
                    stop.wait(backoff.next_s())
                    continue
                backoff.reset()
                next_tick = now_ns()
            try:
                on_reading(self.tick())
                if now_ns() >= next_slow:
                    self.slow_read()
                    next_slow = now_ns() + int(self.slow_period_s * NS_PER_S)
            except PortUnavailable as exc:
                self.lost(str(exc))
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

    # -- health and shutdown ----------------------------------------------------------------
    def health(self, target_rate_hz: float = 0.0) -> Health:
        """Level, message and values for diagnostics (a bus error stays reported until `acknowledge()`)."""
        with self._lock:
            s = self.state
            stats = self.bus.stats
            values: dict[str, object] = {
                "port": self.port, "role": self.role, "connected": s.connected,
                "rate_hz": round(s.achieved_hz(), 1), "target_rate_hz": target_rate_hz,
                "read_errors": s.read_errors, "reconnects": s.reconnects, "torque": s.torque,
                "retries": stats.retries, "timeouts": stats.timeouts, "bad_checksums": stats.bad_checksums,
                "commands": self.guard.stats.commands, "clamped": self.guard.stats.clamped,
                "rate_limited": self.guard.stats.rate_limited, "stale_ticks": self.guard.stats.stale_ticks,
                "command_stale": self.guard.stale(now_ns()),
            }
            age_s = (now_ns() - s.last_reading_ns) / NS_PER_S if s.last_reading_ns else None
            values["last_reading_age_s"] = round(age_s, 3) if age_s is not None else "never"
            for name in JOINT_NAMES:
                if name in s.temperature_c:
                    values[f"{name}.temperature_c"] = s.temperature_c[name]
                    values[f"{name}.voltage_v"] = s.voltage_v[name]
                    values[f"{name}.current_ma"] = round(s.current_ma.get(name, 0.0), 1)
                bits = s.error_bits.get(name, 0)
                values[f"{name}.error_bits"] = f"0x{bits:02x}" + (f" ({', '.join(error_names(bits))})" if bits else "")
            faults = [n for n in JOINT_NAMES if s.error_bits.get(n, 0)]
            age = age_s if s.connected and age_s is not None else 0.0
            if s.fatal:
                health = Health("ERROR", f"refusing to drive the arm on {self.port}: {s.fatal}", values)
            elif age > STALE_READING_S[1]:
                health = Health("ERROR", f"no reading from {self.port} for {age:.1f} s "
                                         f"(last error: {s.last_error or 'none'})", values)
            elif age > STALE_READING_S[0]:
                health = Health("WARN", f"readings from {self.port} late: last one {age * 1e3:.0f} ms ago", values)
            elif not s.connected:
                health = Health("ERROR", f"port {self.port} unavailable: {s.last_error or 'not connected yet'}; "
                                         "reconnecting", values)
            elif faults:
                health = Health("WARN", f"servo faults on {', '.join(faults)}", values)
            elif s.last_error:
                health = Health("WARN", f"bus errors (last: {s.last_error})", values)
            else:
                health = Health("OK", f"{self.role} arm on {self.port} at {values['rate_hz']} Hz", values)
            return health

    def acknowledge(self) -> None:
        """The last bus error has been reported: forget it while the bus is connected."""
        with self._lock:
            if self.state.connected:
                self.state.last_error = ""

    def close(self, torque_on_exit: bool = False) -> None:
        """Release torque (unless `torque_on_exit`) and close the port. Call after `run()` returned."""
        if self.state.connected and not torque_on_exit:
            try:
                self.bus.sync_write_register("Torque_Enable", {i: 0 for i in self._ids})
            except BusError:
                pass
        self.bus.close()
        with self._lock:
            self.state.connected = False

    # -- helpers ----------------------------------------------------------------------------
    def _set_torque(self, on: bool) -> None:
        with self._lock:
            self.state.torque = on

    def _record_faults(self, errors: dict[int, int]) -> None:
        with self._lock:
            self.state.error_bits.update({self._name(sid): bits for sid, bits in errors.items()})

    def _name(self, sid: int) -> str:
        return JOINT_NAMES[self._ids.index(sid)]
