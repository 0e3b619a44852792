"""Verdict-at-stop benchmark: stop -> verdict for a 60 s one-camera episode (target: ≤ 5 s).

The rig's streams come from a generator process as a session publishes them — follower and leader
joint states, the command sent and `/teleop/authority` at 200 Hz (a smooth reach), and one
synthetic camera (CameraNode, 640×480 JPEG @ 30 fps, drawing the follower) — into the recorder
node in its own process, as deployed. Measured:

- **idle**: a 60 s episode is stopped and nothing else is recorded (the operator reads the
  console): stop request -> the verdict on `/recorder/status`;
- **busy**: a second 60 s episode is stopped and a third is started at once (10 s): stop -> verdict
  while it records, and that third episode's drops and start (service reply time, first sample
  after its start, largest gap in its follower stream).

Also the validator worker's own time (verdict.json `validated.seconds`), the verdict, its camera-lag
estimate, and the load average before and after (this is a shared 2-core machine).

Usage: `python bench/verdict.py [--seconds 60] [--out bench/results/verdict.json]`
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
STREAMS = ["/follower/joint_states", "/leader/joint_states", "/follower/joint_command", "/teleop/authority"]
CAMERA = "/cameras/front/image/compressed"
RATE_HZ = 200.0


def role_generator() -> None:
    import rclpy
    from rclpy.node import Node
    from rclpy.parameter import Parameter
    from sensor_msgs.msg import JointState

    from teleop_flywheel.core.clock import now_ns
    from teleop_flywheel.core.so101 import JOINT_NAMES
    from teleop_flywheel.ros.nodes.camera import CameraNode
    from teleop_flywheel.ros.nodes.common import STREAM_QOS, NodeSpinner, joint_state

    rclpy.init()
    node = Node("bench_rig")
    pubs = {t: node.create_publisher(JointState, t, STREAM_QOS) for t in STREAMS}
    camera = CameraNode("camera_front", parameter_overrides=[Parameter("name", value="front")])
    spinner = NodeSpinner(node.context)
    for n in (node, camera):
        spinner.add(n)
    t0, k = time.monotonic(), 0
    try:
        while True:
            k += 1
            t = now_ns()
            s = t / 1e9
            pos = [0.5 * math.sin(2 * math.pi * 0.4 * s + j) + 0.2 * math.sin(2 * math.pi * 1.1 * s) for j in range(6)]
            for topic in STREAMS[:3]:
                pubs[topic].publish(joint_state(JOINT_NAMES, pos, t))
            pubs["/teleop/authority"].publish(joint_state(["alpha", "mode", "intervention_id", "trigger"],
                                                          [1.0, 0.0, 0.0, 0.0], t))
            delay = t0 + k / RATE_HZ - time.monotonic()
            if delay > 0:
                time.sleep(delay)
    except KeyboardInterrupt:
        pass
    finally:
        camera.close()
        spinner.shutdown()


class Driver:
    """The operator's side: services and the recorder's status."""

    def __init__(self) -> None:
        import rclpy
        from rclpy.node import Node
        from std_msgs.msg import String

        from teleop_flywheel.ros.nodes.common import LATCHED_QOS, NodeSpinner

        rclpy.init()
        self.node = Node("bench_operator")
        self.statuses: list[tuple[float, dict[str, Any]]] = []
        self.node.create_subscription(
            String,
            "/recorder/status",
            lambda m: self.statuses.append((time.monotonic(), json.loads(m.data))),
            LATCHED_QOS,
        )
        self.spinner = NodeSpinner(self.node.context)
        self.spinner.add(self.node)

    def call(self, service: str) -> tuple[str, float, float]:
        """(message, when sent, when answered)."""
        from std_srvs.srv import Trigger

        cli = self.node.create_client(Trigger, f"/recorder/{service}")
        assert cli.wait_for_service(timeout_sec=60), service
        sent = time.monotonic()
        future = cli.call_async(Trigger.Request())
        while not future.done():
            time.sleep(0.001)
        answered = time.monotonic()
        res = future.result()
        assert res.success, f"/recorder/{service}: {res.message}"
        return res.message, sent, answered

    def label(self, **labels: Any) -> None:
        from rcl_interfaces.srv import SetParameters

        from teleop_flywheel.ros.nodes.recorder_client import named_values, refusals

        client = self.node.create_client(SetParameters, "/recorder/label_episode")
        assert client.wait_for_service(timeout_sec=60), "/recorder/label_episode"
        future = client.call_async(named_values(**labels))
        while not future.done():
            time.sleep(0.01)
        self.node.destroy_client(client)
        assert not refusals(future.result()), refusals(future.result())

    def wait(self, ok: Any, timeout: float, what: str) -> tuple[float, dict[str, Any]]:
        deadline = time.monotonic() + timeout
        seen = 0
        while time.monotonic() < deadline:
            for when, status in self.statuses[seen:]:
                if ok(status):
                    return when, status
            seen = max(0, len(self.statuses) - 1)
            time.sleep(0.005)
        raise TimeoutError(what)

    def verdict_of(self, name: str, timeout: float = 300.0) -> tuple[float, dict[str, Any]]:
        return self.wait(lambda s: any(v["episode"] == name and v["verdict"] != "pending"
                                       for v in s.get("verdicts", [])), timeout, f"the verdict of {name}")

    def close(self) -> None:
        import rclpy

        self.spinner.shutdown()
        self.node.destroy_node()
        rclpy.shutdown()


def episode(driver: Driver, seconds: float) -> tuple[Path, float, float]:
    """Record one episode; (bag, stop sent, stop answered)."""
    driver.call("start")
    time.sleep(seconds)
    driver.label(outcome="success", attempts=1)
    message, sent, answered = driver.call("stop")
    return Path(message.split()[1].rstrip(":")), sent, answered


def verdict_numbers(bag: Path, stop_sent: float, stop_answered: float, seen: float) -> dict[str, Any]:
    from teleop_flywheel.recording.recorder.verdict import line, read_verdict

    doc = read_verdict(bag) or {}
    return {"episode": bag.name, "stop_to_verdict_s": round(seen - stop_sent, 3),
            "stop_reply_to_verdict_s": round(seen - stop_answered, 3),
            "stop_call_s": round(stop_answered - stop_sent, 3),
            "validator_s": (doc.get("validated") or {}).get("seconds"), "verdict": line(doc),
            "camera_lag": doc.get("camera_lag")}


def run_bench(seconds: float, out: Path) -> dict[str, Any]:
    from teleop_flywheel.core.episode import EpisodeMeta
    from teleop_flywheel.recording.mcap.metadata import read_metadata_yaml
    from teleop_flywheel.recording.mcap.reader import open_bag
    from teleop_flywheel.ros.commands.run import end_process

    env = dict(os.environ)
    env.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    os.environ.update(env)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench_verdict_") as tmp:
        bags = Path(tmp) / "bags"
        recorder = subprocess.Popen(
            [sys.executable, "-m", "teleop_flywheel.ros.nodes.recorder", "--ros-args",
             "-p", f"output_dir:={bags}", "-p", f"topics:=[{','.join(STREAMS)}]", "-p", "cameras:=[front]",
             "-p", "status_period_s:=0.2"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        generator = subprocess.Popen([sys.executable, str(HERE), "--role", "generator"], env=env,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        driver = Driver()
        try:
            driver.wait(lambda s: not s.get("missing_topics"), 120, "every stream found")
            time.sleep(2.0)
            print(f"idle: recording {seconds:.0f} s, then stop and wait for the verdict", flush=True)
            bag, sent, answered = episode(driver, seconds)
            seen, _ = driver.verdict_of(bag.name)
            idle = verdict_numbers(bag, sent, answered, seen)
            print(json.dumps(idle), flush=True)

            print(f"busy: recording {seconds:.0f} s, then stop and start the next at once", flush=True)
            bag, sent, answered = episode(driver, seconds)
            message, start_sent, start_answered = driver.call("start")
            seen, _ = driver.verdict_of(bag.name)
            busy = verdict_numbers(bag, sent, answered, seen)
            time.sleep(max(0.0, 10.0 - (time.monotonic() - start_answered)))
            driver.label(outcome="success")
            nxt, _s, _a = driver.call("stop")
            nxt_bag = Path(nxt.split()[1].rstrip(":"))
            meta = EpisodeMeta.from_strings(read_metadata_yaml(nxt_bag)["custom_data"])
            follower = open_bag(nxt_bag).stamps("/follower/joint_states")
            busy["next_episode"] = {
                "start_call_s": round(start_answered - start_sent, 3),
                "start_after_stop_reply_s": round(start_sent - answered, 3),
                "first_sample_after_start_ms": round((int(follower[0]) - meta.started_ros_ns) / 1e6, 2),
                "largest_follower_gap_ms": round(float((follower[1:] - follower[:-1]).max()) / 1e6, 2),
                "drops": meta.drops, "messages": int(sum(1 for _ in follower)),
                "verdict_came_while_it_recorded": seen < _s}
            print(json.dumps(busy), flush=True)
        finally:
            driver.close()
            generator.send_signal(2)
            end_process(generator, 10.0)
            end_process(recorder, 20.0)
    result = {
        "episode_s": seconds, "camera": "front 640x480 JPEG q90 @ 30 fps (synthetic, draws the follower)",
        "joint_streams": f"{len(STREAMS)} x {RATE_HZ:.0f} Hz", "cpus": os.cpu_count(),
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "idle": idle, "busy": busy,
        "target": "verdict within 5 s of the stop of a 60 s one-camera episode",
        "met_idle": idle["stop_to_verdict_s"] <= 5.0, "met_busy": busy["stop_to_verdict_s"] <= 5.0,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--role", choices=["bench", "generator"], default="bench")
    parser.add_argument("--seconds", type=float, default=60.0, help="episode length (s)")
    parser.add_argument("--out", type=Path, default=HERE.parent / "results" / "verdict.json")
    args = parser.parse_args()
    if args.role == "generator":
        role_generator()
        return 0
    result = run_bench(args.seconds, args.out)
    print(json.dumps({k: result[k] for k in ("load_average_before", "met_idle", "met_busy")}))
    print(f"stop -> verdict: idle {result['idle']['stop_to_verdict_s']:.2f} s, while the next episode records "
          f"{result['busy']['stop_to_verdict_s']:.2f} s (validator {result['idle']['validator_s']} s / "
          f"{result['busy']['validator_s']} s); written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
