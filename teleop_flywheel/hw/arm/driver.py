"""One SO-101 arm on a Feetech bus, without ROS: configure, tick, commands with safety, faults,
e-stop, torque, reconnect.

`ArmDriver(bus, calibration, guard, ArmConfig(role=…))` owns one `FeetechBus` (one thread drives it):

- `connect()` opens the port and `configure()`s the arm: checks every servo is an STS3215, checks
  that the servos' EEPROM holds this calibration (homing offset, position limits) and refuses to
  drive the arm if not (`CalibrationMismatch`, naming the joint and both values: only `calibrate`
  and `setup-motors` write EEPROM identity and calibration, never a session start), writes the
  EEPROM settings of `settings.py` that differ (a follower's gripper protection among them; a
  servo's torque is dropped only while one of its EEPROM registers is written; a value that does
  not read back is tried `settings.EEPROM_ATTEMPTS` times, then latched as a fault naming the
  register, that servo left without torque) and every RAM setting (read back, before any torque
  comes on), and sets the torque state: a follower holds — a servo already holding keeps its goal
  (a reconnect after a USB glitch never lets the arm go limp or re-lock where it sagged), one
  without torque holds where it is; a leader lets go (a human moves it). While the arm is held (an
  e-stop or a latched fault, both kept across a reconnect) no torque is turned on: torque that
  was cut stays cut until `reset()`. Every torque change is checked by reading Torque_Enable back,
  a servo that did not take it is written again on its own and named if it still did not;
- `tick(now)` is one control period: one SYNC_READ of Present_Position, Velocity and Load → a
  `Reading` (radians — a joint that crosses the encoder's 0/4095 seam is unwrapped, so wrist_roll
  never flips by 2π —, rad/s, load as a signed fraction of the servo's maximum torque, the bus's
  stamp), then, while torque is on, one SYNC_WRITE of the goal the `CommandGuard` allows (limits,
  speed in rad/s, goal minus present, stale-command hold), the follower's gripper force-limited
  (`grasp.Grasp`);
- faults (`faults.py`): a protection bit in any reply, a servo that cut its torque, a servo that
  stopped answering (the rest keep being read, it is named), a temperature at the stop threshold,
  a collision (a body joint stalled at `settings.COLLISION`'s load and tracking error), a servo
  that rebooted (its RAM marker, `settings.REBOOT_MARKER`) or a supply outside the arm's hold band
  (`settings.SUPPLY`) latch the arm into a **hold** — every joint's goal set to where the arm is
  (a leader lets go), no goal written to a servo without torque — until `reset()`, an operator's
  act, rewrites and reads back the RAM settings and re-enables the servos that cut their torque,
  holding where they are (commands are then approached at the guard's speed);
- force feedback on a leader (`ArmConfig.feedback`, docs/teleop.md "Force feedback"): `feel()`
  and `gate()` (any thread) pass the follower and the rig's say to the leader's
  `rendering.Renderer`, which each tick in the hand torques the joints whose follower meets
  something softly toward where the follower is; a hold (fault, e-stop), the leader driven by
  commands, a reconnect or the exit releases that torque. Every leader tick says what it left the
  servos doing to the hand (`rendered`);
- `estop(reason)` holds the same way (or cuts torque, `estop_cuts_torque`), latched at once until
  `reset()`; its `Acknowledgement` settles once the servos read it back, or with why not;
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
`health()` reports, naming the port; any other exception ends the loop as `state.fatal` (an ERROR,
and the node exits 1), never silently.
"""
from __future__ import annotations

import threading
import time
import traceback
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
    supply_fault,
    temperature_fault,
)
from teleop_flywheel.hw.arm.grasp import Grasp
from teleop_flywheel.hw.arm.health import DriverState, Health, report
from teleop_flywheel.hw.arm.parking import park
from teleop_flywheel.hw.arm.rendering import Rendered, Renderer
from teleop_flywheel.hw.arm.servos import ArmServos, Log, Reading
from teleop_flywheel.hw.errors import BusError, BusTimeout, CalibrationMismatch, PortUnavailable
from teleop_flywheel.hw.feetech.bus import FeetechBus

ESTOP_READ_BACK_S = 0.3  # how long the bus thread reads an e-stop back before it answers failure


