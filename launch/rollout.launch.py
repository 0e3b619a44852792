"""`ros2 launch teleop_flywheel rollout.launch.py`: the 'rollout' session graph (see teleop_flywheel/ros/session/launch/graph.py)."""
from teleop_flywheel.ros.session.launch.launch_description import generate


def generate_launch_description():  # noqa: D103 - launch entry point
    return generate("rollout")
