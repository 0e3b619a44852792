"""The STS3215 control table as data: address, size, signedness, access, default value.

Signed registers use sign-magnitude (not two's complement): bit 15 for positions and
speeds, bit 11 for Homing_Offset. The simulator is built from this table, and the bus's
register-name helpers look addresses up here, so the two cannot disagree.
"""
from __future__ import annotations

from dataclasses import dataclass

from teleop_flywheel.core.so101 import MODEL_NUMBER


@dataclass(frozen=True)
class Register:
    name: str
    address: int
    size: int
    writable: bool
    default: int = 0
    sign_bit: int | None = None  # sign-magnitude sign bit, None = unsigned


REGISTERS: tuple[Register, ...] = (
    Register("Model_Number", 3, 2, False, MODEL_NUMBER),
    Register("ID", 5, 1, True, 1),
    Register("Baud_Rate", 6, 1, True, 0),
    Register("Return_Delay_Time", 7, 1, True, 250),
    Register("Min_Position_Limit", 9, 2, True, 0),
    Register("Max_Position_Limit", 11, 2, True, 4095),
    Register("Max_Torque_Limit", 16, 2, True, 1000),
    Register("P_Coefficient", 21, 1, True, 32),
    Register("D_Coefficient", 22, 1, True, 32),
    Register("I_Coefficient", 23, 1, True, 0),
    Register("Protection_Current", 28, 2, True, 500),
    Register("Homing_Offset", 31, 2, True, 0, sign_bit=11),
    Register("Operating_Mode", 33, 1, True, 0),
    Register("Overload_Torque", 36, 1, True, 80),
    Register("Torque_Enable", 40, 1, True, 0),
    Register("Acceleration", 41, 1, True, 0),
    Register("Goal_Position", 42, 2, True, 2048, sign_bit=15),
    Register("Goal_Time", 44, 2, True, 0),
    Register("Goal_Velocity", 46, 2, True, 0, sign_bit=15),
    Register("Torque_Limit", 48, 2, True, 1000),
    Register("Lock", 55, 1, True, 0),
    Register("Present_Position", 56, 2, False, 2048, sign_bit=15),
    Register("Present_Velocity", 58, 2, False, 0, sign_bit=15),
    Register("Present_Load", 60, 2, False, 0, sign_bit=10),
    Register("Present_Voltage", 62, 1, False, 120),
    Register("Present_Temperature", 63, 1, False, 30),
    Register("Status", 65, 1, False, 0),
    Register("Moving", 66, 1, False, 0),
    Register("Present_Current", 69, 2, False, 0, sign_bit=15),
    Register("Maximum_Acceleration", 85, 1, True, 254),
)

# Baud_Rate register value -> bits per second (STS series).
BAUD_RATES = {0: 1_000_000, 1: 500_000, 2: 250_000, 3: 128_000, 4: 115_200, 5: 76_800, 6: 57_600, 7: 38_400}

BY_NAME: dict[str, Register] = {r.name: r for r in REGISTERS}
TABLE_SIZE = 128

# Status-packet error bits (also Present "Status" register bits).
ERROR_BITS: dict[int, str] = {
    0x01: "voltage",
    0x02: "angle_sensor",
    0x04: "overheat",
    0x08: "overcurrent",
    0x20: "overload",
}


def register(name: str) -> Register:
    try:
        return BY_NAME[name]
    except KeyError:
        raise KeyError(f"STS3215 has no register {name!r}") from None


def error_names(bits: int) -> list[str]:
    """Names of the fault bits set in a status byte (unknown bits as hex)."""
    names = [name for bit, name in ERROR_BITS.items() if bits & bit]
    unknown = bits & ~sum(ERROR_BITS)
    if unknown:
        names.append(f"0x{unknown:02x}")
    return names
