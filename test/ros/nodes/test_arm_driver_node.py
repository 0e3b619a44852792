"""arm_driver against simulated arms on real pseudo-terminals, with real rclpy (no mocks).

Every wait is a wait-for-condition with a generous timeout; bounds are on behaviour (ticks,
register values, positions), never on wall-clock speed, so a loaded 2-core box passes.
"""
from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest
import rclpy
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.context import Context
from rclpy.node import Node
from rclpy.parameter import Parameter
from sensor_msgs.msg import JointState
from std_srvs.srv import Trigger
from support.procs import wait_for
from support.sim_arms import driven_before

from teleop_flywheel.core.calibration import load_calibration, sim_calibration_file
from teleop_flywheel.core.clock import now_ns
from teleop_flywheel.core.errors import CalibrationError
from teleop_flywheel.core.so101 import JOINT_NAMES
from teleop_flywheel.hw.feetech.sim import Faults, SimulatedArm
from teleop_flywheel.hw.feetech.sim.servo import default_human
from teleop_flywheel.ros.nodes.arm_driver import ArmDriverNode
from teleop_flywheel.ros.nodes.common import STREAM_QOS, NodeSpinner, joint_state, msg_stamp_ns

pytestmark = pytest.mark.timeout(180)



class Graph:
    """A private rclpy context, nodes spun as the runner spins them; nodes closed at the end."""

    def __init__(self) -> None:
        self.context = Context()
        rclpy.init(context=self.context, args=[])
        self.spinner = NodeSpinner(self.context)
        self.nodes: list[Node] = []

    def add(self, node: Node) -> Node:
        self.nodes.append(node)
        self.spinner.add(node)
        return node

    def driver(self, role: str, arm: SimulatedArm, remap: list[str] | None = None, first_session: bool = False,
               **params: object) -> ArmDriverNode:
        """A driver node of `arm`, which it has driven before (`driven_before`) unless `first_session`."""
        if not first_session:
            driven_before(arm, role)
        overrides = [Parameter("port", value=str(arm.link)), Parameter("role", value=role),
                     Parameter("calibration_file", value=str(sim_calibration_file(role))),
                     Parameter("simulated", value=True)]
        overrides += [Parameter(k, value=v) for k, v in params.items()]
        cli = ["--ros-args"] + [a for r in (remap or []) for a in ("-r", r)] if remap else []
        node = ArmDriverNode(f"{role}_driver", context=self.context, parameter_overrides=overrides, cli_args=cli)
        self.add(node)
        return node

    def close(self) -> None:
        for node in self.nodes:
            getattr(node, "close", lambda: None)()
        self.spinner.shutdown()
        for node in self.nodes:
            node.destroy_node()
        self.context.shutdown()


class Probe(Node):
    """Publishes commands and records joint states and diagnostics."""

    def __init__(self, context: Context, role: str) -> None:
        super().__init__(f"probe_{role}", context=context)
        self.states: list[tuple[int, JointState]] = []
        self.diags: list[DiagnosticArray] = []
        self.cmd = self.create_publisher(JointState, f"/{role}/joint_command", STREAM_QOS)
        self.create_subscription(JointState, f"/{role}/joint_states", self._on_state, STREAM_QOS)
        self.create_subscription(DiagnosticArray, "/diagnostics", self.diags.append, 10)

    def _on_state(self, msg: JointState) -> None:
        self.states.append((now_ns(), msg))

    def latest(self) -> dict[str, float]:
        return dict(zip(self.states[-1][1].name, self.states[-1][1].position, strict=True))

    def send(self, positions: dict[str, float]) -> None:
        self.cmd.publish(joint_state(list(positions), list(positions.values()), now_ns()))

    def diag_levels(self, port: str) -> list[tuple[int, str]]:
        return [(s.level[0] if isinstance(s.level, bytes) else s.level, s.message)
                for d in list(self.diags) for s in d.status if s.hardware_id == port]


@pytest.fixture
def graph() -> Iterator[Graph]:
    g = Graph()
    yield g
    g.close()


