"""One SO-101 arm on a Feetech bus, without ROS: the driver's policy (`driver.py`), the servos it
drives (`servos.py`), the options a user sets (`config.py`), the register values and thresholds
of the servos themselves (`settings.py`), its faults
(`faults.py`), its health (`health.py`), the gripper's force limit (`grasp.py`), what a leader renders to the
hand (`rendering.py`) and what the arm does when the driver stops (`parking.py`)."""
from teleop_flywheel.hw.arm.config import ROLES, ArmConfig, effective_limits
from teleop_flywheel.hw.arm.driver import ArmDriver
from teleop_flywheel.hw.arm.health import Health
from teleop_flywheel.hw.arm.servos import POS_ADDR, POS_SIZE, Reading

__all__ = ["POS_ADDR", "POS_SIZE", "ROLES", "ArmConfig", "ArmDriver", "Health", "Reading",
           "effective_limits"]
