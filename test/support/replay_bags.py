"""Small bags for the replay tests: a chatter bag of 40 strings at 100 Hz, and both arms' joint states."""
from __future__ import annotations

from pathlib import Path

from mcap_ros2.writer import Writer as Ros2Writer

STRING_DEF = "string data"
N = 40
STEP_NS = 10_000_000  # 100 Hz
T0 = 5_000_000_000


def make_bag(root: Path) -> Path:
    bag = root / "ep"
    bag.mkdir()
    with (bag / "ep_0.mcap").open("wb") as f:
        writer = Ros2Writer(f)
        schema = writer.register_msgdef("std_msgs/msg/String", STRING_DEF)
        for i in range(N):
            t = T0 + i * STEP_NS
            writer.write_message("/chatter", schema, {"data": f"m{i}"}, log_time=t, publish_time=t)
        writer.finish()
    return bag


ROS_T0 = 1_780_000_000 * 10**9  # header stamps are ROS time (wall clock)


def make_arm_bag(root: Path, leader: dict[str, float], follower: dict[str, float], n: int = 30,
                 namespace: str = "") -> Path:
    """Both arms' joint states (100 Hz, fixed positions) as the recorder writes them (under a rig
    namespace: fully qualified topic names, the namespace in the episode record)."""
    from mcap.writer import Writer

    from teleop_flywheel.core.so101 import JOINT_NAMES
    from teleop_flywheel.recording.mcap.cdr import joint_state_cdr
    from teleop_flywheel.recording.mcap.msgdefs import definition

    bag = root / "arms"
    bag.mkdir()
    js = definition("sensor_msgs/msg/JointState")
    with (bag / "arms_0.mcap").open("wb") as f:
        writer = Writer(f)
        writer.start(profile="ros2")
        schema = writer.register_schema(name=js.type_name, encoding="ros2msg", data=js.text.encode())
        channels = {role: writer.register_channel(f"{namespace}/{role}/joint_states", "cdr", schema)
                    for role in ("leader", "follower")}
        if namespace:
            writer.add_metadata("teleop_flywheel.episode", {"namespace": namespace, "stamp_clock": "ros"})
        for i in range(n):
            for role, q in (("leader", leader), ("follower", follower)):
                stamp = ROS_T0 + i * STEP_NS
                data = joint_state_cdr(stamp, list(JOINT_NAMES), [q.get(j, 0.0) for j in JOINT_NAMES])
                writer.add_message(channels[role], log_time=stamp + 1_000_000, data=data, publish_time=stamp)
        writer.finish()
    return bag
