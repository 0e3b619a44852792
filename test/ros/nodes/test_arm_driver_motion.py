"""arm_driver nodes on simulated arms (real ptys, real rclpy): wrist_roll across its encoder's seam.

Calibrated as LeRobot calibrates a real SO-101, wrist_roll's range is the whole turn (0..4095), so
the seam lies inside it: a leader and a follower 1° apart on either side of it read a turn apart.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from rclpy.parameter import Parameter
from support.procs import wait_for

from ros.nodes.test_arm_driver_node import Graph
from teleop_flywheel.core.calibration import load_calibration, sim_calibration_file
from teleop_flywheel.core.so101 import STEPS_PER_TURN
from teleop_flywheel.hw.feetech.sim import Faults, SimulatedArm
from teleop_flywheel.ros.nodes.arm_driver import ArmDriverNode

pytestmark = pytest.mark.timeout(180)
WRIST = 5


def full_turn_calibration(role: str, tmp_path: Path) -> Path:
    """The shipped simulator calibration with wrist_roll's range the whole turn, as LeRobot's."""
    data = load_calibration(sim_calibration_file(role)).to_dict()
    data["joints"]["wrist_roll"].update(range_min=0, range_max=STEPS_PER_TURN - 1)
    path = tmp_path / f"{role}_full_turn.yaml"
    path.write_text(yaml.safe_dump(data))
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
