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


# Defaults are a factory STS3215's (12 V version), from Feetech's STS memory table: what a servo
# straight from the box holds. Addresses below 40 are EEPROM (kept over power cycles, written only
# while Lock is 0); 40 and up are RAM.
REGISTERS: tuple[Register, ...] = (
    Register("Firmware_Major_Version", 0, 1, False, 3),
    Register("Firmware_Minor_Version", 1, 1, False, 10),
    Register("Model_Number", 3, 2, False, MODEL_NUMBER),
    Register("ID", 5, 1, True, 1),
    Register("Baud_Rate", 6, 1, True, 0),
    Register("Return_Delay_Time", 7, 1, True, 250),
    Register("Response_Status_Level", 8, 1, True, 1),
    Register("Min_Position_Limit", 9, 2, True, 0),
    Register("Max_Position_Limit", 11, 2, True, 4095),
    Register("Max_Temperature_Limit", 13, 1, True, 70),  # °C: above it the servo protects itself
    Register("Max_Voltage_Limit", 14, 1, True, 140),  # 0.1 V
    Register("Min_Voltage_Limit", 15, 1, True, 40),  # 0.1 V
    Register("Max_Torque_Limit", 16, 2, True, 1000),  # 0.1 %: Torque_Limit's value at power-on
    Register("Phase", 18, 1, True, 0x0C),  # bit 4 (PHASE_MULTI_TURN) set: positions read past one turn
    Register("Unloading_Condition", 19, 1, True, 0x2C),  # fault bits that cut torque: overheat, current, load
    Register("LED_Alarm_Condition", 20, 1, True, 0x2F),
    Register("P_Coefficient", 21, 1, True, 32),
    Register("D_Coefficient", 22, 1, True, 32),
    Register("I_Coefficient", 23, 1, True, 0),
    Register("Minimum_Startup_Force", 24, 2, True, 16),
    Register("CW_Dead_Zone", 26, 1, True, 1),
    Register("CCW_Dead_Zone", 27, 1, True, 1),
    Register("Protection_Current", 28, 2, True, 500),  # 6.5 mA units
    Register("Angular_Resolution", 30, 1, True, 1),
    Register("Homing_Offset", 31, 2, True, 0, sign_bit=11),
    Register("Operating_Mode", 33, 1, True, 0),
    Register("Protective_Torque", 34, 1, True, 20),  # %: the torque left once protection has tripped
    Register("Protection_Time", 35, 1, True, 200),  # 10 ms: how long load above Overload_Torque trips it
    Register("Overload_Torque", 36, 1, True, 80),  # %: the load that starts the protection timer
    Register("Velocity_P_Coefficient", 37, 1, True, 10),
    Register("Over_Current_Protection_Time", 38, 1, True, 200),  # 10 ms
    Register("Velocity_I_Coefficient", 39, 1, True, 200),
    Register("Torque_Enable", 40, 1, True, 0),
    Register("Acceleration", 41, 1, True, 0),  # 100 steps/s² (0 = the servo's maximum)
    Register("Goal_Position", 42, 2, True, 2048, sign_bit=15),
    Register("Goal_Time", 44, 2, True, 0),
    Register("Goal_Velocity", 46, 2, True, 0, sign_bit=15),  # steps/s (0 = the servo's top speed)
    Register("Torque_Limit", 48, 2, True, 1000),  # 0.1 %
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

PHASE_MULTI_TURN = 0x10  # Phase bit 4: angle feedback past one turn (LeRobot clears it on the STS3215)

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
