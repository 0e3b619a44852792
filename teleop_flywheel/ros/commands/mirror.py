"""`teleop-flywheel mirror`: leader→follower mirroring on two simulated SO-101 arms, in one process.

Starts two simulated arms (`sim-bus` subprocesses by default, or `feetech.sim.SimulatedArm`
threads; real pseudo-terminals, wire-time emulation at 1 Mbaud), a leader and a follower `ArmDriverNode`, and remaps
the follower's
`/follower/joint_command` to `/leader/joint_states` (direct mirroring; the teleop node sits there
in a full session). Prints the bus loop rates and the tracking error (follower − leader joint
state at the follower's sample, degrees) every `--report-every` seconds and at the end.
Exit 0 when both drivers ran and the follower tracked; 1 otherwise (the reason is printed).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import rclpy
from rclpy.context import Context
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.parameter import Parameter
from sensor_msgs.msg import JointState

from teleop_flywheel.core.calibration import sim_calibration_file
from teleop_flywheel.core.clock import NS_PER_S, now_ns
from teleop_flywheel.core.errors import EXIT_OK, EXIT_PARTIAL, UsageError, error_line
from teleop_flywheel.core.so101 import JOINT_NAMES
from teleop_flywheel.core.topics import FOLLOWER_STATE, LEADER_STATE
from teleop_flywheel.hw.feetech.sim import SimulatedArm
from teleop_flywheel.ros.nodes.arm_driver import ArmDriverNode
from teleop_flywheel.ros.nodes.common import STREAM_QOS, msg_stamp_ns, positions_by_name
from teleop_flywheel.ros.session.launch.graph import SimArmSpec


@dataclass
class TrackingStats:
    """Per-joint |follower − leader| in degrees, accumulated after the settle time."""

    count: int = 0
    sum_abs: list[float] = field(default_factory=lambda: [0.0] * len(JOINT_NAMES))
    max_abs: list[float] = field(default_factory=lambda: [0.0] * len(JOINT_NAMES))

    def add(self, errors_deg: list[float]) -> None:
        self.count += 1
        for i, e in enumerate(errors_deg):
            self.sum_abs[i] += abs(e)
            self.max_abs[i] = max(self.max_abs[i], abs(e))

    def mean_abs(self) -> list[float]:
        return [s / self.count if self.count else math.nan for s in self.sum_abs]

    def to_dict(self) -> dict[str, object]:
        return {"samples": self.count,
                "mean_abs_deg": dict(zip(JOINT_NAMES, (round(v, 3) for v in self.mean_abs()), strict=True)),
                "max_abs_deg": dict(zip(JOINT_NAMES, (round(v, 3) for v in self.max_abs), strict=True)),
                "max_deg": round(max(self.max_abs), 3)}


class TrackingMonitor(Node):
    """Compares each follower sample with the latest leader sample (both stamped at the bus)."""

    def __init__(self, settle_s: float, **kwargs: Any) -> None:
        super().__init__("mirror_monitor", **kwargs)
        self.settle_ns = int(settle_s * NS_PER_S)
        self.started_ns = now_ns()
        self.leader: dict[str, float] | None = None
        self.stats = TrackingStats()
        self.window = TrackingStats()
        self.counts = {"leader": 0, "follower": 0}
        self.create_subscription(JointState, LEADER_STATE, self._on_leader, STREAM_QOS)
        self.create_subscription(JointState, FOLLOWER_STATE, self._on_follower, STREAM_QOS)

    def _on_leader(self, msg: JointState) -> None:
        self.counts["leader"] += 1
        self.leader = positions_by_name(msg)

    def _on_follower(self, msg: JointState) -> None:
        self.counts["follower"] += 1
        if self.leader is None or msg_stamp_ns(msg) - self.started_ns < self.settle_ns:
            return
        follower = positions_by_name(msg)
        errors = [math.degrees(follower[n] - self.leader[n]) for n in JOINT_NAMES]
        self.stats.add(errors)
        self.window.add(errors)

    def take_window(self) -> TrackingStats:
        window, self.window = self.window, TrackingStats()
        return window


@contextlib.contextmanager
def simulated_arm(role: str, link: Path, mode: str) -> Iterator[None]:
    """One simulated arm serving on a pty behind `link`, for the duration of the block."""
    if mode == "thread":
        with SimulatedArm(role, link=link, seed=0 if role == "leader" else 1):
            yield
        return
    from teleop_flywheel.ros.commands.run import end_process, start_sim_arm

    proc, _port = start_sim_arm(SimArmSpec(role, str(link)).command(sys.executable))
    try:
        yield
    finally:
        end_process(proc)


def _fmt(stats: TrackingStats) -> str:
    mean = stats.mean_abs()
    joints = " ".join(f"{n}={m:.2f}" for n, m in zip(JOINT_NAMES, mean, strict=True))
    return f"mean |err| deg: {joints}; max {max(stats.max_abs):.2f}"


def run(args: argparse.Namespace) -> int:
    if args.seconds <= 0:
        raise UsageError(f"--seconds must be positive, got {args.seconds:g}", fix="e.g. --seconds 10")
    summary, stats = mirror(args.seconds, args.rate_hz, args.settle, args.report_every, args.sim)
    problem = tracking_problem(stats, args.max_error_deg)
    if args.json:
        print(json.dumps(dict(summary, ok=not problem, problem=problem), indent=2))
    else:
        print_tracking(summary, stats)
    if problem:  # the check failed: one line, the last on stderr, exit 1
        sys.stdout.flush()
        print(
            error_line(
                "mirror",
                f"FAILED: {problem}",
                where="the simulated follower",
                fix="a loaded machine starves the loop: try again with fewer busy processes, or --rate-hz 100",
            ),
            file=sys.stderr,
            flush=True,
        )
    return EXIT_PARTIAL if problem else EXIT_OK


def mirror(seconds: float, rate_hz: float, settle_s: float, report_every_s: float, sim: str
           ) -> tuple[dict[str, Any], TrackingStats]:
    """Mirror a simulated leader onto a simulated follower for `seconds`, a line every
    `report_every_s`: (the summary, the tracking after `settle_s`)."""
    with tempfile.TemporaryDirectory(prefix="teleop_flywheel_mirror_") as tmp, \
            simulated_arm("leader", Path(tmp) / "leader", sim), \
            simulated_arm("follower", Path(tmp) / "follower", sim):
        context = Context()
        rclpy.init(context=context, args=[])
        executor = SingleThreadedExecutor(context=context)
        nodes: list[Node] = []
        try:
            drivers: dict[str, ArmDriverNode] = {}
            for role in ("leader", "follower"):  # each in `nodes` at once: destroyed even if the next fails
                drivers[role] = _driver(role, Path(tmp) / role, rate_hz, context)
                nodes.append(drivers[role])
            monitor = TrackingMonitor(settle_s, context=context)
            nodes.append(monitor)
            for node in nodes:
                executor.add_node(node)
            _spin(executor, drivers, monitor, seconds, report_every_s)
            summary = {
                "seconds": seconds,
                "loop_rate_hz": {r: round(d.arm.state.achieved_hz(), 1) for r, d in drivers.items()},
                "target_rate_hz": rate_hz,
                "joint_states": dict(monitor.counts),
                "diagnostics": {r: [(h := d.arm.health()).level, h.message] for r, d in drivers.items()},
                "tracking": monitor.stats.to_dict(),
            }
        finally:
            for node in nodes:
                close = getattr(node, "close", None)
                if callable(close):
                    close()
                executor.remove_node(node)
                node.destroy_node()
            executor.shutdown()
            rclpy.shutdown(context=context)
    return summary, monitor.stats


def _driver(role: str, port: Path, rate_hz: float, context: Context) -> ArmDriverNode:
    """The arm's driver on the simulated bus; the follower's command is the leader's state (direct mirroring)."""
    overrides = [Parameter("port", value=str(port)), Parameter("role", value=role),
                 Parameter("rate_hz", value=float(rate_hz)),
                 Parameter("calibration_file", value=str(sim_calibration_file(role))),
                 Parameter("simulated", value=True)]
    remap = ["--ros-args", "-r", "/follower/joint_command:=/leader/joint_states"] if role == "follower" else []
    return ArmDriverNode(f"{role}_driver", context=context, parameter_overrides=overrides, cli_args=remap)


