"""What the driver writes to an arm's servos at connect, as data (LeRobot's SO-101 values).

Only a register that differs is written, so a reconnect normally writes nothing. EEPROM registers
(address < 40) are written behind the Lock register and, for that servo only, with its torque off
(the one moment the driver drops a joint's torque on purpose); RAM registers are written as they
are. Identity and calibration (ID, Baud_Rate, Homing_Offset, position limits) are never written
here: `setup-motors` and `calibrate` own them.
"""
from __future__ import annotations

import math

from teleop_flywheel.core.calibration import RAD_PER_STEP
from teleop_flywheel.core.so101 import GRIPPER
from teleop_flywheel.hw.feetech.control_table import PHASE_MULTI_TURN, register

# Every servo of either arm.
OPERATING: dict[str, int] = {"Return_Delay_Time": 0, "Operating_Mode": 0, "P_Coefficient": 16, "I_Coefficient": 0,
                             "D_Coefficient": 32, "Maximum_Acceleration": 254}
# A follower's gripper closes on objects: without these it stalls at full torque and burns (the
# values LeRobot writes for the SO-101 gripper: half torque, half current, overload at 25 %).
GRIPPER_PROTECTION: dict[str, int] = {"Max_Torque_Limit": 500, "Protection_Current": 250, "Overload_Torque": 25}
EEPROM_END = register("Torque_Enable").address
DEFAULT_ACCELERATION = 100  # 100 steps/s² units: ~15 rad/s², 2 rad/s reached in 0.13 s (254 = the servo's snap)
# The servo's own speed limit (Goal_Velocity, steps/s) is the driver's speed limit itself, rounded
# down: without it a servo lagging its command closes the gap at its top speed (~4.7 rad/s); with
# room above the limit the shaft runs above it (2.2 rad/s under a 2 rad/s command at 1.1x). A
# servo that lags at the limit arrives a little later, never faster than the limit.
MAX_GOAL_VELOCITY = 32767  # below Goal_Velocity's sign bit


def servo_speed(max_speed_rad_s: float | None) -> int:
    """Goal_Velocity (steps/s) for a driver speed limit; 0 (the servo's top speed) without one."""
    if max_speed_rad_s is None:
        return 0
    return min(max(1, math.floor(max_speed_rad_s / RAD_PER_STEP)), MAX_GOAL_VELOCITY)


def wanted(role: str, joint: str, acceleration: int, speed: int = 0) -> dict[str, int]:
    """The register values the driver wants in one servo (Phase handled by `phase_wanted`);
    `speed` is Goal_Velocity (`servo_speed`)."""
    out = dict(OPERATING, Acceleration=acceleration, Goal_Velocity=speed)
    if role == "follower" and joint == GRIPPER:
        out.update(GRIPPER_PROTECTION)
    return out


def phase_wanted(phase: int) -> int:
    """Phase with bit 4 cleared: positions within one turn, what the calibration assumes."""
    return phase & ~PHASE_MULTI_TURN


def in_eeprom(name: str) -> bool:
    return register(name).address < EEPROM_END
