"""One SO-101 arm on a Feetech bus, without ROS: configure, tick, commands with safety, faults,
e-stop, torque, reconnect.

`ArmDriver(bus, calibration, guard, ArmConfig(role=…))` owns one `FeetechBus` (one thread drives it):

- `connect()` opens the port and `configure()`s the arm: checks every servo is an STS3215, checks
  that the servos' EEPROM holds this calibration (homing offset, position limits) and refuses to
  drive the arm if not (`CalibrationMismatch`, naming the joint and both values: only `calibrate`
  and `setup-motors` write EEPROM identity and calibration, never a session start), writes the
  settings of `settings.py` that differ (a follower's gripper protection among them; a servo's
  torque is dropped only while one of its EEPROM registers is written), and sets the torque
  state: a follower holds — a servo already holding keeps its goal (a reconnect after a USB glitch
  never lets the arm go limp or re-lock where it sagged), one without torque holds where it is; a
  leader lets go (a human moves it). Every torque change is checked by reading Torque_Enable back,
  a servo that did not take it is written again on its own and named if it still did not;
- `tick(now)` is one control period: one SYNC_READ of Present_Position, Velocity and Load → a
  `Reading` (radians — a joint that crosses the encoder's 0/4095 seam is unwrapped, so wrist_roll
  never flips by 2π —, rad/s, load as a signed fraction of the servo's maximum torque, the bus's
  stamp), then, while torque is on, one SYNC_WRITE of the goal the `CommandGuard` allows (limits,
  speed in rad/s, goal minus present, stale-command hold), the follower's gripper force-limited
  (`grasp.Grasp`);
- faults (`faults.py`): a protection bit in any reply, a servo that cut its torque, a servo that
  stopped answering (the rest keep being read, it is named) or a temperature at the stop threshold
  latch the arm into a **hold** — every joint's goal frozen where the arm was (a leader lets go) —
  until `reset()`, an operator's act, re-enables the servos that cut their torque;
- `estop(reason)` holds the same way (or cuts torque, `estop_cuts_torque`), latched until `reset()`;
- `command(names, positions, stamp)` sets a target (any thread); `release()` asks a leader to let go
  (torque off next tick); a leader engages (torque on at `leader_torque_limit`) when commands
  arrive and releases when they go stale;
- `run(rate_hz, stop, on_reading)` is the bus loop: paced ticks, a slow read of voltage,
  temperature, status and torque every `slow_period_s`, and on a lost port: close, retry with
  exponential backoff (0.1 s doubling to 2 s), re-`configure()` on return;
- `health()` is what `/diagnostics` says (level, message, values): the achieved rate against the
  configured one (a rate that cannot be met is a warning naming the per-read latency), the age of
  the last good reading (a loop that stopped getting readings is WARN and then ERROR naming the
  port, however good its average rate was), faults, e-stop, temperatures; `close(torque_on_exit)`.

A serial failure never raises out of `run()`: it becomes state (`connected`, `last_error`) that
`health()` reports, naming the port.
"""
from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from teleop_flywheel.core.backoff import Backoff
from teleop_flywheel.core.calibration import RAD_PER_STEP, ArmCalibration
from teleop_flywheel.core.clock import NS_PER_S, now_ns
from teleop_flywheel.core.errors import FlywheelError
from teleop_flywheel.core.safety import CommandGuard, JointLimits
from teleop_flywheel.core.so101 import GRIPPER, JOINT_NAMES, MODEL_NUMBER, STEPS_PER_TURN
from teleop_flywheel.hw.arm import settings
from teleop_flywheel.hw.arm.faults import PROTECTION_BITS, Fault, FaultLatch, status_cause, temperature_fault
from teleop_flywheel.hw.arm.grasp import Grasp
from teleop_flywheel.hw.feetech import codec as proto
from teleop_flywheel.hw.feetech.bus import BusError, BusTimeout, FeetechBus, PortUnavailable, ServoError
from teleop_flywheel.hw.feetech.control_table import error_names, register

