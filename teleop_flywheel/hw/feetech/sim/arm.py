"""A simulated SO-101 arm: six STS3215 servos answering the real protocol on a pseudo-terminal.

This is product, not test scaffolding: it is how a newcomer runs the whole stack without an
arm (`teleop-flywheel sim-bus`), and how the tests drive the real serial code paths. It
answers every instruction byte-exactly as the servos do (the vendor SDK talks to it). Each servo
is as unkind as an STS3215 (servo.py: top speed, acceleration, gravity on shoulder and elbow,
load, heat, overload/overcurrent/overheat protection that cuts its own torque, multi-turn
readings); a scripted "human" moves a leader arm while its torque is off (as an operator at work:
moves of 0.5–1 s with pauses, the gripper closing and opening, `servo.Reaching`; or, `human_motion=
"sinusoid"` and for an arm given `human=True` to calibrate, every joint slowly through most of its
travel) — or, given `hand=Hand(…)`,
holds it as an operator's hand does, an impedance on every shaft that feels what a torqued servo
renders (`hand_forces()`: the force feedback that reaches the hand) — or, given `finger=Hand(…)`,
holds only the trigger so (`YIELDING_FINGER`: one that a rendered grasp stops); replies take the wire
time at the baud rate plus the servos' return delay, and reach the host as the chosen USB-serial
adapter passes them on (adapter.py: `pty`, `ftdi16`, `ftdi1`, `ch343`). Injectable faults:
dropped replies, corrupted checksums, error bits, noise, a stall of the whole line, an unplug with
optional re-plug, a servo that stops answering, a blocked joint (its load builds until the
servo's overload protection trips), a hot servo, a supply out of range or sagging mid-run, a
servo that reboots (a brown-out: RAM reloaded, torque off, clean status), one that refuses an EEPROM
write, a multi-turn servo, a servo placed at a chosen reading (wrist_roll at its encoder's seam), a
second servo answering to an id already taken (its replies collide with the first's). A leader's
servos run from 5 V, a follower's from 12 V.

A world file (`world=`, `sim-bus --world FILE`) changes the simulated world while it runs: a
JSON object, re-read whenever it changes, whose `joint_noise_rad` is the standard deviation of
Gaussian encoder noise on every Present_Position reading (an evaluation condition: how a policy
copes with a noisy state) and whose `squeeze` (true) has the scripted human shut a leader's
trigger (the intended pose the gripper's closed end: a scripted operator closing on an object).
A missing or unreadable file leaves the world as it was.

Bring-up is simulated too: the servos boot with the EEPROM a calibration implies (homing offsets,
position limits) — the shipped simulator calibration of the arm's role unless `calibration=` names
another — so a driver that checks EEPROM against its calibration file finds them equal;
`uncalibrated=True` boots them as delivered (offset 0, full limits), for `calibrate`;
`factory_new=True` is one servo straight from the box (id 1, factory baud, offset 0, full
limits), for `setup-motors`; EEPROM registers (address < 40) take a write only
while `Lock` is 0; a Baud_Rate write moves the servo to that baud, and a host whose port is
set to another baud gets no answer (the pty's termios speed is the host's setting); a
broadcast PING is answered by every servo, in id order, each after its return delay.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import random
import select
import termios
import threading
import time
import tty
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from teleop_flywheel.core.calibration import ArmCalibration, load_calibration, sim_calibration_file
from teleop_flywheel.core.so101 import BAUD_RATE
from teleop_flywheel.hw.feetech import codec as p
from teleop_flywheel.hw.feetech.control_table import BAUD_RATES, BY_NAME, PHASE_MULTI_TURN
from teleop_flywheel.hw.feetech.sim.adapter import Adapter, Delivery, adapter
from teleop_flywheel.hw.feetech.sim.servo import (
    GRIPPER_ID,
    JOINT_RANGES,
    SERVO_IDS,
    STEPS_PER_RAD,
    STEPS_PER_TURN,
    Hand,
    HumanMotion,
    Servo,
    default_human,
    gravity_load,
    reaching_human,
)


@dataclass
class Faults:
    """Fault injection; see `parse_fault` for the command-line syntax. Times are seconds after start."""

    drop: float = 0.0
    corrupt: float = 0.0
    noise: float = 0.0
    error_bits: dict[int, int] = field(default_factory=dict)
    stall_at: float | None = None
    stall_for: float = 0.0
    unplug_at: float | None = None
    replug_after: float | None = None
    silent: dict[int, float] = field(default_factory=dict)  # servo id -> when it stops answering for good
    block: dict[int, float] = field(default_factory=dict)  # servo id -> when an obstacle stops its shaft
    hot: dict[int, float] = field(default_factory=dict)  # servo id -> its temperature at start (°C)
    supply_v: float | None = None  # the power supply's voltage (default 12 V)
    multi_turn: dict[int, int] = field(default_factory=dict)  # servo id -> turns its shaft is past (Phase bit 4 set)
    sag: tuple[float, float] | None = None  # (when, volts): the supply drops to that voltage then
    reboot: dict[int, float] = field(default_factory=dict)  # servo id -> when it reboots (a brown-out)
    refuse: dict[int, set[str]] = field(default_factory=dict)  # servo id -> registers it does not keep
    place: dict[int, int] = field(default_factory=dict)  # servo id -> the Present_Position it starts at (0..4095)
    duplicate: list[int] = field(default_factory=list)  # ids a second servo answers to as well (replies collide)


HUMAN_MOTIONS = ("reach", "sinusoid")  # the scripted human's ways of moving an arm (SimulatedArm's human_motion)
NOMINAL_V = {"leader": 5.0, "follower": 12.0}  # each arm's supply (SO-101: 5 V leader, 12 V follower)


FAULT_FORMS = ("drop:P | corrupt:P | noise:P (0..1) | error:ID:BITS | stall:T:SECONDS | unplug:T[:REPLUG_AFTER] | "
               "silent:ID[:T] | block:ID[:T] | hot:ID:CELSIUS | voltage:VOLTS | sag:VOLTS[:T] | reboot:ID[:T] | "
               "refuse:ID:REGISTER | multiturn:ID[:TURNS] | "
               "place:ID:STEPS (starts reading STEPS, e.g. wrist_roll at the 0/4095 seam) | "
               "duplicate:ID (a second servo with that id: replies collide)")


def parse_fault(spec: str, faults: Faults) -> None:
    """Apply one `--fault` spec (the forms of FAULT_FORMS)."""
    kind, _, rest = spec.partition(":")
    args = rest.split(":") if rest else []
    try:
        if kind in ("drop", "corrupt", "noise") and len(args) == 1:
            value = float(args[0])
            if not 0.0 <= value <= 1.0:
                raise ValueError
            setattr(faults, kind, value)
        elif kind == "error" and len(args) == 2:
            faults.error_bits[_servo_id(args[0])] = int(args[1], 0)
        elif kind == "stall" and len(args) == 2:
            faults.stall_at, faults.stall_for = float(args[0]), float(args[1])
        elif kind == "unplug" and len(args) in (1, 2):
            faults.unplug_at = float(args[0])
            faults.replug_after = float(args[1]) if len(args) == 2 else None
        elif kind in ("silent", "block") and len(args) in (1, 2):
            getattr(faults, kind)[_servo_id(args[0])] = float(args[1]) if len(args) == 2 else 0.0
        elif kind == "hot" and len(args) == 2:
            faults.hot[_servo_id(args[0])] = float(args[1])
        elif kind == "voltage" and len(args) == 1:
            faults.supply_v = float(args[0])
        elif kind == "sag" and len(args) in (1, 2):
            faults.sag = (float(args[1]) if len(args) == 2 else 0.0, float(args[0]))
        elif kind == "reboot" and len(args) in (1, 2):
            faults.reboot[_servo_id(args[0])] = float(args[1]) if len(args) == 2 else 0.0
        elif kind == "refuse" and len(args) == 2 and args[1] in BY_NAME:
            faults.refuse.setdefault(_servo_id(args[0]), set()).add(args[1])
        elif kind == "place" and len(args) == 2:
            steps = int(args[1])
            if not 0 <= steps < STEPS_PER_TURN:
                raise ValueError
            faults.place[_servo_id(args[0])] = steps
        elif kind == "duplicate" and len(args) == 1:
            faults.duplicate.append(_servo_id(args[0]))
        elif kind == "multiturn" and len(args) in (1, 2):
            faults.multi_turn[_servo_id(args[0])] = int(args[1]) if len(args) == 2 else 1
        else:
            raise ValueError
    except ValueError:
        raise ValueError(f"bad fault {spec!r}: expected {FAULT_FORMS}") from None


def _servo_id(text: str) -> int:
    sid = int(text)
    if sid not in SERVO_IDS:
        raise ValueError
    return sid


PHYSICS_STEP_S = 0.005  # the longest step the servos' dynamics are integrated over
WORLD_POLL_S = 0.1  # how often the world file is looked at


class SimulatedArm:
    """Six servos on a pty; `with SimulatedArm("follower") as arm: open(arm.port)`.

    `role` only chooses the idle behaviour: a leader with torque off is moved by `human`
    (replace it at any time with `set_human`); with torque on, any servo tracks its goal.
    """

    def __init__(
        self,
        role: str = "follower",
        baudrate: int = BAUD_RATE,
        wire_time: bool = True,
        return_delay: int = 0,
        faults: Faults | None = None,
        link: str | os.PathLike[str] | None = None,
        seed: int = 0,
        calibration: ArmCalibration | None = None,
        human: bool | None = None,
        factory_new: bool = False,
        uncalibrated: bool = False,
        grip_object: float | None = None,
        hand: Hand | None = None,
        finger: Hand | None = None,
        adapter_name: str = "pty",
        world: str | os.PathLike[str] | None = None,
        human_motion: str | None = None,
    ) -> None:
        if role not in ("leader", "follower"):
            raise ValueError(f"role must be leader or follower, got {role!r}")
        # How the scripted human moves: "reach" (at work: moves with pauses and grasps), or "sinusoid"
        # (sweeping every joint through most of its travel, as `calibrate` asks). A human asked to move
        # an arm (`human=True`) is calibrating it; a leader's own human teleoperates.
        motion = human_motion or ("sinusoid" if human else "reach")
        if motion not in HUMAN_MOTIONS:
            raise ValueError(f"human_motion must be one of {', '.join(HUMAN_MOTIONS)}, got {motion!r}")
        self.role = role
        self.baudrate = baudrate
        self.wire_time = wire_time
        self.faults = faults or Faults()
        self.link = Path(link) if link else None
        # The scripted human moves a leader by default; `human=True` lets it move a follower
        # with torque off too (so `calibrate` can be run on either arm unattended).
        self.human = role == "leader" if human is None else human
        # Shaft position (raw steps) where the gripper closes on an object: closing further stalls
        # it there, and its load rises to its torque limit (until the overload protection trips).
        self.grip_object = grip_object
        # How the human holds the leader: None lets go of a torqued shaft (an arm driven by commands);
        # a Hand keeps hold and feels the servos (force feedback).
        self.hand = hand
        # A hand on the trigger alone (the body moved as without one): the finger on a leader's
        # gripper, which feels what the trigger renders; the world file's `squeeze` closes it.
        self.finger = finger
        self.squeeze = False
        if factory_new:
            self.servos = {1: Servo(1, return_delay)}
        else:
            self.servos = {sid: Servo(sid, return_delay, JOINT_RANGES[sid]) for sid in SERVO_IDS}
        if calibration is None and not (uncalibrated or factory_new):
            calibration = load_calibration(sim_calibration_file(role))
        if calibration is not None:
            for joint in calibration.joints:
                if joint.id in self.servos:
                    self.servos[joint.id].load_calibration(joint.homing_offset, joint.range_min, joint.range_max)
        for sid, servo in self.servos.items():
            servo.nominal_v = servo.supply_v = NOMINAL_V[role]
            servo.refused = self.faults.refuse.get(sid, set())
            if sid in self.faults.hot:
                servo.temperature = self.faults.hot[sid]
            if self.faults.supply_v is not None:
                servo.supply_v = self.faults.supply_v
            if sid in self.faults.place:
                servo.place(self.faults.place[sid])
            if sid in self.faults.multi_turn:
                servo.set("Phase", servo.get("Phase") | PHASE_MULTI_TURN)
                servo.position += STEPS_PER_TURN * self.faults.multi_turn[sid]
                servo.travel = (servo.travel[0] + STEPS_PER_TURN * self.faults.multi_turn[sid],
                                servo.travel[1] + STEPS_PER_TURN * self.faults.multi_turn[sid])
        # A second servo set to an id already on the bus (a spare wired in, a servo setup-motors never
        # saw alone): it hears every instruction and answers at the same instant as the first. Its
        # shaft lies elsewhere, so only what both report alike (a PING, the model) arrives clean.
        self.duplicates = {sid: self._twin(self.servos[sid]) for sid in self.faults.duplicate if sid in self.servos}
        self.adapter: Adapter = adapter(adapter_name)
        self._delivery: Delivery | None = None
        self.human_motion = motion
        self._human: HumanMotion = default_human if motion == "sinusoid" else reaching_human(seed)
        self.seed = seed
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._master = self._slave = -1
        self.port = ""
        self.started = 0.0
        self.replies = 0
        self.requests = 0
        # When each read was answered from (monotonic s): the true sample time a bus's stamp estimates.
        self.latches: deque[float] = deque(maxlen=100_000)
        # Every change of a servo's Goal_Position: (monotonic s it took effect, servo id, raw goal).
        self.goal_writes: deque[tuple[float, int, int]] = deque(maxlen=100_000)
        self.plugged = threading.Event()
        self.world = Path(world) if world else None
        self._world_seen: tuple[float, float] | None = None  # (when looked at, the file's mtime)

    @staticmethod
    def _twin(servo: Servo) -> Servo:
        twin = Servo(servo.id, servo.get("Return_Delay_Time"), servo.travel)
        twin.table[:] = servo.table
        lo, hi = servo.travel
        twin.position = lo + (hi - lo) / 3.0  # not where the first one is
        return twin

    # -- lifecycle ------------------------------------------------------------------------
    def __enter__(self) -> SimulatedArm:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        self.started = time.monotonic()
        self._last_physics = self.started
        self._open_pty()
        self._thread = threading.Thread(target=self._serve, name=f"sim-{self.role}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2.0)
        self._close_pty()

    def set_human(self, motion: HumanMotion) -> None:
        with self._lock:
            self._human = motion

    def positions(self) -> list[float]:
        """Physical shaft positions (raw steps), for tests and demos that check tracking."""
        with self._lock:
            return [servo.position for _sid, servo in sorted(self.servos.items())]

    def hand_forces(self) -> list[float]:
        """What the hand pushes each joint with now (fraction of the servo's maximum torque, signed
        toward higher steps; 0 where no `Hand` holds it): the force feedback the operator feels."""
        with self._lock:
            return [servo.hand_force / 1000.0 for _sid, servo in sorted(self.servos.items())]

    def _open_pty(self) -> None:
        self._master, self._slave = os.openpty()
        tty.setraw(self._slave)
        self.port = os.ttyname(self._slave)
        self._delivery = Delivery(self.adapter, self._master, self.seed)
        if self.link is not None:
            tmp = self.link.with_name(self.link.name + ".tmp")
            tmp.unlink(missing_ok=True)
            tmp.symlink_to(self.port)
            tmp.replace(self.link)
        self.plugged.set()

    def _close_pty(self) -> None:
        self.plugged.clear()
        if self._delivery is not None:
            self._delivery.close()
            self._delivery = None
        if self.link is not None and self.link.is_symlink():
            self.link.unlink()
        for fd in (self._master, self._slave):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._master = self._slave = -1

    # -- physics --------------------------------------------------------------------------
    def _step_physics(self, now: float) -> None:
        dt = now - self._last_physics
        if dt <= 0:
            return
        self._last_physics = now
        t = now - self.started
        human = self._human(t) if self.human else None
        for i, s in enumerate(self.servos.values()):
            if s.id in self.faults.silent and t >= self.faults.silent[s.id]:
                s.silent = True
            if s.id in self.faults.block and t >= self.faults.block[s.id] and s.blocked_at is None:
                s.blocked_at = s.position
            if s.id in self.faults.reboot and t >= self.faults.reboot[s.id]:
                del self.faults.reboot[s.id]
                s.power_on()
            if self.faults.sag is not None and t >= self.faults.sag[0]:
                s.supply_v = self.faults.sag[1]
            # The hand moves the joint within its travel, which a multi-turn servo counts turns past.
            turns = STEPS_PER_TURN * self.faults.multi_turn.get(s.id, 0)
            hand = float(human[i]) + turns if human is not None and i < len(human) else None
            if hand is not None and self.squeeze and s.id == GRIPPER_ID:
                hand = float(s.travel[0])  # the hand shuts the trigger
            grip = self.grip_object if s.id == GRIPPER_ID else None  # the jaws stall on the object
            held = self.hand if self.hand is not None else self.finger if s.id == GRIPPER_ID else None
            # A real servo runs on while the simulator's thread waits for the CPU: after a stall the
            # time is integrated in short steps, never as one jump that overshoots every goal.
            steps = max(1, math.ceil(dt / PHYSICS_STEP_S))
            for _ in range(steps):
                s.step(dt / steps, gravity_load(s.id, s.position) if len(self.servos) > 1 else 0.0, hand, grip,
                       held)

    # -- serving --------------------------------------------------------------------------
    def _elapsed(self) -> float:
        return time.monotonic() - self.started

    def _serve(self) -> None:
        parser = p.InstructionParser()
        while not self._stop.is_set():
            f = self.faults
            t = self._elapsed()
            if f.unplug_at is not None and t >= f.unplug_at and self.plugged.is_set():
                self._close_pty()
                if f.replug_after is None:
                    return
                deadline = time.monotonic() + f.replug_after
                while time.monotonic() < deadline and not self._stop.is_set():
                    time.sleep(0.02)
                f.unplug_at = None
                parser.clear()
                self._open_pty()
                continue
            try:
                ready, _, _ = select.select([self._master], [], [], 0.002)
            except (OSError, ValueError):
                return
            now = time.monotonic()
            if self.world is not None and (self._world_seen is None or now - self._world_seen[0] >= WORLD_POLL_S):
                self._read_world(self.world, now)
            with self._lock:
                self._step_physics(now)
            if not ready:
                continue
            try:
                data = os.read(self._master, 4096)
            except OSError:
                continue
            arrival = now
            parser.feed(data)
            host_baud = self._host_baud()
            while (packet := parser.next()) is not None:
                self.requests += 1
                self._answer(packet, arrival, host_baud)

    def _read_world(self, world: Path, now: float) -> None:
        """Apply the world file if it changed since it was last read."""
        try:
            mtime = world.stat().st_mtime
        except OSError:
            mtime = -1.0
        changed = self._world_seen is None or mtime != self._world_seen[1]
        self._world_seen = (now, mtime)
        if not changed or mtime < 0:
            return
        try:
            doc = json.loads(world.read_text())
            noise = float(doc.get("joint_noise_rad", 0.0))
            squeeze = doc.get("squeeze", False) is True
        except (OSError, ValueError, AttributeError, TypeError):
            return
        with self._lock:
            self.squeeze = squeeze
            for servo in self.servos.values():
                servo.noise_steps = max(0.0, noise) * STEPS_PER_RAD

    def _host_baud(self) -> int | None:
        """The baud rate the host set on its end of the pty (None if not a standard rate)."""
        try:
            speed = termios.tcgetattr(self._slave)[5]
        except (termios.error, OSError):
            return None
        return next((rate for rate in BAUD_RATES.values() if getattr(termios, f"B{rate}", None) == speed), None)

    def _answer(self, packet: p.Instruction, arrival: float, host_baud: int | None = None) -> None:
        f = self.faults
        t = self._elapsed()
        if f.stall_at is not None and f.stall_at <= t < f.stall_at + f.stall_for:
            return
        baud = host_baud or self.baudrate  # the line runs at the host's rate (the servos that hear it share it)
        # The request leaves the adapter on the next USB frame, then takes its wire time.
        cursor = arrival + self.adapter.out_delay_s(arrival) + self._wire(len(packet.params) + 6, baud)
        if packet.inst in (p.READ, p.SYNC_READ):
            self.latches.append(cursor)
        with self._lock:
            # A servo set to another baud than the host's hears only garbage; a hung one nothing.
            listening = {sid: s for sid, s in self.servos.items()
                         if host_baud in (None, s.baudrate) and not s.silent}
            goals = {sid: s.get("Goal_Position") for sid, s in listening.items()}
            replies = self._execute(packet, listening)
            if self.duplicates:
                replies = self._collide(replies, self._execute(packet, dict(self.duplicates)))
            for sid, servo in listening.items():
                if servo.get("Goal_Position") != goals[sid]:
                    self.goal_writes.append((cursor, servo.id, servo.get("Goal_Position")))
        chunks: list[tuple[float, bytes]] = []
        for servo, reply in replies:
            if self._rng.random() < f.drop:
                continue
            cursor += servo.get("Return_Delay_Time") * 2e-6
            if self._rng.random() < f.corrupt:
                reply = reply[:-1] + bytes(((reply[-1] + 1) & 0xFF,))
            if self._rng.random() < f.noise:
                reply = bytes(self._rng.randrange(256) for _ in range(3)) + reply
            cursor += self._wire(len(reply), baud)
            chunks.append((cursor, reply))
        if chunks and self._delivery is not None:
            self._delivery.schedule(chunks)
            self.replies += 1

    @staticmethod
    def _collide(replies: list[tuple[Servo, bytes]], twins: list[tuple[Servo, bytes]]) -> list[tuple[Servo, bytes]]:
        """Two servos answering at once on the half-duplex line: a low bit of either wins, so the
        host reads the bitwise AND of both packets (the same bytes if they said the same)."""
        theirs = {servo.id: reply for servo, reply in twins}
        out = []
        for servo, reply in replies:
            twin = theirs.get(servo.id)
            if twin is not None:
                reply = bytes(a & b for a, b in zip(reply, twin, strict=False)) + reply[len(twin):]
            out.append((servo, reply))
        return out

    def _wire(self, n_bytes: int, baud: int) -> float:
        return p.wire_time_ns(n_bytes, baud) / 1e9 if self.wire_time else 0.0

    def _status(self, servo: Servo, data: bytes = b"") -> tuple[Servo, bytes]:
        """A status packet: the servo's own fault bits (Status) and any injected ones."""
        return servo, p.status(servo.id, servo.faults | self.faults.error_bits.get(servo.id, 0), data)

    def _execute(self, pkt: p.Instruction, servos: dict[int, Servo]) -> list[tuple[Servo, bytes]]:
        """Apply one instruction; the status packets to send back (none for broadcasts but PING)."""
        by_id = {s.id: s for s in servos.values()}  # ids as the servos' tables now say
        targets = sorted(by_id.values(), key=lambda s: s.id) if pkt.servo_id == p.BROADCAST_ID else (
            [by_id[pkt.servo_id]] if pkt.servo_id in by_id else [])
        if not targets:
            return []
        broadcast = pkt.servo_id == p.BROADCAST_ID
        if pkt.inst == p.PING:
            # Every servo answers a broadcast PING, in id order, each after its return delay.
            return [self._status(s) for s in targets]
        if pkt.inst == p.READ and len(pkt.params) == 2 and not broadcast:
            address, size = pkt.params
            s = targets[0]
            s.latch()
            return [self._status(s, bytes(s.table[address:address + size]))]
        if pkt.inst in (p.WRITE, p.REG_WRITE) and pkt.params:
            for s in targets:
                if pkt.inst == p.WRITE:
                    s.write(pkt.params[0], pkt.params[1:])
                else:
                    s.pending = pkt.params
            return [] if broadcast else [self._status(targets[0])]
        if pkt.inst == p.ACTION:
            for s in targets:
                if s.pending:
                    s.write(s.pending[0], s.pending[1:])
                    s.pending = b""
            return [] if broadcast else [self._status(targets[0])]
        if pkt.inst == p.SYNC_WRITE and len(pkt.params) >= 2:
            address, size = pkt.params[0], pkt.params[1]
            body = pkt.params[2:]
            for k in range(0, len(body) - size, size + 1):
                sid = body[k]
                if sid in by_id:
                    by_id[sid].write(address, body[k + 1:k + 1 + size])
            return []
        if pkt.inst == p.SYNC_READ and len(pkt.params) >= 2:
            address, size = pkt.params[0], pkt.params[1]
            out = []
            for sid in pkt.params[2:]:
                servo = by_id.get(sid)
                if servo is not None:
                    servo.latch()
                    out.append(self._status(servo, bytes(servo.table[address:address + size])))
            return out
        return []
