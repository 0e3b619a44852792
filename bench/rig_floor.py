"""The rig `rig_cpu.py` measures on and its floor: `sim-bus` arms, the ROS environment of its
processes, a listener counting the samples of every stream, a stand-in for the teleop node (for a
leader with feedback), and the bare loop that does a driver's transactions on the same kind of pty
(sync read, one JointState, the follower's sync write; the leader's `feedback` JointState, which
every leader driver publishes each tick)."""
from __future__ import annotations

import json
import math
import os
import random
import select
import signal
import subprocess
import sys
import threading
import time
from typing import Any

from rig_profile import profiled

IDS = list(range(1, 7))
READ_ADDR, READ_SIZE = 56, 6  # Present_Position, Present_Velocity, Present_Load: the driver's fast read
GOAL_ADDR, GOAL_SIZE = 42, 2  # Goal_Position
NAMES = ["shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper"]
RAD_PER_STEP = 2 * math.pi / 4096
STREAMS = {"leader_arm": "/leader/joint_states", "follower_arm": "/follower/joint_states",
           "floor_leader": "/floor_leader/joint_states", "floor_follower": "/floor_follower/joint_states"}


def ros_env() -> dict[str, str]:
    env = dict(os.environ, ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST")
    env.setdefault("ROS_DOMAIN_ID", str(random.randint(1, 101)))
    return env


def start_sim(role: str, env: dict[str, str]) -> tuple[subprocess.Popen[str], str]:
    # The leader's scripted human sweeps, never still (the motion rig_cpu.py's figures were measured on).
    proc = subprocess.Popen([sys.executable, "-m", "teleop_flywheel.cli", "sim-bus", "--arm", role,
                             "--human-motion", "sinusoid"],
                            stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None
    return proc, proc.stdout.readline().strip()


def role_listener() -> None:
    """Count the samples of every stream; print the counts on each line read from stdin."""
    import rclpy
    from sensor_msgs.msg import JointState

    from teleop_flywheel.ros.nodes.common import STREAM_QOS

    rclpy.init()
    node = rclpy.create_node("rig_cpu_listener")
    counts = dict.fromkeys(STREAMS.values(), 0)

    def counter(topic: str) -> Any:
        def on(_data: bytes) -> None:
            counts[topic] += 1
        return on

    for topic in STREAMS.values():
        node.create_subscription(JointState, topic, counter(topic), STREAM_QOS, raw=True)
    _answer_each_line(node, counts)


def _answer_each_line(node: Any, said: dict[str, Any]) -> None:
    """Spin `node` in a thread; print `said` as JSON for each line read from stdin, until it ends."""
    import rclpy
    from rclpy.executors import SingleThreadedExecutor

    executor = SingleThreadedExecutor()
    executor.add_node(node)
    threading.Thread(target=executor.spin, daemon=True).start()
    for _line in sys.stdin:
        print(json.dumps(said), flush=True)
    executor.shutdown()
    rclpy.shutdown()


def role_teleop() -> None:
    """A stand-in for the teleop node, for a leader driver with feedback: every leader reading commands
    the follower (`ArmPair`, as the teleop node maps it) and `teleop/authority` says the human alone
    drives, at 50 Hz (a leader renders only while it hears that). On each line read from stdin it
    prints what the leader's diagnostics last said of its feedback (`feedback_gated`,
    `feedback_contact_ready`): the measured leader did judge its follower."""
    import rclpy
    from diagnostic_msgs.msg import DiagnosticArray
    from sensor_msgs.msg import JointState

    from teleop_flywheel.core.calibration import ArmPair, load_calibration, sim_calibration_file
    from teleop_flywheel.core.clock import now_ns
    from teleop_flywheel.core.labels import mode_code
    from teleop_flywheel.core.topics import AUTHORITY, AUTHORITY_FIELDS, DIAGNOSTICS, arm_command, arm_state
    from teleop_flywheel.ros.nodes.common import CONTROL_QOS, STREAM_QOS, joint_state

    rclpy.init()
    node = rclpy.create_node("rig_cpu_teleop")
    pair = ArmPair(load_calibration(sim_calibration_file("leader")), load_calibration(sim_calibration_file("follower")))
    command = node.create_publisher(JointState, arm_command("follower"), CONTROL_QOS)
    authority = node.create_publisher(JointState, AUTHORITY, CONTROL_QOS)
    said: dict[str, str] = {}

    def on_leader(msg: JointState) -> None:
        order = [list(msg.name).index(name) for name in NAMES]
        command.publish(joint_state(NAMES, pair.to_follower([msg.position[k] for k in order]), now_ns()))

    def on_diagnostics(msg: DiagnosticArray) -> None:
        for status in msg.status:
            values = {kv.key: kv.value for kv in status.values}
            if "feedback_gated" in values and "leader" in status.name:
                said.update({k: values[k] for k in ("feedback_gated", "feedback_contact_ready") if k in values})

    node.create_subscription(JointState, arm_state("leader"), on_leader, STREAM_QOS)
    node.create_subscription(DiagnosticArray, DIAGNOSTICS, on_diagnostics, 10)
    node.create_timer(0.02, lambda: authority.publish(joint_state(
        AUTHORITY_FIELDS, [1.0, float(mode_code("teleop")), 0.0, 0.0], now_ns())))
    _answer_each_line(node, said)


def role_floor(port: str, topic: str, write: bool, rate_hz: float, priority: int, profile_out: str) -> None:
    """The bare loop: the driver's transactions and nothing else (see the module doc)."""
    import rclpy
    import serial
    from sensor_msgs.msg import JointState

    from teleop_flywheel.core.priority import request_realtime
    from teleop_flywheel.hw.feetech import codec
    from teleop_flywheel.ros.nodes.common import STREAM_QOS

    rclpy.init()
    node = rclpy.create_node(topic.strip("/").split("/")[0])
    pub = node.create_publisher(JointState, topic, STREAM_QOS)
    # A leader publishes what it rendered each tick too (nothing: 0.0 on every joint, torque off).
    feedback = None if write else node.create_publisher(JointState, topic.rsplit("/", 1)[0] + "/feedback",
                                                         STREAM_QOS)
    line = serial.Serial(port, 1_000_000, timeout=0)
    fd = line.fileno()
    request_realtime(priority)
    read_packet = codec.sync_read(READ_ADDR, READ_SIZE, IDS)
    reply_len = len(IDS) * (READ_SIZE + 6)
    msg = JointState()
    msg.name = NAMES
    rendered = JointState()
    rendered.name = NAMES
    rendered.position = rendered.effort = [0.0] * len(NAMES)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())

    def loop() -> None:
        period_ns = int(1e9 / rate_hz)
        next_tick = time.monotonic_ns()
        while not stop.is_set():
            try:
                os.write(fd, read_packet)
            except OSError:  # the simulator is gone
                return
            reply = b""
            deadline = time.monotonic() + 0.02
            while len(reply) < reply_len and (wait := deadline - time.monotonic()) > 0:
                if select.select([fd], [], [], wait)[0]:
                    reply += os.read(fd, 4096)
            stamp = time.time_ns()
            pos, vel, eff = [], [], []
            ok = len(reply) == reply_len
            for k, sid in enumerate(IDS):
                status = reply[k * 12:(k + 1) * 12]
                ok = ok and status[:3] == bytes((0xFF, 0xFF, sid)) and status[3] == READ_SIZE + 2 \
                    and status[11] == codec.checksum(status[2:11])
                if not ok:
                    break
                p, v, e = (int.from_bytes(status[5 + 2 * i:7 + 2 * i], "little") for i in range(3))
                pos.append(((p & 0x7FFF) * (-1 if p & 0x8000 else 1) - 2048) * RAD_PER_STEP)
                vel.append((v & 0x7FFF) * (-1 if v & 0x8000 else 1) * RAD_PER_STEP)
                eff.append((e & 0x3FF) * (-1 if e & 0x400 else 1) / 1000.0)
            if ok:
                msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(stamp, 1_000_000_000)
                msg.position, msg.velocity, msg.effort = pos, vel, eff
                pub.publish(msg)
                if feedback is not None:
                    rendered.header.stamp.sec, rendered.header.stamp.nanosec = divmod(time.time_ns(), 1_000_000_000)
                    feedback.publish(rendered)
                if write:
                    goal = {sid: int(round(x / RAD_PER_STEP)) + 2048 for sid, x in zip(IDS, pos, strict=True)}
                    os.write(fd, codec.sync_write(GOAL_ADDR, GOAL_SIZE, goal))
            next_tick += period_ns
            delay = next_tick - time.monotonic_ns()
            if delay > 0:
                time.sleep(delay / 1e9)
            elif delay < -period_ns:
                next_tick = time.monotonic_ns()

    if profile_out:
        profiled(loop, profile_out)()
    else:
        loop()
    line.close()
    node.destroy_node()
    rclpy.shutdown()
