"""Benchmark: a takeover blended vs hard-switched, and teleop latency through real nodes.

1. Peak jerk of the command sent across a handover (policy → human with the leader 0.3 rad off
   the policy, 200 Hz ticks), with `AuthorityBlender` at its default 150 ms ramp (stretched, as the
   node does, so the blend stays within the speed limit) vs a hard switch (α steps 0→1 in one
   tick), both then through the node's `CommandGuard` (2 rad/s, its default), in the same run:
   ratio of peak |jerk|.
2. The teleop node's latency from the leader sample's source stamp to the published
   `/follower/joint_command`, p50/p99: the node in its own process, real rclpy/DDS both ways
   (`node_latency` says exactly what is measured), next to the floor of a bare rclpy node that
   republishes each sample at once (the same machine, DDS and executor, no teleop logic).
Writes bench/results/handover.json. Usage: python bench/handover.py [--seconds 10]
"""
from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
from result_file import write_result

from teleop_flywheel.core.blending import AuthorityBlender
from teleop_flywheel.core.safety import CommandGuard, JointLimits
from teleop_flywheel.ros.commands.run import end_process

TICK_NS = 5_000_000
MAX_SPEED = 2.0  # rad/s: the teleop node's default max_speed_rad_s
MS = 1_000_000


def peak_jerk(hard: bool) -> float:
    """Peak |jerk| of the command actually sent across a takeover: the blend (or a hard switch,
    α 0→1 in one tick), then the teleop node's CommandGuard with its default speed limit — so the
    hard switch is judged after the limit that softens it on the real node too."""
    blender = AuthorityBlender(blend_ms=150, max_speed=MAX_SPEED)
    guard = CommandGuard(["joint"], JointLimits.unbounded(), max_speed=MAX_SPEED)
    out = []
    for k in range(400):
        t = k * TICK_NS
        policy = 0.2 * math.sin(k * 0.02)
        blender.human([policy + 0.3], t)
        blender.policy([policy], t)
        if k == 150:
            blender.pedal(True, t)
        target = blender.tick(t).command[0]
        if hard:
            target = policy + 0.3 if k >= 150 else policy
        guard.command(["joint"], [target], t)
        out.append(guard.step([policy], t)[0])
    dt = TICK_NS / 1e9
    jerk = np.diff(np.asarray(out), 3) / dt**3
    return float(np.abs(jerk).max())


def leader_value(k: int) -> float:
    """Sample k's joint value: a 1e-4 rad triangle wave, so every step passes the speed limit
    unchanged and a value is not reused while an earlier sample with it may still be in flight."""
    phase = k % 2000
    return (phase if phase < 1000 else 2000 - phase) * 1e-4


def percentiles(values: list[float]) -> dict[str, float]:
    arr = np.asarray(values)
    return {"p50_ms": float(np.percentile(arr, 50)), "p99_ms": float(np.percentile(arr, 99))}


TELEOP_NODE = [sys.executable, "-c", "from teleop_flywheel.ros.nodes.teleop import main; main()"]
ECHO_NODE = [sys.executable, __file__, "--echo-node"]


def echo_node() -> int:
    """The floor: a bare rclpy node that republishes each leader sample as a command at once."""
    from rclpy.node import Node
    from sensor_msgs.msg import JointState

    from teleop_flywheel.core.clock import now_ns
    from teleop_flywheel.ros.nodes.common import STREAM_QOS, joint_state, spin_node

    class Echo(Node):
        def __init__(self) -> None:
            super().__init__("handover_echo")
            pub = self.create_publisher(JointState, "/follower/joint_command", STREAM_QOS)
            self.create_subscription(JointState, "/leader/joint_states", lambda m: pub.publish(
                joint_state(m.name, m.position, now_ns())), STREAM_QOS)

    return spin_node(Echo, args=[])


