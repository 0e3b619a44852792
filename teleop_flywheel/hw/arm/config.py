"""The options a user sets for one arm (`ArmConfig`, LeRobot-style: the device's options as a
dataclass, from the node's parameters), and the joint limits a calibration allows.

Not the servos' registers: what the driver writes to them, and the thresholds it reads them
against, are fixed values of the SO-101, in `settings.py`; an option here may choose among them
(`acceleration`) but never replaces that table."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from teleop_flywheel.core.calibration import ArmCalibration
from teleop_flywheel.core.safety import JointLimits
from teleop_flywheel.core.so101 import JOINT_NAMES
from teleop_flywheel.hw.arm import settings

ROLES = ("leader", "follower")
# What an arm does when its driver stops (Ctrl-C, SIGTERM, the supervisor's death): `park` moves it
# to its rest pose at the speed limit and then lets go; `hold` leaves the servos holding where they
# are; `release` lets go at once (a raised arm falls). `parking.py` has why `park` is the default.
EXIT_ACTIONS = ("park", "hold", "release")
# Force feedback on a leader (docs/teleop.md, "Force feedback"): `off`; `gripper` — the leader's
# gripper, torqued softly toward where the follower's gripper stopped on an object, so the hand
# feels the grasp and can always overpower it; `contact` — that, and every body joint whose
# follower load departs from what free motion and gravity produce (`rendering.Contact`).
FEEDBACK_MODES = ("off", "gripper", "contact")


@dataclass(frozen=True)
class ArmConfig:
    """What the driver does with one arm, beyond its bus, calibration and command guard."""

    role: str = "follower"
    leader_torque_limit: int = 300  # Torque_Limit while a leader follows commands (0.1 %)
    slow_period_s: float = 1.0  # voltage, temperature, status and torque read-back
    acceleration: int = settings.DEFAULT_ACCELERATION  # the servos' Acceleration register (100 steps/s²)
    grip_force_limit: float = 0.2  # follower gripper: load (fraction of max torque) a close may press with; 0 = off
    temperature_warn_c: float = 55.0
    temperature_stop_c: float = 65.0  # below the servo's own 70 °C cut-off: the driver holds first
    estop_cuts_torque: bool = False  # an e-stop holds the arm (False) or lets it fall limp (True)
    exit_action: str = "park"  # EXIT_ACTIONS
    rest_pose: tuple[float, ...] | None = None  # radians, joint order; None: where the arm was found limp at start
    feedback: str = "off"  # leader: FEEDBACK_MODES
    feedback_torque_limit: int = 150  # leader gripper's Torque_Limit while it renders a grasp (0.1 %)
    feedback_grasp_load: float = 0.1  # follower gripper |load| (fraction of max torque) that is a grasp
    feedback_contact_load: float = 0.15  # contact: follower load beyond the expected that renders (fraction)
    feedback_contact_gain: float = 1.0  # contact: ceiling (fraction of max torque) per unit of excess load
    feedback_contact_torque_limit: int = 300  # contact: the highest Torque_Limit of a body joint (0.1 %)

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"role must be one of {ROLES}, got {self.role!r}")
        if self.exit_action not in EXIT_ACTIONS:
            raise ValueError(f"exit_action must be one of {EXIT_ACTIONS}, got {self.exit_action!r}")
        if self.feedback not in FEEDBACK_MODES:
            raise ValueError(f"feedback must be one of {FEEDBACK_MODES}, got {self.feedback!r}")
        if self.feedback != "off" and self.role != "leader":
            raise ValueError(f"feedback {self.feedback!r} is rendered on a leader, not a {self.role}")
        for name in ("feedback_torque_limit", "feedback_contact_torque_limit"):
            if not 0 <= getattr(self, name) <= 1000:
                raise ValueError(f"{name} must be within 0..1000, got {getattr(self, name)}")
        if self.rest_pose is not None and len(self.rest_pose) != len(JOINT_NAMES):
            raise ValueError(f"rest_pose needs {len(JOINT_NAMES)} values (radians, joint order), "
                             f"got {len(self.rest_pose)}")
        if not 0 <= self.acceleration <= 254:
            raise ValueError(f"acceleration must be within 0..254, got {self.acceleration}")
        if not self.temperature_warn_c <= self.temperature_stop_c:
            raise ValueError(f"temperature_warn_c {self.temperature_warn_c} is above temperature_stop_c "
                             f"{self.temperature_stop_c}")


def effective_limits(cal: ArmCalibration, lower: Sequence[float], upper: Sequence[float]) -> JointLimits:
    """Limits intersected with the calibrated range of each joint (radians); ValueError naming the
    joint if they do not overlap. Limits wider than a turn leave the calibrated range as it is."""
    if len(lower) != len(JOINT_NAMES) or len(upper) != len(JOINT_NAMES):
        raise ValueError(f"joint_lower_limits/joint_upper_limits need {len(JOINT_NAMES)} values (radians)")
    cal_range = cal.rad_limits()
    bounds = {}
    for name, lo, hi in zip(JOINT_NAMES, lower, upper, strict=True):
        clo, chi = cal_range[name]
        bounds[name] = (max(lo, clo), min(hi, chi))
        if bounds[name][0] > bounds[name][1]:
            raise ValueError(f"{name}: limits [{lo}, {hi}] do not overlap the calibrated range [{clo:.3f}, {chi:.3f}]")
    return JointLimits.from_dict(bounds)
