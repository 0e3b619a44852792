"""`arm_driver`: one SO-101 arm on a Feetech bus ↔ ROS joint topics (radians, source stamps).

A thin node over `hw.arm.ArmDriver` (configure, tick, safety, torque, reconnect — no ROS): its
bus loop runs in this node's thread at `rate_hz` and every sample is published on
`<role>/joint_states`, stamped with the bus's arrival time less the wire time
(`Reading.stamp_ns`, CLOCK_MONOTONIC) converted to ROS time (`common.stamp`). The command
watchdog runs on the driver's own monotonic clock (when a command arrived), never on a header
stamp. `<role>/joint_command` sets the target (the shared `safety.CommandGuard`: limits, max step per tick, stale-command hold);
for a leader an EMPTY position list releases the torque at once. `/diagnostics` once a second:
connection, loop rate, bus and guard counters, voltage/temperature/fault bits per servo; a lost
port is ERROR naming it while the loop reconnects with backoff (and one line on the console).
`JointState.effort` is Present_Load as a signed fraction of the servo's maximum torque (−1..1).
Every parameter is read-only (a running arm's port, calibration and safety settings do not
change under it). On exit the bus thread stops first, then torque is released unless
`torque_on_exit`.

Safe by default on real hardware: a port is real unless the session that started its simulator
says `simulated: true`. A real port needs a calibration file of its own (refused at start with
how to make one), and a simulator's calibration (`config/calibration/*_sim.yaml`) is refused on
it; a calibration that differs from what the servos hold in EEPROM stops the node with the joint
and both values (`hw.arm.CalibrationMismatch`) — the driver never writes calibration to EEPROM.
"""
from __future__ import annotations

import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from diagnostic_msgs.msg import DiagnosticArray
from rclpy.node import Node
from sensor_msgs.msg import JointState

from teleop_flywheel.core.calibration import load_calibration, sim_calibration_file
from teleop_flywheel.core.clock import now_ns
from teleop_flywheel.core.safety import CommandGuard
from teleop_flywheel.core.so101 import BAUD_RATE, DEFAULT_LIMITS_RAD, JOINT_NAMES
from teleop_flywheel.core.topics import DIAGNOSTICS, arm_command, arm_state
from teleop_flywheel.hw.arm import ROLES, ArmDriver, Reading, effective_limits
from teleop_flywheel.hw.feetech.bus import FeetechBus
from teleop_flywheel.ros.nodes.common import (
    CONTROL_QOS,
    STREAM_QOS,
    diag_array,
    diag_status,
    joint_state,
    log_at,
    spin_node,
)
from teleop_flywheel.ros.params import NodeParameters, NodeParams, ParameterError, spec

_LIMIT = (-6.3, 6.3)  # any joint limit (rad) is within one turn either way


@dataclass
class ArmDriverParams(NodeParams):
    port: str = spec("/dev/so101_follower", "serial port of the arm's bus (a stable udev link)", required=True)
    role: str = spec("follower", "leader (human-moved, torque off) or follower (torque on)", choices=ROLES)
    rate_hz: float = spec(200.0, "bus loop rate (Hz): one sync read + one sync write per tick", range=(1.0, 2000.0))
    baudrate: int = spec(BAUD_RATE, "bus baud rate", range=(9600, 1_000_000))
    calibration_file: str = spec("", "calibration YAML (or LeRobot JSON) of this arm, made by teleop-flywheel calibrate")
    simulated: bool = spec(False, "the port is a simulator this session started (allows simulator calibrations)")
    max_step_rad: float = spec(0.05, "largest change of a joint's goal per tick (rad); 0 = off", range=(0.0, 1.0))
    watchdog_ms: float = spec(100.0, "hold position when no command for this long (ms); 0 = off",
                              range=(0.0, 10_000.0))
    torque_on_exit: bool = spec(False, "keep torque on when the node exits")
    joint_lower_limits: list[float] = spec([lo for lo, _ in DEFAULT_LIMITS_RAD.values()],
                                           "lower joint limits (rad), joint order of so101.JOINT_NAMES",
                                           range=_LIMIT, length=len(JOINT_NAMES))
    joint_upper_limits: list[float] = spec([hi for _, hi in DEFAULT_LIMITS_RAD.values()],
                                           "upper joint limits (rad), joint order of so101.JOINT_NAMES",
                                           range=_LIMIT, length=len(JOINT_NAMES))
    leader_torque_limit: int = spec(300, "Torque_Limit while the leader follows commands", range=(0, 1000))
    slow_period_s: float = spec(1.0, "period of voltage/temperature/status reads (s)", range=(0.05, 60.0))


