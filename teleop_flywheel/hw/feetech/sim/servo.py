"""The simulated SO-101's parts: one STS3215 servo (control table, shaft, motor, protection), the
SO-101's joint travel and gravity, and the scripted human who moves an arm whose torque is off
(or, given a `Hand`, holds it as an operator's hand does: an impedance that also feels the servo).

The servo is as unkind as the real one, because a simulator that forgives what the hardware
punishes lets the driver's tests pass for the wrong reasons:

- **top speed and acceleration**: the shaft never turns faster than ~4.7 rad/s at 12 V (less at a
  lower supply, or Goal_Velocity when set) nor changes speed faster than Acceleration allows;
- **load**: Present_Load is the position loop's effort (proportional to the tracking error and to
  P_Coefficient, the part gravity needs included), capped by Torque_Limit and Max_Torque_Limit;
- **the operator's hand** (`Hand`, given to the arm): a stiffness and a force limit pulling the
  shaft toward where the hand means it to be, against the shaft's drag. Without torque the shaft
  follows the hand (7.5 ms behind, what its drag costs the hand is felt); with torque on, the
  servo's effort and the hand's pull add up,
  so a servo rendering feedback is felt (`hand_force`) and a hand strong enough overpowers it;
- **protection, as the firmware does it**: load above Overload_Torque % for Protection_Time, or
  current above Protection_Current for Over_Current_Protection_Time, sets the overload (0x20) or
  overcurrent (0x08) bit; temperature above Max_Temperature_Limit sets overheat (0x04); a supply
  outside the voltage limits sets 0x01. A bit listed in Unloading_Condition cuts the torque
  (Torque_Enable reads 0), otherwise the torque is held at Protective_Torque %. Overload and
  overcurrent stay latched until the host writes Torque_Enable again; overheat and voltage last as
  long as their cause. Every status packet carries the bits;
- **heat**: the motor warms with the square of its load and cools toward the room;
- **multi-turn**: with Phase bit 4 set, Present_Position counts whole turns (it can exceed 4095
  or go negative); cleared, it wraps within one turn, as LeRobot configures it;
- **gravity** (from the arm, `step(gravity=…)`): a torqued joint sags until its load carries the
  weight; a joint without torque falls to its end stop;
- **power-on**: RAM (address 40 and up) starts from the factory defaults, Torque_Limit from the
  EEPROM's Max_Torque_Limit; writing Max_Torque_Limit later does not change the live limit (only a
  power cycle loads it, as on the servo); `power_on()` is a reboot (a brown-out): torque off, RAM
  reloaded, latched faults gone, the shaft where it is;
- **EEPROM**: every write into it is counted (`eeprom_writes`, its wear); a register named in
  `refused` acknowledges a write and keeps its value (a servo that refuses e.g. its Phase write).
"""
from __future__ import annotations

import bisect
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from teleop_flywheel.core.so101 import BAUD_RATE, MAX_RAW, STEPS_PER_TURN
from teleop_flywheel.hw.feetech import codec as p
from teleop_flywheel.hw.feetech.control_table import (
    BAUD_RATES,
    PHASE_MULTI_TURN,
    REGISTERS,
    TABLE_SIZE,
    register,
)

SERVO_IDS = (1, 2, 3, 4, 5, 6)
GRIPPER_ID = 6
# Physical travel of each SO-101 joint in raw steps (roughly what a calibrated arm visits).
JOINT_RANGES: dict[int, tuple[int, int]] = {
    1: (900, 3200), 2: (800, 3300), 3: (850, 3100), 4: (850, 3200), 5: (200, 3900), 6: (2000, 3300),
}
# Gravity on the SO-101 (fraction of an STS3215's maximum torque, arm stretched out horizontally):
# shoulder_lift carries the whole arm, elbow_flex the forearm. The load falls with the cosine of
# the angle from horizontal, taken at the middle of the travel, and pulls toward the low stop.
GRAVITY: dict[int, float] = {2: 0.22, 3: 0.10}
WRAPPING_JOINTS = (5,)  # wrist_roll turns freely: its shaft may pass a whole turn

