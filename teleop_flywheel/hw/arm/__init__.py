"""One SO-101 arm on a Feetech bus, without ROS: the driver (`driver.py`), what it writes to the
servos at connect (`settings.py`), its faults (`faults.py`) and the gripper's force limit (`grasp.py`)."""
from teleop_flywheel.hw.arm.driver import (
    POS_ADDR,
    POS_SIZE,
    ROLES,
    ArmConfig,
    ArmDriver,
    CalibrationMismatch,
    Health,
    Reading,
    effective_limits,
)

__all__ = ["POS_ADDR", "POS_SIZE", "ROLES", "ArmConfig", "ArmDriver", "CalibrationMismatch", "Health", "Reading",
           "effective_limits"]
