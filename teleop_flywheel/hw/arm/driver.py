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
  port, however good its average rate was), faults, e-stop, temperatures, and counters since start
  (ticks, overruns — ticks that ended after the next was due —, reads with their latency counted
  per `health.READ_BUCKETS_MS`, what a Prometheus histogram is rebuilt from); `close()`: park at the
  rest pose then release torque, or hold, or release (`ArmConfig.exit_action`, `parking.py`).

A serial failure never raises out of `run()`: it becomes state (`connected`, `last_error`) that
`health()` reports, naming the port.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

from teleop_flywheel.core.backoff import Backoff
from teleop_flywheel.core.calibration import ArmCalibration
from teleop_flywheel.core.clock import NS_PER_S, now_ns
from teleop_flywheel.core.safety import CommandGuard
from teleop_flywheel.core.so101 import GRIPPER, JOINT_NAMES
from teleop_flywheel.hw.arm import settings
from teleop_flywheel.hw.arm.config import ArmConfig
from teleop_flywheel.hw.arm.faults import (
    PROTECTION_BITS,
    Fault,
    outside_range,
    status_cause,
    temperature_fault,
)
from teleop_flywheel.hw.arm.grasp import Grasp
from teleop_flywheel.hw.arm.health import DriverState, Health, report
from teleop_flywheel.hw.arm.parking import park
from teleop_flywheel.hw.arm.servos import ArmServos, CalibrationMismatch, Log, Reading
from teleop_flywheel.hw.feetech.bus import BusError, BusTimeout, FeetechBus, PortUnavailable