@pytest.fixture
def follower_arm(tmp_path: Path) -> Iterator[SimulatedArm]:
    with SimulatedArm("follower", link=tmp_path / "follower") as arm:
        yield arm


def goal_raw(arm: SimulatedArm, sid: int) -> int:
    return arm.servos[sid].get("Goal_Position")


def test_mirror_follows_leader(graph: Graph, tmp_path: Path, follower_arm: SimulatedArm) -> None:
    with SimulatedArm("leader", link=tmp_path / "leader") as leader_arm:
        pose = [1500.0, 2600.0, 1400.0, 2500.0, 1000.0, 2900.0]  # a still hand away from mid-range
        leader_arm.set_human(lambda t: pose)
        graph.driver("leader", leader_arm)
        follower = graph.driver("follower", follower_arm, remap=["/follower/joint_command:=/leader/joint_states"],
                                first_session=True, max_speed_rad_s=4.7)
        probe = graph.add(Probe(graph.context, "follower"))
        wait_for(lambda: follower.arm.guard.stats.commands > 200, 60, "follower receiving leader states")
        # calibration was written: homing offsets and limits in the follower's control table
        cal = load_calibration(sim_calibration_file("follower"))
        for j in cal.joints:
            s = follower_arm.servos[j.id]
            assert (s.get("Homing_Offset"), s.get("Min_Position_Limit"), s.get("Max_Position_Limit"),
                    s.get("Return_Delay_Time"), s.get("Torque_Enable")) == (j.homing_offset, j.range_min,
                                                                            j.range_max, 0, 1)
        # At rest the physical shafts agree to a few steps although the arms' homing offsets differ:
        # the units went through both calibrations correctly (independent of machine load). Gravity
        # sags the follower's shoulder and elbow by what their load needs (~27 steps at most).
        sag = [4, 30, 30, 4, 4, 4]
        wait_for(
            lambda: all(
                abs(f - ld) < s for f, ld, s in zip(follower_arm.positions(), leader_arm.positions(), sag, strict=True)
            ),
            60,
            "follower shafts at the leader's pose",
        )
        # Moving: a hand at half the default speed (on a loaded box the loop may drop far below
        # 200 Hz; the per-tick max step, tested on its own below, must not be what limits here).
        leader_arm.set_human(lambda t: default_human(0.5 * t))
        time.sleep(0.5)
        # Sample both physical shafts; compare the follower with the leader shifted by the best
        # common lag (pipeline + servo lag grows with machine load; the shape must not change).
        samples = []
        for _ in range(250):
            samples.append((time.monotonic(), leader_arm.positions(), follower_arm.positions()))
            time.sleep(0.01)
        t = np.array([s[0] for s in samples])
        lead = np.array([s[1] for s in samples]) * 360 / 4095
        fol = np.array([s[2] for s in samples]) * 360 / 4095
        travel = lead.max(axis=0) - lead.min(axis=0)
        assert travel.max() > 5, "the leader did not move: the test would prove nothing"
        best = None
        for lag in np.arange(0.0, 1.0, 0.01):
            use = t - lag >= t[0]
            shifted = np.stack([np.interp(t[use] - lag, t, lead[:, j]) for j in range(6)], axis=1)
            err = np.abs(fol[use] - shifted).mean(axis=0)
            if best is None or err.max() < best[1].max():
                best = (lag, err)
        assert best is not None
        # relative to how far each joint moved: under heavy load ticks get irregular, so the
        # bound is on following the shape, not on an absolute error that depends on the box
        moving = travel > 5
        assert (best[1][moving] < 0.3 * travel[moving] + 3.0).all(), (
            f"mean tracking error per joint (deg) {best[1]} vs travel {travel} at lag {best[0]:.2f} s; "
            f"{follower.arm.health().values}"
        )
        # stamps are bus stamps: increasing, and taken before the message was received
        stamps = [(recv, msg_stamp_ns(m)) for recv, m in probe.states[-50:]]
        assert all(b[1] > a[1] for a, b in pairwise(stamps))
        assert all(s <= r for r, s in stamps)


