"""The servos' register values the driver writes at connect, and the load, tracking and supply
thresholds it judges their readings by: fixed SO-101 data (LeRobot's values), not user options
(those are `config.py`'s `ArmConfig`).

Only a register that differs is written, so a reconnect normally writes nothing. EEPROM registers
(address < 40) are written behind the Lock register and, for that servo only, with its torque off
(the one moment the driver drops a joint's torque on purpose); RAM registers are written as they
are. Identity and calibration (ID, Baud_Rate, Homing_Offset, position limits) are never written
here: `setup-motors` and `calibrate` own them. An EEPROM value that does not read back is written
at most `EEPROM_ATTEMPTS` times, then it is a latched fault naming the register (a servo that
refuses a write used to be rewritten every 2 s for ever: ~40,000 EEPROM writes a day).

RAM (`ram_wanted`) is lost when a servo reboots, so it is written at every connect and every reset
and read back before torque returns. Its `Torque_Limit` is the power-on value (Max_Torque_Limit)
less `REBOOT_MARKER`: the live limit is the one the driver chose (the gripper's half torque from
the first session on), and a servo whose Torque_Limit reads its power-on value again has rebooted.

Also as data: the load and tracking error beyond which a body joint has hit something
(`COLLISION`), the signs of a joint gone limp between two slow reads (`LIMP`), and the supply
bands of each arm's nominal voltage (`SUPPLY`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

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
# A leader's gripper renders a grasp as a soft spring (force feedback, docs/teleop.md): half the
# loop gain of the other joints, so the ceiling is reached over ~4° of squeeze, not ~2°.
LEADER_GRIPPER: dict[str, int] = {"P_Coefficient": 8}
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


EEPROM_ATTEMPTS = 3  # writes of one EEPROM value that does not read back, then a latched fault
REBOOT_MARKER = 1  # Torque_Limit is kept this far (0.1 %) below its power-on value (see the module doc)


def wanted(role: str, joint: str, acceleration: int, speed: int = 0) -> dict[str, int]:
    """The EEPROM and RAM values the driver wants in one servo (Phase handled by `phase_wanted`,
    Torque_Limit by `ram_wanted`); `speed` is Goal_Velocity (`servo_speed`)."""
    out = dict(OPERATING, Acceleration=acceleration, Goal_Velocity=speed)
    if role == "follower" and joint == GRIPPER:
        out.update(GRIPPER_PROTECTION)
    if role == "leader" and joint == GRIPPER:
        out.update(LEADER_GRIPPER)
    return out


def ram_wanted(role: str, joint: str, acceleration: int, speed: int, max_torque: int) -> dict[str, int]:
    """The RAM values of one servo whose Max_Torque_Limit (EEPROM) is `max_torque`."""
    out = {n: v for n, v in wanted(role, joint, acceleration, speed).items() if not in_eeprom(n)}
    out["Torque_Limit"] = max(0, max_torque - REBOOT_MARKER)
    return out


@dataclass(frozen=True)
class Collision:
    """A joint has hit something when its load (fraction of maximum torque, either sign) and its
    tracking error (goal written minus present, rad) are beyond these while its shaft is stalled
    (slower than `stall_rad_s`), for `persist_s`. A joint lagging a far goal at speed is not stalled."""

    load: float
    error_rad: float
    stall_rad_s: float = 0.1
    persist_s: float = 0.05


# Free motion reaches the cap too: a joint reversing at 2 rad/s lags its goal by the 0.35 rad bound
# at full load while it decelerates. What free motion never does is stay stalled there: at the
# default Acceleration 100 (15 rad/s²) a reversal spends 13 ms below 0.1 rad/s, at Acceleration 30
# 44 ms, within the 50 ms an obstacle must last; gravity alone loads shoulder_lift to 0.22 with no
# tracking error. An obstacle holds the shaft still at the cap while the goal presses on: held
# ~60 ms after the load reaches 0.9, long before the servo's own 2 s overload trip. The gripper is
# left out: it closes on objects on purpose (`grasp.Grasp` limits its force).
COLLISION: dict[str, Collision] = {
    "shoulder_pan": Collision(0.9, 0.2),
    "shoulder_lift": Collision(0.9, 0.2),
    "elbow_flex": Collision(0.9, 0.2),
    "wrist_flex": Collision(0.9, 0.2),
    "wrist_roll": Collision(0.9, 0.2),
}


@dataclass(frozen=True)
class Limp:
    """A joint that should hold but is `error_rad` from its goal with at most `load` (a torqued
    STS3215 pushes full load at ~0.2 rad): its torque and RAM marker are read at once, at most
    every `recheck_s`, instead of at the next slow read."""

    error_rad: float = 0.1
    load: float = 0.02
    recheck_s: float = 0.1


LIMP = Limp()


@dataclass(frozen=True)
class Supply:
    """An arm's supply voltage (V): nominal, the band outside which it is a warning, and the wider
    band outside which the arm holds (`Present_Voltage` of any servo)."""

    nominal: float
    warn: tuple[float, float]
    hold: tuple[float, float]


# SO-101: the leader's servos on 5 V, the follower's (STS3215 12 V version) on 12 V. A 12 V arm on a
# 9 V sag or a 5 V supply is slow and weak (top speed and torque scale with the supply); a 5 V arm
# fed 12 V runs its 7.4 V servos past their rating. The servos' own window (4-14 V) sees neither.
SUPPLY: dict[str, Supply] = {
    "leader": Supply(5.0, warn=(4.6, 5.6), hold=(4.2, 6.5)),
    "follower": Supply(12.0, warn=(11.0, 12.8), hold=(10.0, 13.5)),
}


def phase_wanted(phase: int) -> int:
    """Phase with bit 4 cleared: positions within one turn, what the calibration assumes."""
    return phase & ~PHASE_MULTI_TURN


def in_eeprom(name: str) -> bool:
    return register(name).address < EEPROM_END