STEPS_PER_RAD = STEPS_PER_TURN / (2 * math.pi)
TOP_SPEED_RAD_S = 4.7  # 0.222 s per 60° at 12 V, no load (Feetech's STS3215 12 V figure)
MAX_ACCEL_STEPS_S2 = 100_000.0  # what the motor does with Acceleration 0 (no profile)
LOAD_PER_STEP_ERROR = 8.0  # Present_Load units per step of tracking error at P_REFERENCE: full torque at ~125 steps
P_REFERENCE = 16  # the P_Coefficient LOAD_PER_STEP_ERROR is measured at (the driver's, LeRobot's)
POSITION_TAU_S = 0.04  # the position loop's time constant at full Torque_Limit
FALL_SPEED_RAD_S = 2.0  # a limp joint's speed when gravity pulls it down (friction included)
FRICTION = 0.05  # fraction of maximum torque a limp joint holds against gravity
HEAT_C_PER_S = 0.6  # warming at full load
COOL_TAU_S = 150.0  # cooling toward the room
AMBIENT_C = 30.0
OVERHEAT_HYSTERESIS_C = 5.0
SUPPLY_V = 12.0  # a follower's supply (the STS3215 12 V version); a leader's servos run at 5 V
EEPROM_END = 40  # registers below Torque_Enable live in EEPROM: written only while Lock is 0
LATCHED_FAULTS = 0x20 | 0x08  # overload, overcurrent: cleared by the host enabling torque again

# What backdriving a shaft costs (Present_Load units per step/s): ~10 % of the servo's maximum torque
# at 1 rad/s, a leader's 1/147 joint turned by a finger. An estimate, not a measurement: the leader's
# drag with feedback torque on is measured against it (docs/teleop.md, "Force feedback").
SHAFT_DRAG = 0.15


@dataclass(frozen=True)
class Hand:
    """The operator's hand on a leader, per joint: it pulls the shaft toward the hand's intended pose
    with `stiffness` (Present_Load units, 0.1 % of the servo's maximum torque, per step of the
    shaft behind that pose) up to `limit` (same units); against SHAFT_DRAG a limp shaft lags the
    hand by stiffness / drag (7.5 ms). A finger on the trigger presses far harder
    than a 5 V STS3215 can push back, so the default limit is twice the servo's maximum torque.
    The default stiffness is not measured on hands: on the trigger it is ≈ 7 N·m/rad, ≈ 8 kN/m at
    a fingertip 3 cm from the axis (docs/teleop.md, "The simulator's hand")."""

    stiffness: float = 20.0
    limit: float = 2000.0

    def pull(self, intended: float, position: float) -> float:
        """The hand's force on the shaft (Present_Load units, signed toward higher steps)."""
        return max(-self.limit, min(self.limit, self.stiffness * (intended - position)))


# A finger that yields: it closes the trigger with at most 0.1 of the servo's maximum torque, so
# a trigger rendering a grasp at the leader's 0.15 ceiling (`feedback_torque_limit`) stops it —
# the operator who eases off at what they feel (bench/feedback.py's stops at 0.08), without a
# reaction delay. Strong enough for the trigger's own drag at a brisk close (~1 rad/s).
YIELDING_FINGER = Hand(limit=100.0)


HumanMotion = Callable[[float], Sequence[float]]
"""t (seconds since start) -> six raw-step targets the human's hand moves the leader toward."""


def default_human(t: float) -> list[float]:
    """Smooth, unhurried motion across most of every joint's range; the gripper opens and closes: a
    human sweeping every joint through its travel, as `calibrate` asks. Never still and never sharp,
    it is the hard case for timing a camera from its images (docs/validate.md)."""
    out = []
    for i, sid in enumerate(SERVO_IDS):
        lo, hi = JOINT_RANGES[sid]
        mid, amp = (lo + hi) / 2, (hi - lo) * 0.4
        freq = 0.07 + 0.025 * i
        out.append(mid + amp * math.sin(2 * math.pi * freq * t + 0.9 * i))
    return out


# A hand at work's workspace (radians from each joint's calibrated middle): poses within center ± amp,
# the gripper between center − amp (closed on the object) and center + amp (open).
REACH_CENTER = (0.0, -0.3, 0.4, 0.2, 0.0, 0.6)
REACH_AMP = (0.6, 0.4, 0.5, 0.4, 0.8, 0.5)