class ArmDriverNode(Node):
    """One arm's bus loop, joint states, commands with safety, diagnostics (see module doc)."""

    def __init__(self, node_name: str = "arm_driver", **kwargs: Any) -> None:
        super().__init__(node_name, **kwargs)
        self.params = NodeParameters(self, ArmDriverParams)
        p = self.params.values
        self._check_calibration_choice(p)
        calibration = load_calibration(p.calibration_file)  # CalibrationError names the file and field
        try:
            limits = effective_limits(calibration, p.joint_lower_limits, p.joint_upper_limits)
        except ValueError as exc:
            raise ParameterError(self.get_fully_qualified_name(), "joint_lower_limits/joint_upper_limits",
                                 [p.joint_lower_limits, p.joint_upper_limits], str(exc)) from None
        guard = CommandGuard(JOINT_NAMES, limits, max_step=p.max_step_rad or None,
                             watchdog_ns=int(p.watchdog_ms * 1e6) or None)
        self.arm = ArmDriver(FeetechBus(p.port, p.baudrate), calibration, guard, p.role, p.leader_torque_limit,
                             p.slow_period_s, log=self._log)
        self._pub = self.create_publisher(JointState, arm_state(p.role), STREAM_QOS)
        self._diag = self.create_publisher(DiagnosticArray, DIAGNOSTICS, 10)
        self.create_subscription(JointState, arm_command(p.role), self._on_command, CONTROL_QOS)
        self.create_timer(1.0, self._publish_diagnostics)
        self._closed = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self.arm.run, args=(p.rate_hz, self._stop, self._publish),
                                        name=f"arm-driver-{p.role}", daemon=True)
        self._thread.start()

    @property
    def failure(self) -> str:
        """Why this node cannot go on (spin_node ends the process with it), else empty."""
        return self.arm.state.fatal

    def _check_calibration_choice(self, p: ArmDriverParams) -> None:
        node = self.get_fully_qualified_name()
        make_one = (f"make one with: teleop-flywheel calibrate --port {p.port} --arm {p.role} --out "
                    f"~/so101_{p.role}.yaml (docs/arm_driver.md)")
        if not p.calibration_file:
            raise ParameterError(node, "calibration_file", "", f"a calibration of this arm is required; {make_one}")
        sims = {sim_calibration_file(role).resolve() for role in ROLES}
        if not p.simulated and Path(p.calibration_file).expanduser().resolve() in sims:
            raise ParameterError(node, "calibration_file", p.calibration_file,
                                 f"a simulator's calibration is used only with simulators (simulated: true) and "
                                 f"{p.port} is a real port; {make_one}")

    def _log(self, level: str, message: str) -> None:
        log_at(self, level, message)

    def _publish(self, reading: Reading) -> None:
        """Bus thread: one sample out, stamped at the bus."""
        self._pub.publish(joint_state(JOINT_NAMES, reading.positions, reading.stamp_ns, reading.velocities,
                                      reading.efforts, frame_id=self.arm.calibration.arm_id))

    def _on_command(self, msg: JointState) -> None:
        if not msg.position:
            self.arm.release()  # empty = a leader lets go (a follower ignores it)
            return
        self.arm.command(msg.name, msg.position, now_ns())

    def _publish_diagnostics(self) -> None:
        health = self.arm.health(self.params.values.rate_hz)
        self.arm.acknowledge()
        self._diag.publish(diag_array([diag_status(f"{self.get_name()}: {self.arm.role} arm", health.level,
                                                   health.message, health.values, hardware_id=self.arm.port)]))

    def close(self) -> None:
        """Stop the bus thread (it publishes no more), then release torque unless torque_on_exit. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        self._thread.join(5.0)
        self.arm.close(self.params.values.torque_on_exit)


def main() -> int:
    return spin_node(ArmDriverNode, name="arm_driver")


if __name__ == "__main__":
    sys.exit(main())