def _spin(executor: SingleThreadedExecutor, drivers: dict[str, ArmDriverNode], monitor: TrackingMonitor,
          seconds: float, report_every_s: float) -> None:
    """Spin for `seconds`, printing the loop rates and the last window's tracking every `report_every_s`."""
    start = now_ns()
    end = start + int(seconds * NS_PER_S)
    next_report = start + int(report_every_s * NS_PER_S)
    while now_ns() < end:
        executor.spin_once(timeout_sec=0.05)
        if now_ns() >= next_report:
            next_report += int(report_every_s * NS_PER_S)
            t = (now_ns() - start) / NS_PER_S
            rates = " ".join(f"{r} {d.arm.state.achieved_hz():.0f} Hz" for r, d in drivers.items())
            window = monitor.take_window()
            print(f"[{t:5.1f} s] loop: {rates}; " + (_fmt(window) if window.count else "settling"), flush=True)


def tracking_problem(stats: TrackingStats, max_error_deg: float) -> str:
    """Why the follower did not track ("" when it did)."""
    if stats.count == 0:
        return "no tracking samples: the follower never reported after the settle time"
    if max(stats.mean_abs()) > max_error_deg:
        return f"tracking error above {max_error_deg} deg"
    return ""


def print_tracking(summary: dict[str, Any], stats: TrackingStats) -> None:
    """The loop rates and each joint's tracking error, for a reader."""
    rates = ", ".join(f"{r} {hz} Hz" for r, hz in summary["loop_rate_hz"].items())
    print(f"mirror: {summary['seconds']:g} s, loop rate {rates} (target {summary['target_rate_hz']:g} Hz), "
          f"{stats.count} follower samples compared")
    if stats.count:
        print("tracking (follower - leader, degrees, after settle):")
        for name, mean, peak in zip(JOINT_NAMES, stats.mean_abs(), stats.max_abs, strict=True):
            print(f"  {name:<14} mean {mean:6.2f}  max {peak:6.2f}")
        print(f"  max over joints: {max(stats.max_abs):.2f} deg")