@dataclass(frozen=True)
class Move:
    """One reach: from `start` (s) for `seconds`, `source` to `goal` (radians), then still until the next."""

    start: float
    seconds: float
    source: tuple[float, ...]
    goal: tuple[float, ...]

    def at(self, t: float) -> list[float]:
        """The pose at `t` (minimum jerk: at rest at both ends)."""
        u = min(max((t - self.start) / self.seconds, 0.0), 1.0)
        s = 10 * u**3 - 15 * u**4 + 6 * u**5
        return [a + (b - a) * s for a, b in zip(self.source, self.goal, strict=True)]


class Reaching:
    """A hand at work, as the seeds' pick-and-place operators move: point-to-point moves (minimum jerk,
    0.5–1.0 s) between random poses within `center ± amp`, each followed by a 0.1–0.4 s pause, so every
    joint starts and stops together; with `grasps` the gripper closes fully and opens fully on alternate
    pairs of moves (pick, carry, place). Its starts, stops and grasps are what time a camera from its
    images. The plan grows as time runs; `uniform(lo, hi)` draws every random number, in a fixed order
    (a move's length, its pause, then one draw per joint for its goal)."""

    def __init__(self, center: Sequence[float], amp: Sequence[float], uniform: Callable[[float, float], float],
                 grasps: bool = True) -> None:
        self.center, self.amp = tuple(center), tuple(amp)
        self.uniform, self.grasps = uniform, grasps
        self.moves: list[Move] = []
        self._starts: list[float] = []  # each move's start, for the search
        self._ends = 0.0  # where the plan ends: the last move's start + length + pause

    def until(self, t: float) -> list[Move]:
        """Every move that starts at or before `t` (planned as needed)."""
        while self._ends <= t:
            seconds, pause = self.uniform(0.5, 1.0), self.uniform(0.1, 0.4)
            goal = [c + a * self.uniform(-1.0, 1.0) for c, a in zip(self.center, self.amp, strict=True)]
            if self.grasps:
                goal[5] = self.center[5] + self.amp[5] * (-1.0 if len(self.moves) % 4 in (1, 2) else 1.0)
            source = self.moves[-1].goal if self.moves else self.center
            self.moves.append(Move(self._ends, seconds, source, tuple(goal)))
            self._starts.append(self._ends)
            self._ends += seconds + pause
        return self.moves

    def at(self, t: float) -> list[float]:
        """The hand's pose (radians) at `t` seconds."""
        moves = self.until(t)
        return moves[max(bisect.bisect_right(self._starts, t) - 1, 0)].at(t)


def reaching_human(seed: int) -> HumanMotion:
    """The operator at work on a leader (`Reaching` with grasps, radians about each joint's middle as the
    simulator's calibration has it), within each joint's travel. The simulator's trigger travels
    ±1 rad about its middle, shut at the low end: the hand closes it to −0.8 and opens it to +0.8."""
    hand = Reaching((*REACH_CENTER[:5], 0.0), (*REACH_AMP[:5], 0.8), random.Random(seed).uniform)

    def motion(t: float) -> list[float]:
        out = []
        for sid, q in zip(SERVO_IDS, hand.at(t), strict=True):
            lo, hi = JOINT_RANGES[sid]
            out.append(min(max((lo + hi) / 2 + q * STEPS_PER_RAD, lo), hi))
        return out

    return motion


def gravity_load(servo_id: int, position: float) -> float:
    """Gravity's torque on a joint at a shaft position, as a signed fraction of maximum torque
    (negative: toward the low end of travel)."""
    weight = GRAVITY.get(servo_id, 0.0)
    if not weight:
        return 0.0
    lo, hi = JOINT_RANGES[servo_id]
    return -weight * math.cos((position - (lo + hi) / 2) / STEPS_PER_RAD)


