"""Benchmark: a takeover blended vs hard-switched, and teleop latency through real nodes.

1. Peak command jerk across a handover (policy → human with the leader 0.3 rad off the policy,
   200 Hz ticks), with `AuthorityBlender` at its default 150 ms ramp vs a hard switch (α steps
   0→1 in one tick), in the same run: ratio of peak |jerk|.
2. The teleop node's latency from the leader sample's source stamp to the published
   `/follower/joint_command`, p50/p99, with real rclpy publishers/subscribers in one process.
Writes bench/results/handover.json. Usage: python bench/handover.py [--seconds 10]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import threading
import time
from pathlib import Path

import numpy as np

from teleop_flywheel.blending import AuthorityBlender

TICK_NS = 5_000_000
MS = 1_000_000


def peak_jerk(hard: bool) -> float:
    blender = AuthorityBlender(blend_ms=150)
    out = []
    for k in range(400):
        t = k * TICK_NS
        policy = 0.2 * math.sin(k * 0.02)
        blender.human([policy + 0.3] * 6, t)
        blender.policy([policy] * 6, t)
        if k == 150:
            blender.pedal(True, t)
        cmd = blender.tick(t).command[0]
        if hard:
            cmd = policy + 0.3 if k >= 150 else policy
        out.append(cmd)
    dt = TICK_NS / 1e9
    jerk = np.diff(np.asarray(out), 3) / dt**3
    return float(np.abs(jerk).max())


def teleop_latency(seconds: float) -> dict[str, float]:
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    import rclpy
    from rclpy.executors import MultiThreadedExecutor
    from sensor_msgs.msg import JointState

    from teleop_flywheel.clock import now_ns
    from teleop_flywheel.nodes.common import STREAM_QOS, joint_state
    from teleop_flywheel.nodes.teleop import TeleopNode
    from teleop_flywheel.so101 import JOINT_NAMES

    rclpy.init()
    teleop = TeleopNode()
    probe = rclpy.create_node("handover_probe")
    latencies: list[float] = []
    sent: dict[int, int] = {}
    lock = threading.Lock()

    def on_command(msg: JointState) -> None:
        arrived = now_ns()
        with lock:
            key = round(msg.position[0] * 1e6)
            if key in sent:
                latencies.append((arrived - sent.pop(key)) / 1e6)

    probe.create_subscription(JointState, "/follower/joint_command", on_command, STREAM_QOS)
    leader = probe.create_publisher(JointState, "/leader/joint_states", STREAM_QOS)
    ex = MultiThreadedExecutor(num_threads=3)
    ex.add_node(teleop)
    ex.add_node(probe)
    threading.Thread(target=ex.spin, daemon=True).start()
    deadline = time.monotonic() + 10
    while leader.get_subscription_count() == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    end = time.monotonic() + seconds
    k = 0
    while time.monotonic() < end:
        k += 1
        value = (k % 1000) * 1e-4  # small steps: the max-step guard passes them unchanged
        t = now_ns()
        with lock:
            sent[round(value * 1e6)] = t  # latency from the sample's source stamp
        leader.publish(joint_state(JOINT_NAMES, [value] * 6, t))
        time.sleep(0.005)
    time.sleep(0.3)
    ex.shutdown()
    teleop.destroy_node()
    probe.destroy_node()
    rclpy.shutdown()
    arr = np.asarray(latencies)
    return {"samples": int(arr.size), "p50_ms": float(np.percentile(arr, 50)), "p99_ms": float(np.percentile(arr, 99))}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "handover.json")
    args = ap.parse_args()
    blended, hard = peak_jerk(False), peak_jerk(True)
    results = {
        "peak_jerk_blended_rad_s3": blended,
        "peak_jerk_hard_switch_rad_s3": hard,
        "smoothness_ratio": hard / blended,
        "target_ratio_min": 5.0,
        "teleop_latency": teleop_latency(args.seconds),
        "target_latency_p99_ms": 5.0,
        "cpus": os.cpu_count(),
        "load_average_1min": os.getloadavg()[0],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
