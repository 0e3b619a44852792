"""The simulated SO-101's parts: one STS3215 servo as a control table plus a shaft, the SO-101's
joint travel, and the scripted human who moves an arm whose torque is off (see sim.py)."""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from teleop_flywheel.core.so101 import BAUD_RATE, MAX_RAW
from teleop_flywheel.hw.feetech import codec as p
from teleop_flywheel.hw.feetech.control_table import BAUD_RATES, REGISTERS, TABLE_SIZE, register

SERVO_IDS = (1, 2, 3, 4, 5, 6)
GRIPPER_ID = 6
# Physical travel of each SO-101 joint in raw steps (roughly what a calibrated arm visits).
JOINT_RANGES: dict[int, tuple[int, int]] = {
    1: (900, 3200), 2: (800, 3300), 3: (850, 3100), 4: (850, 3200), 5: (200, 3900), 6: (2000, 3300),
}
LOAD_PER_STEP_ERROR = 8.0  # Present_Load units per step of tracking error: full torque at ~125 steps
EEPROM_END = 40  # registers below Torque_Enable live in EEPROM: written only while Lock is 0

HumanMotion = Callable[[float], Sequence[float]]
"""t (seconds since start) -> six raw-step targets the human's hand moves the leader toward."""


def default_human(t: float) -> list[float]:
    """Smooth, unhurried motion across most of every joint's range; the gripper opens and closes."""
    out = []
    for i, sid in enumerate(SERVO_IDS):
        lo, hi = JOINT_RANGES[sid]
        mid, amp = (lo + hi) / 2, (hi - lo) * 0.4
        freq = 0.07 + 0.025 * i
        out.append(mid + amp * math.sin(2 * math.pi * freq * t + 0.9 * i))
    return out



class Servo:
    """One STS3215: a 128-byte control table plus a physical shaft position (raw steps)."""

    def __init__(self, servo_id: int, return_delay: int, travel: tuple[int, int] = (0, MAX_RAW)) -> None:
        self.table = bytearray(TABLE_SIZE)
        for reg in REGISTERS:
            self._put(reg.address, reg.size, reg.default)
        self._put(register("ID").address, 1, servo_id)
        self._put(register("Return_Delay_Time").address, 1, return_delay)
        lo, hi = travel
        self.position = (lo + hi) / 2.0
        self.velocity = 0.0
        self.pending = b""  # REG_WRITE parameters waiting for ACTION
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

    def write(self, address: int, data: bytes) -> None:
        """A host write: only writable bytes change (like the firmware, read-only ones are kept),
        and EEPROM bytes only while the Lock register is 0."""
        locked = bool(self.get("Lock"))
        for i, byte in enumerate(data):
            addr = address + i
            if addr >= TABLE_SIZE:
                break
            if locked and addr < EEPROM_END:
                continue
            reg = next((r for r in REGISTERS if r.address <= addr < r.address + r.size), None)
            if reg is None or reg.writable:
                self.table[addr] = byte

    def load_calibration(self, homing_offset: int, range_min: int, range_max: int) -> None:
        """Boot with the EEPROM a calibration wrote (what `calibrate` leaves in a real servo)."""
        self.set("Homing_Offset", homing_offset)
        self.set("Min_Position_Limit", range_min)
        self.set("Max_Position_Limit", range_max)

    def goal_physical(self) -> float:
        """Goal_Position in shaft steps: the offset added back, clamped to the position limits."""
        lo, hi = self.get("Min_Position_Limit"), self.get("Max_Position_Limit")
        goal = min(max(self.get("Goal_Position"), lo), hi)
        return goal + self.get("Homing_Offset")

    def latch(self) -> None:
        """Refresh the read-only registers from the physical state (what a read returns)."""
        present = int(round(self.position)) - self.get("Homing_Offset")
        self.set("Present_Position", max(-4095, min(4095, present)))
        self.set("Present_Velocity", int(max(-32767, min(32767, round(self.velocity)))))
        self.set("Present_Load", self.load())
        self.set("Moving", 1 if abs(self.velocity) > 5 else 0)
        # ~6.5 mA per unit; a stalled STS3215 at full torque draws ~2 A.
        self.set("Present_Current", abs(self.load()) * 300 // 1000 + (5 if self.get("Torque_Enable") else 0))

    def load(self) -> int:
        """Present_Load (0.1 % of max torque, signed): the position loop's effort, proportional to
        how far the shaft is from its goal — small while tracking, full when blocked (a gripper
        closed on an object). Zero with torque off."""
        if not self.get("Torque_Enable"):
            return 0
        error = self.goal_physical() - self.position
        return int(max(-1000, min(1000, error * LOAD_PER_STEP_ERROR)))