class Servo:
    """One STS3215: a 128-byte control table, a shaft (raw steps) and the motor's state."""

    def __init__(self, servo_id: int, return_delay: int, travel: tuple[int, int] = (0, MAX_RAW)) -> None:
        self.table = bytearray(TABLE_SIZE)
        for reg in REGISTERS:
            self._put(reg.address, reg.size, reg.default)
        self._put(register("ID").address, 1, servo_id)
        self._put(register("Return_Delay_Time").address, 1, return_delay)
        self.travel = travel
        lo, hi = travel
        self.position = (lo + hi) / 2.0
        self.velocity = 0.0
        self.temperature = AMBIENT_C
        self.nominal_v = SUPPLY_V  # the supply the servo is built for: its top speed is quoted there
        self.supply_v = SUPPLY_V
        self.eeprom_writes = 0  # writes that reached EEPROM (each one wears it)
        self.refused: set[str] = set()  # registers whose writes are acknowledged and not kept (a fault)
        self.faults = 0  # Status bits now set
        self.blocked_at: float | None = None  # an obstacle holds the shaft here (fault injection)
        self.silent = False  # the firmware hung: nothing is answered (fault injection)
        self._overload_s = 0.0
        self._overcurrent_s = 0.0
        self._protected = False  # torque held at Protective_Torque (a fault not in Unloading_Condition)
        self.pending = b""  # REG_WRITE parameters waiting for ACTION
        self.noise_steps = 0.0  # encoder noise: standard deviation of a reading (raw steps)
        self.hand_force = 0.0  # what the hand pushes with now (Present_Load units, signed; 0 without a hand)
        self._noise = random.Random(servo_id)
        self._put(register("Goal_Position").address, 2, int(self.position))

    @property
    def id(self) -> int:
        return self.table[register("ID").address]

    def _put(self, address: int, size: int, value: int) -> None:
        self.table[address:address + size] = value.to_bytes(size, "little")

    def get(self, name: str) -> int:
        reg = register(name)
        raw = int.from_bytes(self.table[reg.address:reg.address + reg.size], "little")
        return p.from_sign_magnitude(raw, reg.sign_bit) if reg.sign_bit is not None else raw

    def set(self, name: str, value: int) -> None:
        reg = register(name)
        raw = p.to_sign_magnitude(value, reg.sign_bit) if reg.sign_bit is not None else value
        self._put(reg.address, reg.size, raw)

    @property
    def baudrate(self) -> int:
        return BAUD_RATES.get(self.get("Baud_Rate"), BAUD_RATE)

    @property
    def torque_on(self) -> bool:
        return bool(self.get("Torque_Enable"))

    def write(self, address: int, data: bytes) -> None:
        """A host write: only writable bytes change (like the firmware, read-only ones are kept),
        and EEPROM bytes only while the Lock register is 0. Enabling torque clears the latched
        overload and overcurrent bits (the operator's re-enable)."""
        locked = bool(self.get("Lock"))
        torque_at = register("Torque_Enable").address
        if not locked and address < EEPROM_END:
            self.eeprom_writes += 1
        for i, byte in enumerate(data):
            addr = address + i
            if addr >= TABLE_SIZE:
                break
            if locked and addr < EEPROM_END:
                continue
            reg = next((r for r in REGISTERS if r.address <= addr < r.address + r.size), None)
            if reg is not None and reg.name in self.refused:
                continue
            if reg is None or reg.writable:
                self.table[addr] = byte
            if addr == torque_at and byte:
                self.faults &= ~LATCHED_FAULTS
                self._overload_s = self._overcurrent_s = 0.0
                self._protected = False

    def power_on(self) -> None:
        """A reboot (a brown-out, a power cycle): RAM back to its power-on values, Torque_Limit from
        Max_Torque_Limit, torque off, latched faults cleared; EEPROM and the shaft are untouched."""
        for reg in REGISTERS:
            if reg.address >= EEPROM_END and reg.writable:
                self._put(reg.address, reg.size, reg.default)
        self.set("Torque_Limit", self.get("Max_Torque_Limit"))
        self._put(register("Goal_Position").address, 2, max(0, int(self.position) - self.get("Homing_Offset")))
        self.faults = 0
        self._overload_s = self._overcurrent_s = 0.0
        self._protected = False
        self.pending = b""

    def load_calibration(self, homing_offset: int, range_min: int, range_max: int) -> None:
        """Boot with the EEPROM a calibration wrote (what `calibrate` leaves in a real servo)."""
        self.set("Homing_Offset", homing_offset)
        self.set("Min_Position_Limit", range_min)
        self.set("Max_Position_Limit", range_max)

    def place(self, present: int) -> None:
        """Put the shaft where Present_Position reads `present` (after the homing offset); a joint
        with end stops is kept within its travel."""
        shaft = float(present + self.get("Homing_Offset"))
        if self.id in WRAPPING_JOINTS:
            shaft %= STEPS_PER_TURN
        else:
            shaft = min(max(shaft, self.travel[0]), self.travel[1])
        self.position = shaft

    def goal_physical(self) -> float:
        """Goal_Position in shaft steps: the offset added back, clamped to the position limits. The
        firmware measures its error on the reading, so a shaft a turn on (wrist_roll turns freely)
        is driven to the goal within its present turn, and across the reading's seam the long way."""
        lo, hi = self.get("Min_Position_Limit"), self.get("Max_Position_Limit")
        goal = min(max(self.get("Goal_Position"), lo), hi)
        if self.id in WRAPPING_JOINTS and not self.get("Phase") & PHASE_MULTI_TURN:
            return self.position + goal - (self.position - self.get("Homing_Offset")) % STEPS_PER_TURN
        return goal + self.get("Homing_Offset")

    # -- the motor ------------------------------------------------------------------------
    def torque_cap(self) -> float:
        """The most load the motor may exert now, in Present_Load units (0.1 %)."""
        cap = self.get("Torque_Limit")  # RAM: loaded from Max_Torque_Limit at power-on only
        if self._protected:
            cap = min(cap, self.get("Protective_Torque") * 10)
        return float(cap)

    def top_speed(self) -> float:
        """Steps per second: the motor's no-load speed at this supply, or Goal_Velocity if lower."""
        speed = TOP_SPEED_RAD_S * STEPS_PER_RAD * self.supply_v / self.nominal_v
        goal_velocity = abs(self.get("Goal_Velocity"))
        return min(speed, goal_velocity) if goal_velocity else speed

    def acceleration(self) -> float:
        """Steps per second² the motor may change speed by (Acceleration is in 100 steps/s²)."""
        acc = self.get("Acceleration")
        return acc * 100.0 if acc else MAX_ACCEL_STEPS_S2

    def step(self, dt: float, gravity: float = 0.0, hand: float | None = None,
             stop_below: float | None = None, grip: Hand | None = None) -> None:
        """Advance the shaft and the motor by `dt` seconds.

        gravity: the arm's pull on this joint (fraction of maximum torque, signed); hand: where a
        human's hand moves the shaft (None: no hand on it); grip: how the hand holds it — None, the
        scripted human moves the shaft only while the torque is off and lets go of a torqued one; a
        `Hand`, the hand's pull and the servo's effort add up against the shaft's drag, torque on
        or off; stop_below: an object the shaft closes on (a gripper's jaws meet it there and stall).
        """
        if dt <= 0:
            return
        holds = abs(gravity) * 1000.0 <= self.torque_cap() + FRICTION * 1000.0
        self.hand_force = 0.0
        if grip is not None and hand is not None:
            velocity = self._held(dt, gravity, hand, grip)
        elif self.torque_on and holds:
            strength = max(self.torque_cap(), 1.0) / 1000.0
            # The loop's effort is proportional to the error; at rest it settles where that
            # effort carries the weight (a sag of gravity / stiffness).
            sag = gravity * 1000.0 / LOAD_PER_STEP_ERROR
            wanted = (self.goal_physical() + sag - self.position) / (POSITION_TAU_S / strength)
            limit = self.top_speed()
            wanted = max(-limit, min(limit, wanted))
            dv = self.acceleration() * dt
            velocity = self.velocity + max(-dv, min(dv, wanted - self.velocity))
        elif hand is not None:
            velocity = (hand - self.position) * (1.0 - math.exp(-dt / 0.08)) / dt
        elif abs(gravity) > FRICTION:
            velocity = math.copysign(FALL_SPEED_RAD_S * STEPS_PER_RAD, gravity)
        else:
            velocity = 0.0
        new = self.position + velocity * dt
        lo, hi = self.travel
        if self.id not in WRAPPING_JOINTS:
            new = min(max(new, lo), hi)  # the joint's end stops
        if stop_below is not None and new < stop_below <= self.position + 1e-9:
            new = stop_below
        if self.blocked_at is not None:
            new = self.blocked_at  # an obstacle: the shaft does not move, the load builds
        self.velocity = (new - self.position) / dt
        self.position = new
        self._protect(dt)

    def _held(self, dt: float, gravity: float, hand: float, grip: Hand) -> float:
        """The shaft in the operator's hand over `dt`: the hand's pull, the servo's effort (torque on)
        and gravity against the shaft's drag (overdamped: the shaft moves at the net torque over
        SHAFT_DRAG), integrated in steps short against how fast that settles. The mean velocity;
        `hand_force` is the hand's pull at the end."""
        start = self.position
        gain = LOAD_PER_STEP_ERROR * self.get("P_Coefficient") / P_REFERENCE if self.torque_on else 0.0
        n = max(1, math.ceil(dt * (grip.stiffness + gain) / SHAFT_DRAG / 0.5))
        for _ in range(n):
            net = grip.pull(hand, self.position) + self.load() + gravity * 1000.0
            self.position += net / SHAFT_DRAG * dt / n
        self.hand_force = grip.pull(hand, self.position)
        end, self.position = self.position, start  # the common tail applies end stops and obstacles
        return (end - start) / dt

    def _protect(self, dt: float) -> None:
        """The firmware's protection: set fault bits, cut or limit torque as the EEPROM says."""
        load = abs(self.load())
        self.temperature += (HEAT_C_PER_S * (load / 1000.0) ** 2
                             - (self.temperature - AMBIENT_C) / COOL_TAU_S) * dt
        tripped = 0
        if load > self.get("Overload_Torque") * 10:
            self._overload_s += dt
            if self._overload_s >= self.get("Protection_Time") * 0.01:
                tripped |= 0x20
        else:
            self._overload_s = 0.0
        if self.current_units() > self.get("Protection_Current"):
            self._overcurrent_s += dt
            if self._overcurrent_s >= self.get("Over_Current_Protection_Time") * 0.01:
                tripped |= 0x08
        else:
            self._overcurrent_s = 0.0
        limit_c = self.get("Max_Temperature_Limit")
        if self.temperature > limit_c:
            tripped |= 0x04
        elif self.temperature < limit_c - OVERHEAT_HYSTERESIS_C:
            self.faults &= ~0x04
        volts = self.supply_v * 10
        if not self.get("Min_Voltage_Limit") <= volts <= self.get("Max_Voltage_Limit"):
            tripped |= 0x01
        else:
            self.faults &= ~0x01
        self.faults |= tripped
        if tripped and self.torque_on:
            if tripped & self.get("Unloading_Condition"):
                self.set("Torque_Enable", 0)
            else:
                self._protected = True

    # -- what a read returns --------------------------------------------------------------
    def present_position(self) -> int:
        """Present_Position as the firmware reports it: within one turn, or counting turns when
        Phase bit 4 is set."""
        shaft = self.position + (self._noise.gauss(0.0, self.noise_steps) if self.noise_steps else 0.0)
        present = int(round(shaft)) - self.get("Homing_Offset")
        if self.get("Phase") & PHASE_MULTI_TURN:
            return max(-32767, min(32767, present))
        return present % STEPS_PER_TURN

    def current_units(self) -> int:
        """Present_Current (6.5 mA units): ~2 A stalled at full torque, a little to hold."""
        return abs(self.load()) * 300 // 1000 + (5 if self.torque_on else 0)

    def latch(self) -> None:
        """Refresh the read-only registers from the physical state (what a read returns)."""
        self.set("Present_Position", self.present_position())
        self.set("Present_Velocity", int(max(-32767, min(32767, round(self.velocity)))))
        self.set("Present_Load", self.load())
        self.set("Present_Voltage", int(round(self.supply_v * 10)))
        self.set("Present_Temperature", int(round(self.temperature)))
        self.set("Status", self.faults)
        self.set("Moving", 1 if abs(self.velocity) > 5 else 0)
        self.set("Present_Current", self.current_units())

    def load(self) -> int:
        """Present_Load (0.1 % of max torque, signed): the position loop's effort, proportional to
        how far the shaft is from its goal (and to P_Coefficient), capped by the torque limits; zero with torque off."""
        if not self.torque_on:
            return 0
        cap = self.torque_cap()
        error = self.goal_physical() - self.position
        gain = LOAD_PER_STEP_ERROR * self.get("P_Coefficient") / P_REFERENCE
        return int(max(-cap, min(cap, error * gain)))
