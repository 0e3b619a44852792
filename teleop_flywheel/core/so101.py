"""The SO-101 arm model: joint names and servo ids, servo model, resolution, default joint limits.

Joint order is the project's contract (docs/CONTRACTS.md): ids 1..6 in this order everywhere.
Limits are in radians on the ROS convention of `calibration.py` (0 = middle of the calibrated
range); they are conservative defaults, overridable by node parameters.
"""
from __future__ import annotations

import math

from teleop_flywheel.core.safety import JointLimits

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

MODEL_NUMBER = 777  # STS3215
STEPS_PER_TURN = 4096
MAX_RAW = STEPS_PER_TURN - 1  # 4095: highest Present_Position, LeRobot's "max_res"
BAUD_RATE = 1_000_000
RAD_PER_STEP = 2.0 * math.pi / MAX_RAW  # LeRobot divides by max_res (4095), not 4096

# Default software limits, radians (±~110° body, wrist roll ±~160°, gripper ±~100°); the
# driver also clamps to the calibrated range (range_min..range_max) of each joint.
DEFAULT_LIMITS_RAD: dict[str, tuple[float, float]] = {
    "shoulder_pan": (-1.92, 1.92),
    "shoulder_lift": (-1.92, 1.92),
    "elbow_flex": (-1.92, 1.92),
    "wrist_flex": (-1.92, 1.92),
    "wrist_roll": (-2.8, 2.8),
    "gripper": (-1.75, 1.75),
}


def default_limits() -> JointLimits:
    return JointLimits.from_dict(DEFAULT_LIMITS_RAD)