ROLES = ("leader", "follower")
# The fast read: Present_Position (56), Present_Velocity (58), Present_Load (60), one block.
POS_ADDR = register("Present_Position").address
POS_SIZE = register("Present_Load").address + register("Present_Load").size - POS_ADDR
LOAD_SIGN_BIT = register("Present_Load").sign_bit or 10
# The slow read: Voltage (62), Temperature (63), -, Status (65), Moving (66), -, -, Present_Current (69-70).
SLOW_ADDR = register("Present_Voltage").address
SLOW_SIZE = register("Present_Current").address + register("Present_Current").size - SLOW_ADDR
LOAD_FULL_SCALE = 1000.0  # Present_Load counts 0.1 % of the servo's maximum torque
CURRENT_MA_PER_UNIT = 6.5  # Present_Current of an STS3215
STALE_READING_S = (0.1, 0.5)  # age of the last good reading that makes health WARN, then ERROR
RATE_SHORTFALL = 0.9  # an achieved rate below this share of the configured one cannot meet it
RATE_WINDOW = 1000  # ticks the achieved rate is measured over
RATE_MIN_TICKS = 100  # ticks before a rate shortfall is said
HALF_TURN = STEPS_PER_TURN // 2
CALIBRATION_REGISTERS = ("Homing_Offset", "Min_Position_Limit", "Max_Position_Limit")


class CalibrationMismatch(FlywheelError, RuntimeError):
    """The servos' EEPROM does not hold the calibration the driver was given: it refuses to drive."""

Log = Callable[[str, str], None]  # (level "info" | "warn" | "error", message)


@dataclass(frozen=True)
class ArmConfig:
    """What the driver does with one arm, beyond its bus, calibration and command guard."""

    role: str = "follower"
    leader_torque_limit: int = 300  # Torque_Limit while a leader follows commands (0.1 %)
    slow_period_s: float = 1.0  # voltage, temperature, status and torque read-back
    acceleration: int = settings.DEFAULT_ACCELERATION  # the servos' Acceleration register (100 steps/s²)
    grip_force_limit: float = 0.2  # follower gripper: load (fraction of max torque) a close may press with; 0 = off
    temperature_warn_c: float = 55.0
    temperature_stop_c: float = 65.0  # below the servo's own 70 °C cut-off: the driver holds first
    estop_cuts_torque: bool = False  # an e-stop holds the arm (False) or lets it fall limp (True)

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"role must be one of {ROLES}, got {self.role!r}")
        if not 0 <= self.acceleration <= 254:
            raise ValueError(f"acceleration must be within 0..254, got {self.acceleration}")
        if not self.temperature_warn_c <= self.temperature_stop_c:
            raise ValueError(f"temperature_warn_c {self.temperature_warn_c} is above temperature_stop_c "
                             f"{self.temperature_stop_c}")


@dataclass(frozen=True)
class Reading:
    """One sample of the arm in `names` order (all six unless a servo stopped answering): radians,
    rad/s, bus stamp (monotonic ns), fault bits seen, load as a signed fraction of max torque."""

    positions: list[float]
    velocities: list[float]
    stamp_ns: int
    errors: dict[int, int] = field(default_factory=dict)  # servo id → fault bits seen on this read
    efforts: list[float] = field(default_factory=list)
    names: tuple[str, ...] = JOINT_NAMES


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
    estop: str = ""  # why the arm is e-stopped ("" = it is not)
    faults: FaultLatch = field(default_factory=FaultLatch)
    tick_times: deque[int] = field(default_factory=lambda: deque(maxlen=RATE_WINDOW))
    read_ns: deque[int] = field(default_factory=lambda: deque(maxlen=1000))  # each fast read's round trip
    voltage_v: dict[str, float] = field(default_factory=dict)
    temperature_c: dict[str, int] = field(default_factory=dict)
    current_ma: dict[str, float] = field(default_factory=dict)
    error_bits: dict[str, int] = field(default_factory=dict)

    def achieved_hz(self) -> float:
        if len(self.tick_times) < 2:
            return 0.0
        span = self.tick_times[-1] - self.tick_times[0]
        return (len(self.tick_times) - 1) * NS_PER_S / span if span > 0 else 0.0

    def read_ms(self, quantile: float) -> float:
        if not self.read_ns:
            return 0.0
        ordered = sorted(self.read_ns)
        return ordered[min(len(ordered) - 1, int(quantile * len(ordered)))] / 1e6

    @property
    def holding(self) -> str:
        """Why the arm holds ("" = it does not): an e-stop or a latched fault."""
        if self.estop:
            return f"e-stop: {self.estop}"
        return f"servo fault: {self.faults.summary()}" if self.faults else ""


