"""`ros2 launch teleop_flywheel sim.launch.py`: the 'sim' session graph (see teleop_flywheel/ros/session/launch/graph.py)."""
from teleop_flywheel.ros.session.launch.launch_description import generate


def generate_launch_description():  # noqa: D103 - launch entry point
    return generate("sim")