class ArmDriver:
    """One arm's servos, command guard, faults and torque state (see the module doc)."""

    def __init__(self, bus: FeetechBus, calibration: ArmCalibration, guard: CommandGuard,
                 config: ArmConfig | None = None, log: Log | None = None,
                 on_change: Callable[[], None] | None = None) -> None:
        self.calibration = calibration
        self.guard = guard
        self.config = config or ArmConfig()
        self.role = self.config.role
        self.state = DriverState()
        self._log = log or (lambda _level, _message: None)
        self._on_change = on_change or (lambda: None)
        self.servos = ArmServos(bus, calibration, self.role, on_status=self._record_status, log=self._log)
        self._lock = threading.Lock()
        self._release = threading.Event()  # leader: let go at the next tick
        self._ever_connected = False
        self._positions = [0.0] * len(calibration.ids)  # last known radians of every joint
        self._hold_goal: list[float] | None = None
        self._written: list[float] | None = None  # the goal last written (after the grasp limit)
        self._held = ""  # the hold this thread applied ("" = none)
        self._estop_request: str | None = None
        self._reset_request = False
        self._found_limp: list[float] | None = None  # the pose at the first connect, if every servo was limp
        self._grasp = Grasp(self.config.grip_force_limit if self.role == "follower" else 0.0)
        self._gripper = JOINT_NAMES.index(GRIPPER)

    @property
    def bus(self) -> FeetechBus:
        return self.servos.bus

    @property
    def port(self) -> str:
        return self.servos.port

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
            duplicate = self.servos.duplicated() if isinstance(exc, BusTimeout) else ""
            self.bus.close()
            if duplicate:  # wiring, not a glitch: retrying cannot help; the owner ends with this reason
                with self._lock:
                    self.state.connected, self.state.fatal = False, duplicate
                return False
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

    def configure(self) -> None:
        """Check the servos and their calibration, write the settings that differ, set torque.

        Fault bits on a read or on a write's acknowledgement latch a fault, they are not raised: a
        servo reporting e.g. overheat must still be configured and show up in diagnostics, not keep
        the whole arm offline.
        """
        servos = self.servos
        servos.restore()
        servos.forget_positions()
        servos.check_models()
        servos.check_calibration()
        torque = servos.registers("Torque_Enable")
        limp = not any(torque.values())  # found unpowered: its pose is one it rests in (`parking.py`)
        goals = servos.registers("Goal_Position")
        for sid in servos.write_settings(self.config.acceleration, settings.servo_speed(self.guard.max_speed)):
            torque[sid] = 0
        present = self.read().positions
        if limp and not self._ever_connected:
            self._found_limp = list(present)
        if self.role == "follower":
            # A servo still holding (a reconnect, the driver restarted) keeps the goal it holds;
            # the others hold where they are.
            seed = [float(j.raw_to_rad(goals[j.id])) if torque[j.id] else present[i]
                    for i, j in enumerate(self.calibration.joints)]
            outside = outside_range(self.calibration, present, [sid for sid in servos.ids if not torque[sid]])
            off = [sid for sid in servos.ids if not torque[sid] and sid not in {f.servo_id for f in outside}]
            for fault in outside:
                self._latch(fault)
            if off:
                servos.write_goals(present, off)
                servos.set_torque(off, True)
        else:
            seed = present
            servos.set_torque([sid for sid in servos.ids if torque[sid]], False)
        with self._lock:
            self.guard.reset(seed)
            self.state.torque = self.role == "follower"
        self._positions = list(seed)
        self._written = list(seed) if self.role == "follower" else None
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
        """One fast read of every servo still answering (what `tick` starts with)."""
        reading = self.servos.read()
        for name, angle in zip(reading.names, reading.positions, strict=True):
            self._positions[JOINT_NAMES.index(name)] = angle
        with self._lock:
            self.state.last_reading_ns = now_ns()
            self.state.count_read(reading.round_trip_ns)
        return reading

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
            self.servos.set_torque(self.servos.ids, False)
            self._set_state_torque(False)
            return reading
        if engage:
            self.bus.sync_write_register("Torque_Limit", {i: self.config.leader_torque_limit for i in self.servos.ids})
        if goal is not None:
            self.servos.write_goals(goal)
            self._written = goal
        if engage:
            self.servos.set_torque(self.servos.ids, True)
            self._set_state_torque(True)
        return reading

    def _operator_acts(self) -> None:
        """Apply an e-stop or a reset asked for since the last tick (this thread owns the bus)."""
        if self._estop_request is None and not self._reset_request:
            return  # nothing asked: no lock to take (each field is read whole)
        with self._lock:
            estop, self._estop_request = self._estop_request, None
            reset, self._reset_request = self._reset_request, False
        if reset:
            with self._lock:
                cleared = self.state.faults.clear()
                was_estop, self.state.estop = self.state.estop, ""
            self.servos.restore()
            if self.role == "follower":
                # Servos that cut their torque (a fault, or an e-stop that cuts) get it back where they are.
                off = [sid for sid, on in self.servos.registers("Torque_Enable").items() if not on]
                if off:
                    self.servos.write_goals(self._positions, off)
                    self.servos.set_torque(off, True)
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
                    self.servos.set_torque(self.servos.ids, False)
                    self._set_state_torque(False)

    def _apply_hold(self) -> str:
        """The hold now in force (starting one freezes every goal where the arm was last sent)."""
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
        for sid, bits in errors.items():
            name = self.servos.name(sid)
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
        slow = self.servos.read_slow()
        with self._lock:
            for sid in slow.status:
                name = self.servos.name(sid)
                self.state.voltage_v[name] = slow.voltage_v[sid]
                self.state.temperature_c[name] = slow.temperature_c[sid]
                self.state.current_ma[name] = slow.current_ma[sid]
        self._record_status(slow.status)
        for sid, celsius in slow.temperature_c.items():
            with self._lock:
                fault = temperature_fault(self.servos.name(sid), sid, celsius, self.config.temperature_warn_c,
                                          self.config.temperature_stop_c, self.state.faults)
            if fault is not None:
                self._latch(fault)
        with self._lock:
            expect_on = self.state.torque and self.role == "follower"
        if expect_on:
            for sid, on in self.servos.registers("Torque_Enable", self.servos.active).items():
                if not on:
                    self._latch(Fault(self.servos.name(sid), sid, "torque off: the servo cut it or restarted"))

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
                except BusTimeout:
                    # One silent servo must not blind the other five: leave it out, name it.
                    for sid in self.servos.isolate():
                        self._latch(Fault(self.servos.name(sid), sid, "does not answer (the other servos do)"))
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
                continue
            with self._lock:
                self.state.overruns += 1
            if delay < -period_ns:
                next_tick = now_ns()  # fell behind (load, retries): resync rather than burst

    # -- health and shutdown ----------------------------------------------------------------
    def health(self, target_rate_hz: float = 0.0) -> Health:
        """Level, message and values for diagnostics (a bus error stays reported until `acknowledge()`)."""
        with self._lock:
            stats, guard = self.bus.stats, self.guard.stats
            values: dict[str, object] = {
                "retries": stats.retries, "timeouts": stats.timeouts, "bad_checksums": stats.bad_checksums,
                "commands": guard.commands, "clamped": guard.clamped, "rate_limited": guard.rate_limited,
                "relative_limited": guard.relative_limited, "stale_ticks": guard.stale_ticks,
                "rejected_commands": guard.rejected,
                "command_stale": self.guard.stale(now_ns()), "gripper_force_limited": self._grasp.holding,
            }
            return report(self.state, self.port, self.role, target_rate_hz, self.config.estop_cuts_torque, values)

    def acknowledge(self) -> None:
        """The last bus error has been reported: forget it while the bus is connected."""
        with self._lock:
            if self.state.connected:
                self.state.last_error = ""

    def close(self, exit_action: str | None = None) -> None:
        """Stop as `exit_action` (default `config.exit_action`) says: park, then release torque; hold;
        or release at once (`parking.py`). A release is checked per servo; a park that cannot be
        made holds, and says why. Then close the port. Call after `run()` returned."""
        action = exit_action or self.config.exit_action
        release = True
        if self.state.connected and self.state.torque and action != "release":
            rest = self.config.rest_pose or self._found_limp
            why = "exit_action is hold" if action == "hold" else park(self, rest)
            release = not why
            if why:
                self._log("error" if action == "park" else "info",
                          f"{self.port}: torque left on at exit, the arm holding where it is: {why}")
            else:
                self._log("info", f"{self.port}: parked at the rest pose; releasing torque")
        if self.state.connected and release:
            try:
                self.servos.set_torque(self.servos.active, False)
            except BusError as exc:
                self._log("error", f"{exc} at exit")
        self.bus.close()
        with self._lock:
            self.state.connected = False

    def _set_state_torque(self, on: bool) -> None:
        with self._lock:
            self.state.torque = on
