"""arm_driver nodes on simulated arms (real ptys, real rclpy): wrist_roll across its encoder's
seam, and what a raised arm does when the node process is stopped.

Calibrated as LeRobot calibrates a real SO-101, wrist_roll's range is the whole turn (0..4095), so
the seam lies inside it: a leader and a follower 1° apart on either side of it read a turn apart.
"""
from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from rclpy.parameter import Parameter
from support.procs import node_cmd, wait_for

from ros.nodes.test_arm_driver_node import Graph, Probe
from ros.nodes.test_node_processes import start, stop_cleanly
from teleop_flywheel.core.calibration import (
    RAD_PER_STEP,
    load_calibration,
    sim_calibration_file,
    sim_full_turn_calibration,
)
from teleop_flywheel.core.so101 import STEPS_PER_TURN
from teleop_flywheel.hw.feetech.sim import Faults, SimulatedArm
from teleop_flywheel.ros.nodes.arm_driver import ArmDriverNode

pytestmark = pytest.mark.timeout(180)
WRIST = 5


def full_turn_calibration(role: str, tmp_path: Path) -> Path:
    path = tmp_path / f"{role}_full_turn.yaml"
    path.write_text(yaml.safe_dump(sim_full_turn_calibration(role)))
    return path


def driver(graph: Graph, role: str, arm: SimulatedArm, calibration: Path, remap: list[str] | None = None
           ) -> ArmDriverNode:
    params = {"port": str(arm.link), "role": role, "calibration_file": str(calibration), "simulated": True}
    cli = ["--ros-args"] + [a for r in (remap or []) for a in ("-r", r)] if remap else []
    node = ArmDriverNode(f"{role}_driver", context=graph.context, cli_args=cli,
                         parameter_overrides=[Parameter(k, value=v) for k, v in params.items()])
    graph.add(node)
    return node


class Seam:
    """How far (steps, around the circle) a servo's reading ever got from the seam, sampled every 5 ms."""

    def __init__(self, arm: SimulatedArm, sid: int) -> None:
        self.farthest = 0
        self._arm, self._sid, self._stop = arm, sid, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._arm._lock:
                present = self._arm.servos[self._sid].present_position()
            self.farthest = max(self.farthest, min(present, STEPS_PER_TURN - present))
            time.sleep(0.005)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(2)
        return self.farthest


@pytest.fixture
def graph() -> Iterator[Graph]:
    g = Graph()
    yield g
    g.close()


def test_the_follower_takes_the_short_way_across_the_seam_and_after_a_leader_reconnect(
        graph: Graph, tmp_path: Path) -> None:
    """Leader at 4090, follower at 5: 10 steps apart the short way, a turn apart as read. The
    follower used to turn 4085 steps the long way round (twisting the gripper's cable)."""
    leader_cal, follower_cal = full_turn_calibration("leader", tmp_path), full_turn_calibration("follower", tmp_path)
    with SimulatedArm("leader", link=tmp_path / "leader", calibration=load_calibration(leader_cal),
                      faults=Faults(place={WRIST: 4090})) as leader_arm, \
            SimulatedArm("follower", link=tmp_path / "follower", calibration=load_calibration(follower_cal),
                         faults=Faults(place={WRIST: 5})) as follower_arm:
        still = [2050.0, 2050.0, 1975.0, 2025.0, 4090.0, 2650.0]  # the leader's offsets are 0: shaft = reading
        leader_arm.set_human(lambda t: still)
        seam = Seam(follower_arm, WRIST)
        try:
            leader = driver(graph, "leader", leader_arm, leader_cal)
            follower = driver(graph, "follower", follower_arm, follower_cal,
                              remap=["/follower/joint_command:=/leader/joint_states"])
            wait_for(lambda: follower.arm.guard.stats.commands > 200, 60, "the follower following the leader")
            time.sleep(0.5)  # long enough for 1 rad at 2 rad/s: the long way would be well under way
            assert seam.farthest < 30, f"the follower's wrist went {seam.farthest} steps from the seam"
            # The leader's wrist turns 200 steps on, across the seam (its reading unwraps past π):
            # the follower comes along through the seam's short side, to where the leader reads 194.
            t0 = time.monotonic() - leader_arm.started
            leader_arm.set_human(lambda t: [*still[:4], 4090.0 + min(200.0, 400.0 * (t - t0)), still[5]])
            wait_for(lambda: 150 < follower_arm.servos[WRIST].present_position() < 250, 30,
                     "the follower's wrist following across the seam")
            # A leader reconnect unwraps afresh from its first reading: a turn less than before.
            leader_arm.faults.replug_after = 0.3
            leader_arm.faults.unplug_at = 0.0
            wait_for(lambda: leader.arm.state.reconnects >= 1, 30, "the leader back")
            back = follower.arm.guard.stats.commands
            wait_for(lambda: follower.arm.guard.stats.commands > back + 200, 60, "commands after the reconnect")
            time.sleep(0.5)
            assert 150 < follower_arm.servos[WRIST].present_position() < 250
        finally:
            farthest = seam.stop()
        assert farthest < 300, f"the follower's wrist went {farthest} steps from the seam: the long way"


