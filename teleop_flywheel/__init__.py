"""teleop_flywheel: SO-101 teleoperation, blended takeover, raw recording and a data engine.

The core modules at this level import no ROS: ROS lives in `teleop_flywheel.nodes` only.
"""

__version__ = "0.1.0"