@dataclass(frozen=True)
class Health:
    level: str  # OK | WARN | ERROR
    message: str
    values: dict[str, object]


def effective_limits(cal: ArmCalibration, lower: Sequence[float], upper: Sequence[float]) -> JointLimits:
    """Limits intersected with the calibrated range of each joint (radians); ValueError naming the
    joint if they do not overlap. Limits wider than a turn leave the calibrated range as it is."""
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
    """One arm's bus, calibration, command guard, faults and torque state (see the module doc)."""

    def __init__(self, bus: FeetechBus, calibration: ArmCalibration, guard: CommandGuard,
                 config: ArmConfig | None = None, log: Log | None = None,
                 on_change: Callable[[], None] | None = None) -> None:
        self.bus = bus
        self.calibration = calibration
        self.guard = guard
        self.config = config or ArmConfig()
        self.role = self.config.role
        self.state = DriverState()
        self._log = log or (lambda _level, _message: None)
        self._on_change = on_change or (lambda: None)
        self._lock = threading.Lock()
        self._release = threading.Event()  # leader: let go at the next tick
        self._ids = calibration.ids
        self._active = list(self._ids)  # servos read each tick: a silent one is left out until reset
        self._ever_connected = False
        self._raw: dict[int, int] = {}  # last unwrapped raw position per servo
        self._positions = [0.0] * len(self._ids)  # last known radians of every joint
        self._hold_goal: list[float] | None = None
        self._written: list[float] | None = None  # the goal last written (after the grasp limit)
        self._held = ""  # the hold this thread applied ("" = none)
        self._estop_request: str | None = None
        self._reset_request = False
        self._grasp = Grasp(self.config.grip_force_limit if self.role == "follower" else 0.0)
        self._gripper = JOINT_NAMES.index(GRIPPER)

    @property
    def port(self) -> str:
        return self.bus.port

    # -- commands and operator acts (any thread) ----------------------------------------------
    def command(self, names: Sequence[str], positions: Sequence[float], stamp_ns: int) -> None:
        with self._lock:
            self.guard.command(names, positions, stamp_ns)

    def release(self) -> None:
        """A leader releases its torque at the next tick (a human takes it); a follower ignores it."""
        if self.role == "leader":
            self._release.set()

    def estop(self, reason: str = "requested") -> None:
        """Hold the arm (or cut its torque, `estop_cuts_torque`) at the next tick, latched until `reset()`."""
        with self._lock:
            self._estop_request = reason or "requested"

    def reset(self) -> None:
        """The operator's re-enable: clear the e-stop and latched faults at the next tick; servos that
        cut their torque get it back holding where they are, and commands are taken again."""
        with self._lock:
            self._reset_request = True

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
        """Check the servos and their calibration, write the settings that differ, set torque.

        Fault bits on a read or on a write's acknowledgement are recorded (and latch a fault), not
        raised: a servo reporting e.g. overheat must still be configured and show up in
        diagnostics, not keep the whole arm offline.
        """
        bus = self.bus
        self._active = list(self._ids)
        self._raw.clear()
        models = bus.sync_read_register("Model_Number", self._ids)
        for joint in self.calibration.joints:
            if models.values[joint.id] != MODEL_NUMBER:
                raise BusError(self.port, f"servo {joint.id} ({joint.name}) is model {models.values[joint.id]}, "
                                          f"expected {MODEL_NUMBER}")
        self._record_status(models.errors)
        self.check_calibration()
        torque = dict(bus.sync_read_register("Torque_Enable", self._ids).values)
        goals = bus.sync_read_register("Goal_Position", self._ids).values
        for sid in self._write_settings():
            torque[sid] = 0
        present = self.read().positions
        if self.role == "follower":
            # A servo still holding (a reconnect, the driver restarted) keeps the goal it holds;
            # the others hold where they are.
            seed = [float(j.raw_to_rad(goals[j.id])) if torque[j.id] else present[i]
                    for i, j in enumerate(self.calibration.joints)]
            off = [sid for sid in self._ids if not torque[sid]]
            if off:
                raws = dict(zip(self._ids, self.calibration.rad_to_raw(present)))
                bus.sync_write_register("Goal_Position", {sid: raws[sid] for sid in off})
                self._set_torque(off, True)
        else:
            seed = present
            self._set_torque([sid for sid in self._ids if torque[sid]], False)
        with self._lock:
            self.guard.reset(seed)
            self.state.torque = self.role == "follower"
        self._positions = list(seed)
        self._written = list(seed) if self.role == "follower" else None
        self._release.clear()

    def _write_settings(self) -> list[int]:
        """Write every setting of `settings.py` that differs; the servos whose torque that dropped."""
        bus = self.bus
        speed = settings.servo_speed(self.guard.max_speed)
        names = sorted({n for j in self.calibration.joints
                        for n in settings.wanted(self.role, j.name, self.config.acceleration, speed)} | {"Phase"})
        current = {name: bus.sync_read_register(name, self._ids).values for name in names}
        dropped = []
        for joint in self.calibration.joints:
            sid = joint.id
            want = settings.wanted(self.role, joint.name, self.config.acceleration, speed)
            want["Phase"] = settings.phase_wanted(current["Phase"][sid])
            changed = {n: v for n, v in want.items() if current[n][sid] != v}
            eeprom = {n: v for n, v in changed.items() if settings.in_eeprom(n)}
            if eeprom:
                self._set_torque([sid], False)
                dropped.append(sid)
                self._write_acked(sid, "Lock", 0)
                try:
                    for name, value in eeprom.items():
                        self._write_acked(sid, name, value)
                finally:
                    self._write_acked(sid, "Lock", 1)
            for name, value in changed.items():
                if name not in eeprom:
                    self._write_acked(sid, name, value)
            for name, value in changed.items():
                got = bus.sync_read_register(name, [sid]).values[sid]  # fault bits reported, not raised
                if got != value:
                    raise BusError(self.port, f"servo {sid} ({joint.name}) keeps {name} at {got} after writing "
                                              f"{value} (EEPROM locked?)")
            if changed:
                self._log("info", f"{self.port}: {joint.name} (servo {sid}) set "
                                  + ", ".join(f"{n} {current[n][sid]} -> {v}" for n, v in changed.items()))
        return dropped

    def _write_acked(self, sid: int, name: str, value: int) -> None:
        try:
            self.bus.write_register(sid, name, value)
        except ServoError as exc:  # acknowledged, with fault bits: written; the bits latch a fault
            self._record_status({sid: exc.bits})

    def _set_torque(self, ids: Iterable[int], on: bool) -> None:
        """Torque on or off, checked: one SYNC_WRITE, Torque_Enable read back, a servo that did not
        take it written again on its own (acknowledged), and named if it still has not."""
        ids = list(ids)
        if not ids:
            return
        self.bus.sync_write_register("Torque_Enable", {sid: int(on) for sid in ids})
        wrong = [sid for sid, v in self._torque_states(ids).items() if v != on]
        for sid in wrong:
            for _attempt in range(2):
                try:
                    self._write_acked(sid, "Torque_Enable", int(on))
                    break
                except BusTimeout:
                    continue
        still = [sid for sid, v in self._torque_states(wrong).items() if v != on] if wrong else []
        if still:
            names = ", ".join(f"{self._name(sid)} (servo {sid})" for sid in still)
            raise BusError(self.port, f"{names} did not take torque {'on' if on else 'off'}")

    def _torque_states(self, ids: list[int]) -> dict[int, bool | None]:
        """Torque_Enable of each servo (None: it did not answer), by one sync read or, if that
        fails, one read per servo."""
        try:
            return {sid: bool(v) for sid, v in self.bus.sync_read_register("Torque_Enable", ids).values.items()}
        except BusTimeout:
            states: dict[int, bool | None] = {}
            for sid in ids:
                try:
                    states[sid] = bool(self.bus.sync_read_register("Torque_Enable", [sid]).values[sid])
                except BusTimeout:
                    states[sid] = None
            return states

    def lost(self, reason: str) -> None:
        """The port went away: close it, say so; `run()` reconnects with backoff."""
        self.bus.close()
        with self._lock:
            self.state.connected, self.state.torque = False, False
            self.state.last_error = reason
        self._log("error", f"{self.port}: bus lost ({reason}); reconnecting with backoff")

    # -- the control period ----------------------------------------------------------------
    def read(self) -> Reading:
        """One SYNC_READ of position, velocity and load of every servo still answering."""
        t0 = now_ns()
        reading = self.bus.sync_read(POS_ADDR, POS_SIZE, self._active)
        done = now_ns()
        names, rad, rad_s, effort = [], [], [], []
        for sid in self._active:
            value = reading.values[sid]
            joint = self.calibration.joints[self._ids.index(sid)]
            raw = self._unwrap(sid, proto.from_sign_magnitude(value & 0xFFFF, 15))
            names.append(joint.name)
            rad.append(float(joint.raw_to_rad(raw)))
            rad_s.append(joint.sign * proto.from_sign_magnitude((value >> 16) & 0xFFFF, 15) * RAD_PER_STEP)
            effort.append(joint.sign * proto.from_sign_magnitude((value >> 32) & 0xFFFF, LOAD_SIGN_BIT) / LOAD_FULL_SCALE)
        for name, angle in zip(names, rad):
            self._positions[JOINT_NAMES.index(name)] = angle
        with self._lock:
            self.state.last_reading_ns = done
            self.state.read_ns.append(done - t0)
        return Reading(rad, rad_s, reading.stamp_ns, dict(reading.errors), effort, tuple(names))

    def _unwrap(self, sid: int, raw: int) -> int:
        """A single-turn reading continued across the encoder's seam: no joint moves half a turn
        in one tick, so a jump of more than that is the reading wrapping, not the shaft."""
        last = self._raw.get(sid)
        if last is not None:
            raw = last + (raw - last + HALF_TURN) % STEPS_PER_TURN - HALF_TURN
        self._raw[sid] = raw
        return raw

    def tick(self, now: int | None = None) -> Reading:
        """Read, then write what the guard allows (or hold); `now` (default: after the read) is the
        time the watchdog judges commands by. Raises BusError (PortUnavailable: the port is gone)."""
        reading = self.read()
        self._record_status(reading.errors)
        self._operator_acts()
        now = now_ns() if now is None else now
        held = self._apply_hold()
        with self._lock:
            self.state.ticks += 1
            self.state.tick_times.append(now)
            torque = self.state.torque
            release = engage = False
            if self.role == "leader":
                release = torque and (self._release.is_set() or bool(held) or self.guard.stale(now))
                engage = (not torque and not held and not self._release.is_set() and self.guard.has_command
                          and not self.guard.stale(now))
                if self._release.is_set() and not torque:
                    self._release.clear()
            if release:
                self.guard.reset(self._positions)
            elif engage:
                self.guard.restart_from(self._positions)
            goal = None
            if held:
                goal = self._hold_goal if torque and self.role == "follower" else None
            elif torque or engage:
                goal = self.guard.step(self._positions, now)
                if self._grasp.limit and len(reading.names) == len(JOINT_NAMES):
                    g = self._gripper
                    goal[g] = self._grasp.goal(goal[g], reading.positions[g], reading.efforts[g],
                                               reading.velocities[g])
        if release:
            self._release.clear()
            self._set_torque(self._ids, False)
            self._set_state_torque(False)
            return reading
        if engage:
            self.bus.sync_write_register("Torque_Limit", {i: self.config.leader_torque_limit for i in self._ids})
        if goal is not None:
            self.bus.sync_write_register("Goal_Position", dict(zip(self._ids, self.calibration.rad_to_raw(goal))))
            self._written = goal
        if engage:
            self._set_torque(self._ids, True)
            self._set_state_torque(True)
        return reading

    def _operator_acts(self) -> None:
        """Apply an e-stop or a reset asked for since the last tick (this thread owns the bus)."""
        with self._lock:
            estop, self._estop_request = self._estop_request, None
            reset, self._reset_request = self._reset_request, False
        if reset:
            with self._lock:
                cleared = self.state.faults.clear()
                was_estop, self.state.estop = self.state.estop, ""
            self._active = list(self._ids)
            if self.role == "follower":
                # Servos that cut their torque (a fault, or an e-stop that cuts) get it back where they are.
                torque = self.bus.sync_read_register("Torque_Enable", self._ids).values
                off = [sid for sid in self._ids if not torque[sid]]
                if off:
                    raws = dict(zip(self._ids, self.calibration.rad_to_raw(self._positions)))
                    self.bus.sync_write_register("Goal_Position", {sid: raws[sid] for sid in off})
                    self._set_torque(off, True)
                self._set_state_torque(True)
            with self._lock:
                self.guard.reset(self._positions)  # a fresh command is needed; it is approached at bounded speed
            what = ", ".join(filter(None, [was_estop and f"e-stop ({was_estop})"] + [str(f) for f in cleared]))
            self._log("info", f"{self.port}: reset by the operator" + (f": cleared {what}" if what else ""))
        if estop:
            with self._lock:
                first = not self.state.estop
                self.state.estop = estop
            if first:
                self._log("error", f"{self.port}: e-stop ({estop}): "
                                   + ("torque cut" if self.config.estop_cuts_torque else "holding") + " until reset")
                if self.config.estop_cuts_torque and self.role == "follower":
                    self._set_torque(self._ids, False)
                    self._set_state_torque(False)

    def _apply_hold(self) -> str:
        """The hold now in force (starting one freezes every goal where the arm is)."""
        with self._lock:
            reason = self.state.holding
        if reason and not self._held:
            # Where the arm was last sent (no gravity sag added, the grasp's limit kept), else where it is.
            self._hold_goal = list(self._written or self._positions)
        changed = bool(reason) != bool(self._held)
        self._held = reason
        if changed:
            self._on_change()
        return reason

    def _record_status(self, errors: dict[int, int]) -> None:
        """Fault bits seen on a reply: shown per servo, and a protection bit latches a fault."""
        if not errors:
            return
        for sid, bits in errors.items():
            name = self._name(sid)
            with self._lock:
                self.state.error_bits[name] = bits
            if bits & PROTECTION_BITS:
                what = status_cause(bits) + (", torque cut by the servo" if bits & 0x2C else "")
                self._latch(Fault(name, sid, what))

    def _latch(self, fault: Fault) -> None:
        with self._lock:
            first = self.state.faults.latch(fault)
        if first:
            self._log("error", f"{self.port}: servo fault: {fault}; the arm holds until the operator resets it")
            self._on_change()

    def slow_read(self) -> None:
        """Voltage, temperature, status bits, current and torque of every servo (for `health()`);
        latches a fault on a protection bit, a temperature at the stop threshold or torque lost."""
        reading = self.bus.sync_read(SLOW_ADDR, SLOW_SIZE, self._active)
        current_at = register("Present_Current").address - SLOW_ADDR
        temperatures = {}
        for sid, value in reading.values.items():
            data = value.to_bytes(SLOW_SIZE, "little")
            name = self._name(sid)
            raw = int.from_bytes(data[current_at:current_at + 2], "little")
            with self._lock:
                self.state.voltage_v[name] = data[0] / 10.0
                self.state.temperature_c[name] = data[1]
                self.state.error_bits[name] = data[3] | reading.errors.get(sid, 0)
                self.state.current_ma[name] = abs(proto.from_sign_magnitude(raw, 15)) * CURRENT_MA_PER_UNIT
            temperatures[sid] = data[1]
        self._record_status({sid: bits for sid, v in reading.values.items()
                             if (bits := v.to_bytes(SLOW_SIZE, "little")[3] | reading.errors.get(sid, 0))})
        for sid, celsius in temperatures.items():
            with self._lock:
                fault = temperature_fault(self._name(sid), sid, celsius, self.config.temperature_warn_c,
                                          self.config.temperature_stop_c, self.state.faults)
            if fault is not None:
                self._latch(fault)
        with self._lock:
            expect_on = self.state.torque and self.role == "follower"
        if expect_on:
            torque = self.bus.sync_read_register("Torque_Enable", self._active).values
            for sid in self._active:
                if not torque[sid]:
                    self._latch(Fault(self._name(sid), sid, "torque off: the servo cut it or restarted"))

    def _isolate(self, exc: BusTimeout) -> None:
        """A sync read timed out: read each servo on its own, and leave out the ones that do not
        answer (a fault naming them), so one silent servo does not blind the others."""
        silent = []
        for sid in list(self._active):
            try:
                self.bus.read(sid, POS_ADDR, POS_SIZE)
            except BusTimeout:
                silent.append(sid)
            except ServoError:
                pass  # it answered (with fault bits the next sync read reports)
        if not silent or len(silent) == len(self._active):
            raise exc  # the whole line (or nothing in particular): a read error
        for sid in silent:
            self._active.remove(sid)
            self._latch(Fault(self._name(sid), sid, "does not answer (the other servos do)"))

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
                try:
                    on_reading(self.tick())
                except BusTimeout as exc:
                    self._isolate(exc)
                    raise
                if now_ns() >= next_slow:
                    self.slow_read()
                    next_slow = now_ns() + int(self.config.slow_period_s * NS_PER_S)
            except PortUnavailable as exc:
                self.lost(str(exc))
                continue
            except BusError as exc:
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
            rate = s.achieved_hz()
            values: dict[str, object] = {
                "port": self.port, "role": self.role, "connected": s.connected,
                "rate_hz": round(rate, 1), "target_rate_hz": target_rate_hz,
                "read_ms_p50": round(s.read_ms(0.5), 2), "read_ms_p99": round(s.read_ms(0.99), 2),
                "read_errors": s.read_errors, "reconnects": s.reconnects, "torque": s.torque,
                "holding": s.holding, "servo_fault": s.faults.summary(), "estop": s.estop,
                "retries": stats.retries, "timeouts": stats.timeouts, "bad_checksums": stats.bad_checksums,
                "commands": self.guard.stats.commands, "clamped": self.guard.stats.clamped,
                "rate_limited": self.guard.stats.rate_limited,
                "relative_limited": self.guard.stats.relative_limited, "stale_ticks": self.guard.stats.stale_ticks,
                "command_stale": self.guard.stale(now_ns()), "gripper_force_limited": self._grasp.holding,
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
            age = age_s if s.connected and age_s is not None else 0.0
            short = (target_rate_hz > 0 and len(s.tick_times) >= RATE_MIN_TICKS
                     and rate < RATE_SHORTFALL * target_rate_hz)
            if s.fatal:
                health = Health("ERROR", f"refusing to drive the arm on {self.port}: {s.fatal}", values)
            elif s.faults:
                health = Health("ERROR", f"servo fault on {self.port}: {s.faults.summary()}; the arm holds until "
                                         "the operator resets it", values)
            elif age > STALE_READING_S[1]:
                health = Health("ERROR", f"no reading from {self.port} for {age:.1f} s "
                                         f"(last error: {s.last_error or 'none'})", values)
            elif age > STALE_READING_S[0]:
                health = Health("WARN", f"readings from {self.port} late: last one {age * 1e3:.0f} ms ago", values)
            elif not s.connected:
                health = Health("ERROR", f"port {self.port} unavailable: {s.last_error or 'not connected yet'}; "
                                         "reconnecting", values)
            elif s.estop:
                health = Health("WARN", f"e-stopped on {self.port} ({s.estop}): "
                                        + ("torque cut" if self.config.estop_cuts_torque else "holding")
                                        + " until the operator resets it", values)
            elif s.faults.warnings:
                health = Health("WARN", "hot: " + "; ".join(s.faults.warnings.values()), values)
            elif short:
                health = Health("WARN", f"the configured {target_rate_hz:g} Hz cannot be met on {self.port}: "
                                        f"{rate:.0f} Hz, a read takes {s.read_ms(0.5):.1f} ms (p50) — behind an "
                                        "FTDI adapter set its latency_timer to 1 (teleop-flywheel find-port)", values)
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
        """Release torque (unless `torque_on_exit`), checked per servo, and close the port. Call
        after `run()` returned."""
        if self.state.connected and not torque_on_exit:
            try:
                self._set_torque(self._active, False)
            except BusError as exc:
                self._log("error", f"{exc} at exit")
        self.bus.close()
        with self._lock:
            self.state.connected = False

    # -- helpers ----------------------------------------------------------------------------
    def _set_state_torque(self, on: bool) -> None:
        with self._lock:
            self.state.torque = on

    def _name(self, sid: int) -> str:
        return JOINT_NAMES[self._ids.index(sid)]