def test_mirror_cli_exits_zero() -> None:
    env = dict(os.environ)
    out = subprocess.run([sys.executable, "-m", "teleop_flywheel.cli", "mirror", "--seconds", "2.5", "--settle", "0.5",
                          "--json", "--report-every", "1",
                          # tracking quality is test_mirror_follows_leader's job (load-independent);
                          # here: the command runs, reports and exits 0 even on a starved machine
                          "--max-error-deg", "360"], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    summary = json.loads(out.stdout[out.stdout.index("{\n"):])
    assert summary["ok"] and summary["tracking"]["samples"] > 50
    assert summary["loop_rate_hz"]["follower"] > 0
    # A line a second; printed when the spinning loop gets there (on a starved machine "[  1.1 s]").
    assert re.search(r"^\[  1\.\d s\] loop:", out.stdout, re.MULTILINE), out.stdout


def test_limits_clamp_command(graph: Graph, follower_arm: SimulatedArm) -> None:
    upper = [1.9] * 6
    upper[0] = 0.3
    driver = graph.driver("follower", follower_arm, joint_upper_limits=upper)
    probe = graph.add(Probe(graph.context, "follower"))
    wait_for(lambda: probe.states, what="joint states")
    cal = driver.arm.calibration
    target = dict(probe.latest(), shoulder_pan=1.5)
    wait_for(lambda: (probe.send(target), goal_raw(follower_arm, 1) == cal["shoulder_pan"].rad_to_raw(0.3))[1],
             what="goal clamped at the 0.3 rad limit")
    time.sleep(0.2)
    assert goal_raw(follower_arm, 1) == cal["shoulder_pan"].rad_to_raw(0.3)
    wait_for(lambda: abs(probe.latest()["shoulder_pan"] - 0.3) < 0.01, what="arm at the limit")
    assert driver.arm.guard.stats.clamped > 0


def test_speed_limits_the_goal_in_rad_per_second(graph: Graph, follower_arm: SimulatedArm) -> None:
    speed = 0.8  # rad/s: 0.4 rad takes 0.5 s whatever the loop's rate
    driver = graph.driver("follower", follower_arm, max_speed_rad_s=speed, watchdog_ms=0.0)
    probe = graph.add(Probe(graph.context, "follower"))
    wait_for(lambda: probe.states, what="joint states")
    cal = driver.arm.calibration["shoulder_pan"]
    start = probe.latest()
    probe.send(dict(start, shoulder_pan=start["shoulder_pan"] + 0.4))
    target_raw = cal.rad_to_raw(start["shoulder_pan"] + 0.4)
    writes: list[tuple[float, int]] = []
    deadline = time.monotonic() + 60
    while (not writes or writes[-1][1] != target_raw) and time.monotonic() < deadline:
        time.sleep(0.05)
        writes = [(t, g) for t, sid, g in list(follower_arm.goal_writes) if sid == 1]
    assert writes[-1][1] == target_raw
    moving = [(t, g) for t, g in writes if g != writes[0][1]]
    assert len(moving) > 10, "no intermediate goals seen"
    steps_per_rad = 1 / (2 * math.pi / 4095)
    # Over 100 ms windows: the simulator stamps each write when its thread takes it, a few ms late
    # on a busy machine, so consecutive writes can look closer in time than they were sent.
    for i, (t1, g1) in enumerate(moving):
        t0, g0 = next(((t, g) for t, g in reversed(moving[:i]) if t1 - t >= 0.1), (t1, g1))
        assert abs(g1 - g0) <= speed * (t1 - t0) * steps_per_rad * 1.1 + 1, (t1 - t0, g1 - g0)
    assert moving[-1][0] - moving[0][0] >= 0.4 / speed * 0.9
    assert driver.arm.guard.stats.rate_limited > 0


def test_watchdog_holds_when_commands_stop(graph: Graph, follower_arm: SimulatedArm) -> None:
    driver = graph.driver("follower", follower_arm, max_speed_rad_s=0.4, watchdog_ms=100.0)
    probe = graph.add(Probe(graph.context, "follower"))
    wait_for(lambda: probe.states, what="joint states")
    start = probe.latest()
    target = dict(start, shoulder_pan=start["shoulder_pan"] + 0.5)
    probe.send(target)  # one command, then silence: the guard must stop chasing it
    wait_for(lambda: driver.arm.guard.stale(now_ns()), what="watchdog to fire")
    # The bus thread may be mid-tick (computed just before the deadline): let it finish that tick.
    time.sleep(0.1)
    held = goal_raw(follower_arm, 1)
    time.sleep(0.5)
    assert goal_raw(follower_arm, 1) == held
    assert held < driver.arm.calibration["shoulder_pan"].rad_to_raw(target["shoulder_pan"]) - 100
    assert driver.arm.guard.stats.stale_ticks > 0
    # a live command stream drives it all the way
    final = driver.arm.calibration["shoulder_pan"].rad_to_raw(target["shoulder_pan"])
    wait_for(lambda: (probe.send(target), goal_raw(follower_arm, 1) == final)[1], 60, "goal with fresh commands")


def test_leader_follows_then_releases(graph: Graph, tmp_path: Path) -> None:
    with SimulatedArm("leader", link=tmp_path / "leader") as arm:
        arm.set_human(lambda t: [2050.0, 2050.0, 1975.0, 2025.0, 2050.0, 2650.0])  # a still hand
        driver = graph.driver("leader", arm, leader_torque_limit=250, watchdog_ms=500.0)
        probe = graph.add(Probe(graph.context, "leader"))
        wait_for(lambda: probe.states, what="leader joint states")
        assert all(s.get("Torque_Enable") == 0 for s in arm.servos.values())
        target = {n: 0.25 for n in JOINT_NAMES}

        def torque(on: int) -> bool:
            return all(s.get("Torque_Enable") == on for s in arm.servos.values())

        wait_for(lambda: (probe.send(target), torque(1))[1], what="leader torque on")
        assert all(s.get("Torque_Limit") == 250 for s in arm.servos.values())
        # Gravity sags shoulder_lift and elbow_flex (held at 25 % torque) by what their load needs.
        tolerance = {name: 0.06 if name in ("shoulder_lift", "elbow_flex") else 0.02 for name in JOINT_NAMES}
        wait_for(lambda: (probe.send(target), all(abs(v - 0.25) < tolerance[n] for n, v in probe.latest().items()))[1],
                 60, "leader at the commanded pose")
        probe.cmd.publish(joint_state([], [], now_ns()))  # pedal down: empty command
        wait_for(lambda: torque(0), what="torque released on empty command")
        # commands engage again; once they stop, the watchdog releases (sent until engaged, so a
        # starved driver thread cannot let the only command go stale before acting on it)
        wait_for(lambda: (probe.send(target), torque(1))[1], what="leader torque on again")
        wait_for(lambda: torque(0), 10, "torque released when commands go stale")
        # the driver records the release right after its write reached the servos
        wait_for(lambda: not driver.arm.state.torque, 10, "the driver's state says torque off")


def test_unplug_error_names_port_then_reconnects(graph: Graph, tmp_path: Path) -> None:
    faults = Faults(unplug_at=1.5, replug_after=2.0)
    with SimulatedArm("follower", link=tmp_path / "follower", faults=faults) as arm:
        driver = graph.driver("follower", arm)
        probe = graph.add(Probe(graph.context, "follower"))
        port = str(arm.link)
        wait_for(lambda: any(lvl == 2 and port in msg for lvl, msg in probe.diag_levels(port)), 60,
                 "diagnostics ERROR naming the port")
        assert driver._thread.is_alive()
        n = len(probe.states)
        wait_for(lambda: driver.arm.state.reconnects >= 1, 60, "reconnect")
        wait_for(lambda: len(probe.states) > n + 20, 60, "joint states after reconnect")
        wait_for(lambda: probe.diag_levels(port)[-1][0] == 0, 30, "diagnostics OK again")
        assert all(s.get("Torque_Enable") == 1 for s in arm.servos.values())


def test_bad_calibration_is_a_clear_error(graph: Graph, tmp_path: Path, follower_arm: SimulatedArm) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(sim_calibration_file("follower").read_text().replace("range_max: 3285", "range_max: 1000"))
    with pytest.raises(CalibrationError, match=r"bad\.yaml: joints\.gripper\.range_min"):
        ArmDriverNode("bad_driver", context=graph.context, parameter_overrides=[
            Parameter("port", value=str(follower_arm.link)), Parameter("calibration_file", value=str(bad))])
    with pytest.raises(ValueError, match="role"):
        ArmDriverNode("bad_role", context=graph.context, parameter_overrides=[Parameter("role", value="both")])


def test_diagnostics_report_servo_health(graph: Graph, tmp_path: Path) -> None:
    with SimulatedArm("follower", link=tmp_path / "follower", faults=Faults(error_bits={3: 0x04})) as arm:
        driver = graph.driver("follower", arm, slow_period_s=0.2)
        probe = graph.add(Probe(graph.context, "follower"))
        port = str(arm.link)

        def faulted() -> bool:
            return any(lvl == 2 and "elbow_flex (servo 3): overheat" in msg for lvl, msg in probe.diag_levels(port))

        wait_for(faulted, 60, "ERROR naming the overheating servo")
        wait_for(lambda: "shoulder_pan.temperature_c" in driver.arm.health().values
                 and driver.arm.health().values["rate_hz"] > 0, 30, "the slow read and a rate")
        values = driver.arm.health().values
        assert values["elbow_flex.error_bits"] == "0x04 (overheat)"
        assert values["shoulder_pan.error_bits"] == "0x00"
        assert abs(values["shoulder_pan.temperature_c"] - arm.servos[1].get("Present_Temperature")) <= 1  # it warms
        assert values["gripper.voltage_v"] == arm.servos[6].get("Present_Voltage") / 10
        assert values["rate_hz"] > 0 and values["connected"] is True


def call_trigger(graph: Graph, service: str, timeout: float = 20.0) -> Trigger.Response:
    client = graph.add(Node(f"client_{len(graph.nodes)}", context=graph.context))
    cli = client.create_client(Trigger, service)
    assert cli.wait_for_service(timeout_sec=timeout), f"{service} not available"
    future = cli.call_async(Trigger.Request())
    wait_for(future.done, timeout, f"{service} response")
    return future.result()


def test_estop_answers_only_once_the_servos_took_it_and_stays_latched_across_a_replug(
        graph: Graph, tmp_path: Path) -> None:
    """Before: ~/estop answered success at once, also with the port unplugged, and nothing was
    latched; after the replug torque came back with the goal from before the e-stop."""
    with SimulatedArm("follower", link=tmp_path / "follower") as arm:
        driver = graph.driver("follower", arm, estop_cuts_torque=True)
        wait_for(lambda: driver.arm.state.connected and driver.arm.state.ticks > 20, 60, "the driver running")
        arm.faults.unplug_at, arm.faults.replug_after = arm._elapsed(), 3.0
        wait_for(lambda: not driver.arm.state.connected, 20, "the port gone")
        away = call_trigger(graph, "/follower_driver/estop")
        assert not away.success and "unavailable" in away.message and "latched" in away.message, away.message
        wait_for(lambda: driver.arm.state.reconnects >= 1, 30, "the replug")
        wait_for(lambda: not any(s.torque_on for s in arm.servos.values()), 5, "the latched e-stop's cut applied")
        time.sleep(0.5)
        assert not any(s.torque_on for s in arm.servos.values()), "torque came back after the replug"
        assert driver.arm.health().values["torque"] is False
        again = call_trigger(graph, "/follower_driver/estop")
        assert again.success and "torque off, read back" in again.message, again.message
        reset = call_trigger(graph, "/follower_driver/reset")
        assert reset.success
        wait_for(lambda: all(s.torque_on for s in arm.servos.values()), 10, "torque back after ~/reset")