class Shoulder:
    """shoulder_lift's shaft (steps), its torque and speed (rad/s), sampled every 2 ms."""

    def __init__(self, arm: SimulatedArm) -> None:
        self.samples: list[tuple[float, bool, float, float]] = []  # (monotonic s, torque on, shaft, rad/s)
        self._arm, self._stop = arm, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._arm._lock:
                s = self._arm.servos[2]
                self.samples.append((time.monotonic(), s.torque_on, s.position, abs(s.velocity) * RAD_PER_STEP))
            time.sleep(0.002)

    def stop(self) -> list[tuple[float, bool, float, float]]:
        self._stop.set()
        self._thread.join(2)
        return self.samples


@pytest.mark.parametrize("action,sig", [("park", signal.SIGINT), ("park", signal.SIGTERM), ("hold", signal.SIGINT)],
                         ids=["park-SIGINT", "park-SIGTERM", "hold-SIGINT"])
def test_a_raised_arm_is_parked_or_held_when_the_node_stops_never_dropped(
        graph: Graph, tmp_path: Path, action: str, sig: int) -> None:
    """SIGINT used to release torque at once: a raised shoulder_lift fell 1.5 rad to its stop. By
    default the node parks the arm where it was found limp, at the speed limit, then lets go; with
    `exit_action: hold` it leaves it holding. SIGTERM is also what the supervisor's death sends."""
    with SimulatedArm("follower", link=tmp_path / "follower") as arm:
        wait_for(lambda: arm.servos[2].position < 1500 and arm.servos[2].velocity == 0, 10,
                 "the limp shoulder come to rest (where gravity no longer beats friction)")
        rest = arm.servos[2].position
        probe = graph.add(Probe(graph.context, "follower"))
        proc = start(node_cmd("arm_driver", port=arm.link, role="follower", simulated="true", exit_action=action,
                              calibration_file=sim_calibration_file("follower"), watchdog_ms=200.0))
        shoulder: Shoulder | None = None
        try:
            wait_for(lambda: len(probe.states) > 20, 60, "joint states", proc)
            raised = probe.latest()["shoulder_lift"] + 1.5
            deadline = time.monotonic() + 30
            while arm.servos[2].position < rest + 1.4 / RAD_PER_STEP:  # raise it by 1.5 rad
                assert time.monotonic() < deadline, "the arm did not rise"
                probe.send({"shoulder_lift": raised})
                time.sleep(0.01)
            time.sleep(0.3)  # commands stopped: the watchdog holds it raised
            up = arm.servos[2].position
            shoulder = Shoulder(arm)
            stop_cleanly(proc, sig)
            time.sleep(0.5)
        finally:
            if proc.poll() is None:
                proc.kill()
            samples = shoulder.stop() if shoulder else []
        torque = [s.torque_on for s in arm.servos.values()]
        if action == "hold":
            assert all(torque) and abs(arm.servos[2].position - up) < 30, "held where it was"
            return
        limp_while_up = [p for _t, on, p, _v in samples if not on and p > rest + 0.15 / RAD_PER_STEP]
        assert not limp_while_up, f"torque off with the shoulder {max(limp_while_up) - rest:.0f} steps up: dropped"
        assert not any(torque), "torque released once parked"
        assert abs(arm.servos[2].position - rest) * RAD_PER_STEP < 0.11, "let go within 0.1 rad of where it was found"
        assert max(v for *_rest, v in samples) <= 2.0 * 1.05, "parked at the speed limit"