class Acknowledgement:
    """The bus thread's answer to an operator's act: `wait()` returns (done, why) once the servos
    acknowledged it (read back), or why not (the port is away, the loop died, a servo did not take it)."""

    def __init__(self) -> None:
        self._done = threading.Event()
        self.ok = False
        self.message = ""

    def settle(self, ok: bool, message: str) -> None:
        if not self._done.is_set():
            self.ok, self.message = ok, message
            self._done.set()

    def wait(self, timeout_s: float) -> tuple[bool, str]:
        if not self._done.wait(timeout_s):
            return False, f"the servos did not acknowledge within {timeout_s:g} s"
        return self.ok, self.message


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
        self._estop_acks: list[Acknowledgement] = []  # e-stops asked for, not yet read back from the servos
        self._reset_request = False
        self._refused: set[int] = set()  # servos that refused an EEPROM write: left without torque until reset
        self._collision_since: dict[int, int] = {}  # joint index -> when its load and error went beyond COLLISION
        self._running = False  # the bus loop is in run()
        self._off: set[int] = set()  # servos known to be without torque: no goal is written to them
        self._estop_asked_ns: int | None = None  # when an e-stop's read-back first did not match
        self._limp_checked_ns = 0  # when a limp-looking joint last made the torque be read at once
        self._found_limp: list[float] | None = None  # the pose at the first connect, if every servo was limp
        self._grasp = Grasp(self.config.grip_force_limit if self.role == "follower" else 0.0)
        self._gripper = JOINT_NAMES.index(GRIPPER)
        self._feedback = Renderer(self.config, self.servos, self._note_torque)  # a leader's force feedback
        self.rendered: Rendered | None = None  # leader: what its last tick left the servos doing to the hand

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

    def feel(self, positions: Sequence[float], efforts: Sequence[float], velocities: Sequence[float],
             stamp_ns: int) -> None:
        """The follower, for a leader's force feedback, joint order: `positions` in the leader's
        radians (`ArmPair.to_leader`), `efforts` its load (fraction of max torque), `velocities` rad/s,
        `stamp_ns` when it was sampled or arrived (`now_ns` clock)."""
        self._feedback.feel(positions, efforts, velocities, stamp_ns)

    def gate(self, reason: str, stamp_ns: int) -> None:
        """The rig's say on a leader's feedback (any thread): nothing is rendered while `reason` is
        not empty (pedal lost, policy mode, the teleop node holds) or once the last say, at
        `stamp_ns` (`now_ns` clock), is older than `FEEDBACK_STALE_S` (whoever says it went quiet).
        Never called, the feedback answers to the follower alone (a bench, a test)."""
        self._feedback.gate(reason, stamp_ns)

    def estop(self, reason: str = "requested") -> Acknowledgement:
        """Hold the arm (or cut its torque, `estop_cuts_torque`), latched at once until `reset()` (across
        any reconnect), applied at the next tick; the answer settles once the servos read back the
        hold goals (or torque off), or at once with the reason they cannot (the port is away)."""
        ack = Acknowledgement()
        reason = reason or "requested"
        with self._lock:
            first = not self.state.estop
            if first:
                self.state.estop = reason
            fatal, connected, error = self.state.fatal, self.state.connected, self.state.last_error
            if not fatal and connected and self._running:
                self._estop_request = reason
                self._estop_acks.append(ack)
        if first:
            self._log("error", f"{self.port}: e-stop ({reason}): "
                               + ("torque cut" if self.config.estop_cuts_torque else "holding") + " until reset")
        if fatal:
            ack.settle(False, f"{self.port}: the driver stopped ({fatal}); the e-stop is latched, nothing applies it")
        elif not connected or not self._running:
            ack.settle(False, f"{self.port} unavailable ({error or 'not connected'}): the e-stop is latched and "
                              "applied when the arm is back")
        return ack

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
            self.state.restart_window()  # the rate of this connection, not one measured across the gap
        return True

    def configure(self) -> None:
        """Check the servos and their calibration, write the EEPROM settings that differ and every
        RAM setting, set torque.

        Fault bits on a read or on a write's acknowledgement latch a fault, they are not raised: a
        servo reporting e.g. overheat must still be configured and show up in diagnostics, not keep
        the whole arm offline. While the arm is held (an e-stop, a latched fault — they survive a
        reconnect) no torque is turned on: the servos still holding hold where they are.
        """
        servos = self.servos
        servos.restore()
        servos.forget_positions()
        servos.check_models()
        servos.check_calibration()
        if self._ever_connected:  # the port was away: a servo may have lost power meanwhile
            for sid in servos.rebooted(servos.ids):
                self._latch(Fault(servos.name(sid), sid, "rebooted while the port was away (RAM settings lost)"))
        speed = settings.servo_speed(self.guard.max_speed)
        _dropped, refused = servos.write_eeprom(self.config.acceleration, speed, skip=self._refused)
        self._latch_refused(refused)
        servos.write_ram(self.config.acceleration, speed)  # before any torque comes on
        torque = servos.registers("Torque_Enable")
        limp = not any(torque.values())  # found unpowered: its pose is one it rests in (`parking.py`)
        goals = servos.registers("Goal_Position")
        present = self.read().positions
        with self._lock:
            holding = self.state.holding
        on = [sid for sid in servos.ids if torque[sid]]
        if limp and not self._ever_connected:
            self._found_limp = list(present)
        if self.role == "follower" and holding:
            seed = present  # held: goals where the arm is, torque left as it is (or cut, as the e-stop asks)
            servos.write_goals(present, on)
            if self.state.estop and self.config.estop_cuts_torque:
                servos.set_torque(on, False)
                on = []
        elif self.role == "follower":
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
                on = list(servos.ids)
        else:
            seed = present
            servos.set_torque(on, False)
            on = []
        with self._lock:
            self.guard.reset(seed)
        self._note_torque({sid: sid in on for sid in servos.ids})
        self._positions = list(seed)
        self._hold_goal = list(present) if holding else None
        self._written = list(seed) if on else None
        self._collision_since.clear()
        self._release.clear()
        self._feedback.joints.clear()  # a leader's torque was just set off: any feedback starts again from a grasp

    def _latch_refused(self, refused: dict[int, str]) -> None:
        for sid, what in refused.items():
            self._refused.add(sid)
            self._latch(Fault(self.servos.name(sid), sid, f"{what}: left without torque"))

    def lost(self, reason: str) -> None:
        """The port went away: close it, say so; `run()` reconnects with backoff."""
        self.bus.close()
        with self._lock:
            self.state.connected, self.state.torque = False, False
            self.state.last_error = reason
        self._settle_estops(False, f"{self.port} lost ({reason}): the e-stop is latched and applied when it returns")
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
        time the watchdog judges commands by. A leader's tick then says what it rendered
        (`rendered`). Raises BusError (PortUnavailable: the port is gone)."""
        reading = self._control(now)
        if self.role == "leader":
            self.rendered = self._feedback.note(self._written, self._positions, self._off)
        return reading

    def _control(self, now: int | None) -> Reading:
        reading = self.read()
        cut = self._record_status(reading.errors)
        if cut:  # what the servo did with its torque, read back at once: /diagnostics says it true
            self._note_torque({sid: v is not False for sid, v in self.servos.torque_states(cut).items()})
        self._operator_acts()
        now = now_ns() if now is None else now
        if self._limp(reading):
            self._check_torque()  # now, not at the next slow read: a limp joint under gravity falls
        self._check_collision(reading)
        held = self._apply_hold()
        with self._lock:
            self.state.ticks += 1
            self.state.tick_times.append(now)
            # A leader rendering feedback on every joint is not one driven by commands.
            torque = self.state.torque and not self._feedback.joints
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
                goal = self._hold_goal if self.role == "follower" and len(self._off) < len(self.servos.ids) else None
            elif torque or engage:
                goal = self.guard.step(self._positions, now)
                if self._grasp.limit and len(reading.names) == len(JOINT_NAMES):
                    g = self._gripper
                    goal[g] = self._grasp.goal(goal[g], reading.positions[g], reading.efforts[g],
                                               reading.velocities[g])
        if release:
            self._release.clear()
            self.servos.set_torque(self.servos.ids, False)
            self._note_torque(dict.fromkeys(self.servos.ids, False))
            self._feedback.joints.clear()
            if self._estop_acks and held:
                self._acknowledge_estops()
            return reading
        if engage:
            limits = {i: self.config.leader_torque_limit for i in self.servos.ids}
            self.bus.sync_write_register("Torque_Limit", limits)
            # Read back before torque comes on: a lost write leaves a servo at the driver's full torque
            # in the operator's hand. Not taken: no torque this tick, written again the next.
            engage = self.servos.registers("Torque_Limit", self.servos.ids) == limits
            if engage:
                self._feedback.ceilings.update(limits)
        if goal is not None:
            self.servos.write_goals(goal, [sid for sid in self.servos.ids if sid not in self._off] if held else None)
            self._written = goal
        if engage:
            self.servos.set_torque(self.servos.ids, True)
            self._note_torque(dict.fromkeys(self.servos.ids, True))
            self._feedback.joints.clear()  # the commands drive the leader now
        elif self.config.feedback != "off" and not torque:
            written = self._feedback.render(now, bool(held), self._positions, self._refused)
            if written is not None:
                self._written = written
        if self._estop_acks and held:
            self._acknowledge_estops()
        return reading

    def _acknowledge_estops(self) -> None:
        """Read back what the e-stop asked of the servos — torque off (a leader, `estop_cuts_torque`),
        else every torqued servo's goal at the hold goal — and answer the e-stops waiting for it. A
        servo that has not taken it is read again next tick, for at most `ESTOP_READ_BACK_S`, then
        the answer is a failure naming it."""
        servos = self.servos
        if self.role == "leader" or self.config.estop_cuts_torque:
            states = servos.torque_states(servos.active)
            wrong = [sid for sid, v in states.items() if v is not False]
            done = "torque off, read back from every servo"
        else:
            on = [sid for sid in servos.active if sid not in self._off]
            raws = dict(zip(servos.ids, self.calibration.rad_to_raw(self._hold_goal or self._positions), strict=True))
            goals = servos.registers("Goal_Position", on) if on else {}
            wrong = [sid for sid in on if goals[sid] != raws[sid]]
            off = ", ".join(servos.name(sid) for sid in servos.ids if sid in self._off)
            done = ("holding: every goal at the present position, read back" if on else "torque already off on "
                    "every servo, read back") + (f" (torque already off: {off})" if off and on else "")
        if not wrong:
            self._settle_estops(True, done)
            self._estop_asked_ns = None
            return
        now = now_ns()
        if self._estop_asked_ns is None:
            self._estop_asked_ns = now
        elif now - self._estop_asked_ns > ESTOP_READ_BACK_S * NS_PER_S:
            names = ", ".join(f"{servos.name(sid)} (servo {sid})" for sid in wrong)
            self._settle_estops(False, f"{names} did not read back the e-stop within {ESTOP_READ_BACK_S:g} s")
            self._estop_asked_ns = None

    def _settle_estops(self, ok: bool, message: str) -> None:
        with self._lock:
            acks, self._estop_acks = self._estop_acks, []
        for ack in acks:
            ack.settle(ok, message)

    def _check_collision(self, reading: Reading) -> None:
        """A body joint whose load and tracking error stay beyond `settings.COLLISION` has hit
        something: latch it (the hold then sets every goal to the present position)."""
        if self.role != "follower" or not self.state.torque or self._written is None or self._held:
            self._collision_since.clear()
            return
        for k, name in enumerate(reading.names):
            limit = settings.COLLISION.get(name)
            if limit is None:
                continue
            i = JOINT_NAMES.index(name)
            load, error = reading.efforts[k], self._written[i] - reading.positions[k]
            if abs(load) < limit.load or abs(error) < limit.error_rad or abs(reading.velocities[k]) > limit.stall_rad_s:
                self._collision_since.pop(i, None)
                continue
            now = reading.stamp_ns  # when the servos were sampled: the persistence is the arm's, not the loop's
            since = self._collision_since.setdefault(i, now)
            if now - since >= limit.persist_s * NS_PER_S:
                sid = self.calibration.ids[i]
                self._latch(Fault(name, sid, f"collision: load {abs(load):.2f} and tracking error {abs(error):.2f} rad "
                                             f"beyond {limit.load:g} and {limit.error_rad:g} rad for "
                                             f"{(now - since) / NS_PER_S:.3f} s"))

    def _operator_acts(self) -> None:
        """Apply an e-stop or a reset asked for since the last tick (this thread owns the bus)."""
        if self._estop_request is None and not self._reset_request:
            return  # nothing asked: no lock to take (each field is read whole)
        with self._lock:
            estop, self._estop_request = self._estop_request, None
            reset, self._reset_request = self._reset_request, False
        if reset:
            self._reset()
        if estop and self.config.estop_cuts_torque and self.role == "follower":
            self.servos.set_torque(self.servos.ids, False)
            self._note_torque(dict.fromkeys(self.servos.ids, False))

    def _reset(self) -> None:
        """The operator's reset: retry a refused EEPROM write (bounded), rewrite and read back every
        RAM setting, then clear the latch; servos without torque get it back holding where they are,
        and commands are approached from there through the soft start (`CommandGuard`)."""
        servos = self.servos
        servos.restore()
        speed = settings.servo_speed(self.guard.max_speed)
        retry, self._refused = self._refused, set()
        _dropped, refused = servos.write_eeprom(self.config.acceleration, speed,
                                                skip=[sid for sid in servos.ids if sid not in retry])
        servos.write_ram(self.config.acceleration, speed)
        with self._lock:
            cleared = self.state.faults.clear()
            was_estop, self.state.estop = self.state.estop, ""
        self._latch_refused(refused)
        self.read()
        present = list(self._positions)  # every joint, in joint order
        if self.role == "follower":
            usable = [sid for sid in servos.ids if sid not in self._refused]
            off = [sid for sid, on in servos.registers("Torque_Enable", usable).items() if not on]
            servos.write_goals(present, usable)
            servos.set_torque(off, True)
            self._note_torque({sid: sid in usable for sid in servos.ids})
            self._written = list(present)
        with self._lock:
            self.guard.reset(present)  # a fresh command is needed; it is approached at bounded speed
        self._collision_since.clear()
        what = ", ".join(filter(None, [was_estop and f"e-stop ({was_estop})"] + [str(f) for f in cleared]))
        self._log("info", f"{self.port}: reset by the operator" + (f": cleared {what}" if what else ""))

    def _apply_hold(self) -> str:
        """The hold now in force (starting one sets every goal to where the arm is now)."""
        with self._lock:
            reason = self.state.holding
        if reason and not self._held:
            self._hold_goal = list(self._positions)
        changed = bool(reason) != bool(self._held)
        self._held = reason
        if changed:
            self._on_change()
        return reason

    def _record_status(self, errors: dict[int, int]) -> list[int]:
        """Fault bits seen on a reply: shown per servo, and a protection bit latches a fault; the
        servos newly latched with a bit that makes a servo cut its torque."""
        cut = []
        for sid, bits in errors.items():
            name = self.servos.name(sid)
            with self._lock:
                self.state.error_bits[name] = bits
            if bits & PROTECTION_BITS:
                what = status_cause(bits) + (", torque cut by the servo" if bits & 0x2C else "")
                if self._latch(Fault(name, sid, what)) and bits & 0x2C:
                    cut.append(sid)
        return cut

    def _latch(self, fault: Fault) -> bool:
        with self._lock:
            first = self.state.faults.latch(fault)
        if first:
            self._log("error", f"{self.port}: servo fault: {fault}; the arm holds until the operator resets it")
            self._on_change()
        return first

    def slow_read(self) -> None:
        """Voltage, temperature, status bits, current, torque and the RAM marker of every servo (for
        `health()`); latches a fault on a protection bit, a temperature at the stop threshold, a
        supply outside the arm's hold band (`settings.SUPPLY`), a servo that rebooted, or torque lost."""
        servos = self.servos
        slow = servos.read_slow()
        with self._lock:
            for sid in slow.status:
                name = servos.name(sid)
                self.state.voltage_v[name] = slow.voltage_v[sid]
                self.state.temperature_c[name] = slow.temperature_c[sid]
                self.state.current_ma[name] = slow.current_ma[sid]
        self._record_status(slow.status)
        supply = settings.SUPPLY[self.role]
        for sid in slow.status:
            name = servos.name(sid)
            with self._lock:
                fault = temperature_fault(name, sid, slow.temperature_c[sid], self.config.temperature_warn_c,
                                          self.config.temperature_stop_c, self.state.faults)
                low = supply_fault(name, sid, slow.voltage_v[sid], supply, self.state.faults)
            for f in (fault, low):
                if f is not None:
                    self._latch(f)
        self._check_torque()

    def _check_torque(self) -> None:
        """Read every servo's RAM marker and torque: a rebooted servo, or a follower's servo without
        torque, latches a fault; `state.torque` says what was read."""
        servos = self.servos
        for sid in servos.rebooted(servos.active):
            self._latch(Fault(servos.name(sid), sid, "rebooted (Torque_Limit back at its power-on value: RAM "
                                                     "settings lost, torque off)"))
        states = {sid: bool(on) for sid, on in servos.registers("Torque_Enable", servos.active).items()}
        with self._lock:
            expect_on = self.role == "follower" and self.state.torque
        if expect_on:
            for sid, on in states.items():
                if not on:
                    self._latch(Fault(servos.name(sid), sid, "torque off: the servo cut it or restarted"))
        self._note_torque(states)

    def _limp(self, reading: Reading) -> bool:
        """A joint that should hold but carries no load while it drifts from its goal (`settings.LIMP`):
        a servo that lost its torque (a brown-out) between two slow reads."""
        if self.role != "follower" or not self.state.torque or self._written is None or self._held:
            return False
        if reading.stamp_ns - self._limp_checked_ns < settings.LIMP.recheck_s * NS_PER_S:
            return False
        for k, name in enumerate(reading.names):
            i = JOINT_NAMES.index(name)
            if (abs(self._written[i] - reading.positions[k]) >= settings.LIMP.error_rad
                    and abs(reading.efforts[k]) <= settings.LIMP.load):
                self._limp_checked_ns = reading.stamp_ns
                return True
        return False

    # -- the bus loop -----------------------------------------------------------------------
    def run(self, rate_hz: float, stop: threading.Event, on_reading: Callable[[Reading], None],
            before_tick: Callable[[], None] | None = None) -> None:
        """Tick at `rate_hz` until `stop` is set, reconnecting with backoff; `on_reading` gets every
        sample (called on this thread, right after the tick); `before_tick` is called on this thread
        right before every tick (a leader's node takes what it feels there: felt at that tick)."""
        self._running = True
        try:
            self._run(rate_hz, stop, on_reading, before_tick or (lambda: None))
        except Exception as exc:  # noqa: BLE001 - any death of the bus thread is a fault, said and reported
            with self._lock:
                self.state.fatal = f"the bus loop died ({type(exc).__name__}: {exc})"
                self.state.connected = False
            self._log("error", f"{self.port}: {self.state.fatal}\n{traceback.format_exc()}")
            self._on_change()  # /diagnostics says so now, not at its next second
        finally:
            self._running = False
            self._settle_estops(False, f"{self.port}: the bus loop stopped ({self.state.fatal or 'shut down'})")

    def _run(self, rate_hz: float, stop: threading.Event, on_reading: Callable[[Reading], None],
             before_tick: Callable[[], None]) -> None:
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
                before_tick()
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
                "feedback_rendering": bool(self._feedback.joints),
                "feedback_contact_ready": self._feedback.contact is not None and self._feedback.contact.ready,
                "feedback_gated": self._feedback.gated,
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
        # A leader torqued only to render feedback (on every joint, with `contact`) lets go at once:
        # parking would move the device in the operator's hand.
        if self.state.connected and self.state.torque and not self._feedback.joints and action != "release":
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

    def _note_torque(self, states: dict[int, bool]) -> None:
        """Torque as read back (or just set and checked): the servos without it get no goal, and
        `state.torque` says whether every servo has it."""
        self._off = (self._off - {sid for sid, on in states.items() if on}) | {sid for sid, on in states.items()
                                                                               if not on}
        with self._lock:
            self.state.torque = not self._off
            self.state.torque_off = [self.servos.name(sid) for sid in self.servos.ids if sid in self._off]
