"""The SO-101 arm model: joint names and servo ids, servo model, resolution.

Joint order is the project's contract (docs/CONTRACTS.md): ids 1..6 in this order everywhere.
Joint limits are not here: they are each arm's calibrated range (`calibration.ArmCalibration.rad_limits`),
narrowed by node parameters where an owner wants less.
"""
from __future__ import annotations

import math

JOINT_NAMES: tuple[str, ...] = (
    "shoulder_pan",
    "shoulder_lift",
    "elbow_flex",
    "wrist_flex",
    "wrist_roll",
    "gripper",
)
JOINT_IDS: dict[str, int] = {name: i + 1 for i, name in enumerate(JOINT_NAMES)}
SERVO_IDS: tuple[int, ...] = tuple(JOINT_IDS[n] for n in JOINT_NAMES)
GRIPPER = "gripper"
BODY_JOINTS: tuple[str, ...] = JOINT_NAMES[:-1]
# Joints that turn a whole turn: their encoder's 0/4095 seam lies within reach, so an angle and the
# same angle ± a turn are one pose (LeRobot calibrates wrist_roll's range as the full 0..4095).
FULL_TURN_JOINTS: tuple[str, ...] = ("wrist_roll",)

MODEL_NUMBER = 777  # STS3215
STEPS_PER_TURN = 4096
MAX_RAW = STEPS_PER_TURN - 1  # 4095: highest Present_Position, LeRobot's "max_res"
BAUD_RATE = 1_000_000
RAD_PER_STEP = 2.0 * math.pi / MAX_RAW  # LeRobot divides by max_res (4095), not 4096