def node_latency(seconds: float, command: list[str]) -> dict[str, object]:
    """Latency of a node run as its own process, as deployed (`command` starts it).

    Per leader sample, matched to the first command carrying its value: source stamp → the
    command's tick stamp (the tick that computed and then published it: a lower bound for
    "published"), and source stamp → arrival at this process's subscriber (an upper bound: one
    DDS delivery more). A sample that produced no command (processed more than `stale_ms` after
    its stamp, so the node held; or dropped from a full queue) is counted as unmatched, and the
    conservative p99 counts it as infinitely late instead of leaving it out (None: more than 1 %
    of the samples never produced a command).
    """
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from sensor_msgs.msg import JointState

    from teleop_flywheel.core.clock import now_ns
    from teleop_flywheel.core.so101 import JOINT_NAMES
    from teleop_flywheel.ros.nodes.common import STREAM_QOS, joint_state, msg_stamp_ns

    node = subprocess.Popen(command)
    rclpy.init()
    probe = rclpy.create_node("handover_probe")
    to_tick: list[float] = []
    to_subscriber: list[float] = []
    sent: dict[int, int] = {}
    lock = threading.Lock()

    def on_command(msg: JointState) -> None:
        arrived = now_ns()
        with lock:
            source = sent.pop(round(msg.position[0] * 1e6), None)
        if source is not None:
            to_tick.append((msg_stamp_ns(msg) - source) / MS)
            to_subscriber.append((arrived - source) / MS)

    probe.create_subscription(JointState, "/follower/joint_command", on_command, STREAM_QOS)
    leader = probe.create_publisher(JointState, "/leader/joint_states", STREAM_QOS)
    ex = SingleThreadedExecutor()
    ex.add_node(probe)
    threading.Thread(target=ex.spin, daemon=True).start()
    try:
        deadline = time.monotonic() + 30
        while leader.get_subscription_count() == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        if leader.get_subscription_count() == 0:
            raise RuntimeError(f"{command[-1]}: no subscriber on /leader/joint_states within 30 s")
        end = time.monotonic() + seconds
        k = 0
        while time.monotonic() < end:
            k += 1
            value = leader_value(k)
            t = now_ns()
            with lock:
                sent[round(value * 1e6)] = t  # latency from the sample's source stamp
            leader.publish(joint_state(JOINT_NAMES, [value] * 6, t))
            time.sleep(0.005)
        time.sleep(0.5)  # let the last commands arrive
    finally:
        end_process(node, 10.0)
        ex.shutdown()
        probe.destroy_node()
        rclpy.shutdown()
    matched = len(to_subscriber)
    conservative = np.percentile(np.asarray(to_subscriber + [math.inf] * (k - matched)), 99, method="higher")
    return {
        "samples_sent": k,
        "samples_matched": matched,
        "unmatched_stale_or_dropped": k - matched,
        "to_tick_stamp": percentiles(to_tick),
        "to_subscriber": percentiles(to_subscriber),
        "p99_ms_counting_unmatched": float(conservative) if math.isfinite(conservative) else None,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "handover.json")
    ap.add_argument("--echo-node", action="store_true", help=argparse.SUPPRESS)  # the baseline's process
    args = ap.parse_args()
    if args.echo_node:
        return echo_node()
    blended, hard = peak_jerk(False), peak_jerk(True)
    results = {
        "peak_jerk_blended_rad_s3": blended,
        "peak_jerk_hard_switch_rad_s3": hard,
        "smoothness_ratio": hard / blended,
        "target_ratio_min": 5.0,
        "load_average_1min_before": os.getloadavg()[0],
        "latency_method": "node in its own process (SingleThreadedExecutor, as deployed); "
                          "to_tick_stamp = source stamp -> stamp of the tick that computed and published the "
                          "command; to_subscriber = source stamp -> arrival at the bench's subscriber",
        "teleop_latency": node_latency(args.seconds, TELEOP_NODE),
        "echo_baseline_latency": node_latency(args.seconds, ECHO_NODE),
        "target_latency_p99_ms": 5.0,
        "cpus": os.cpu_count(),
        "load_average_1min_after": os.getloadavg()[0],
    }
    write_result(args.out, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
