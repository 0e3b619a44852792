"""Safe by default on a real SO-101: what a driver refuses, says and measures.

Node executables run as their own processes against simulated arms on real ptys; a port counts
as real unless the driver is told `simulated:=true`, exactly as with hardware.
"""
from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path

import pytest
import yaml
from support.procs import node_cmd

from teleop_flywheel.core.calibration import load_calibration, sim_calibration_file
from teleop_flywheel.core.safety import CommandGuard
from teleop_flywheel.core.so101 import JOINT_NAMES
from teleop_flywheel.hw.arm import ArmConfig, ArmDriver, effective_limits
from teleop_flywheel.hw.errors import CalibrationMismatch
from teleop_flywheel.hw.feetech.bus import FeetechBus
from teleop_flywheel.hw.feetech.sim import Faults, SimulatedArm, parse_fault

pytestmark = pytest.mark.timeout(180)


def one_line_failure(cmd: list[str], timeout: float = 120) -> str:
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    assert res.returncode == 1, (res.returncode, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
    return lines[0]


def driver(arm: SimulatedArm, cal_path: Path | str, role: str = "follower") -> ArmDriver:
    cal = load_calibration(cal_path)
    limits = effective_limits(cal, [-6.3] * 6, [6.3] * 6)
    return ArmDriver(
        FeetechBus(str(arm.link)), cal, CommandGuard(JOINT_NAMES, limits, max_speed=2.0), ArmConfig(role=role)
    )


def test_a_real_port_without_calibration_is_refused_with_how_to_make_one(tmp_path: Path) -> None:
    line = one_line_failure(node_cmd("arm_driver", port=tmp_path / "ttyACM0", role="follower"))
    assert "calibration_file" in line and "teleop-flywheel calibrate --port" in line


def test_a_simulator_calibration_is_refused_on_a_real_port(tmp_path: Path) -> None:
    line = one_line_failure(node_cmd("arm_driver", port=tmp_path / "ttyACM0", role="follower",
                                     calibration_file=sim_calibration_file("follower")))
    assert "used only with simulators" in line and "real port" in line


def test_the_scripted_policy_never_drives_a_real_follower_by_default() -> None:
    line = one_line_failure(node_cmd("policy", policy="scripted"))
    assert "hard-coded waypoints" in line and "scripted_on_real" in line


def test_eeprom_that_differs_from_the_calibration_stops_the_driver_naming_both_values(tmp_path: Path) -> None:
    other = yaml.safe_load(sim_calibration_file("follower").read_text())
    other["joints"]["elbow_flex"]["homing_offset"] = 77
    other_file = tmp_path / "other_follower.yaml"
    other_file.write_text(yaml.safe_dump(other))
    with SimulatedArm("follower", link=tmp_path / "follower") as arm:
        before = {sid: s.get("Homing_Offset") for sid, s in arm.servos.items()}
        line = one_line_failure(node_cmd("arm_driver", port=arm.link, role="follower", simulated="true",
                                         calibration_file=other_file))
        assert "elbow_flex (servo 3) Homing_Offset is 0 in the servo but 77 in" in line
        assert "teleop-flywheel calibrate" in line
        assert {sid: s.get("Homing_Offset") for sid, s in arm.servos.items()} == before  # EEPROM untouched
        d = driver(arm, other_file)
        d.bus.open()
        try:
            with pytest.raises(CalibrationMismatch, match="elbow_flex"):
                d.configure()
        finally:
            d.bus.close()


def test_a_port_that_cannot_be_opened_is_one_console_line_then_retries(tmp_path: Path) -> None:
    port = tmp_path / "so101_follower"
    proc = subprocess.Popen(node_cmd("arm_driver", port=port, role="follower", simulated="true",
                                     calibration_file=sim_calibration_file("follower")),
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        assert str(port) in line and "cannot open" in line and "retrying with backoff" in line, line
        time.sleep(1.0)
        assert proc.poll() is None  # still running, retrying
    finally:
        proc.send_signal(2)
        _out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0 and "Traceback" not in err
    assert err.count("cannot open") == 0  # the same reason is said once, not every retry


def test_the_driver_never_writes_calibration_at_start(tmp_path: Path) -> None:
    """Operating settings only: homing offsets and limits stay what calibrate wrote."""
    with SimulatedArm("follower", link=tmp_path / "follower") as arm:
        writes: list[tuple[int, int]] = []
        for servo in arm.servos.values():
            original = servo.write

            def spy(address: int, data: bytes, _orig=original, _sid=servo.id) -> None:
                writes.append((_sid, address))
                _orig(address, data)

            servo.write = spy  # type: ignore[method-assign]
        d = driver(arm, sim_calibration_file("follower"))
        assert d.connect()
        d.close()
    eeprom_identity = {3, 5, 6, 9, 10, 11, 12, 31, 32}  # model, ID, baud, limits, homing offset
    assert not [w for w in writes if w[1] in eeprom_identity], writes


def test_a_frozen_loop_is_not_reported_healthy(tmp_path: Path) -> None:
    """The old health said OK "at 200 Hz" (an average over past ticks) while no reading came."""
    with SimulatedArm("follower", link=tmp_path / "follower", faults=Faults(stall_at=1.0, stall_for=60)) as arm:
        d = driver(arm, sim_calibration_file("follower"))
        stop = threading.Event()
        runner = threading.Thread(target=d.run, args=(200.0, stop, lambda _r: None))
        runner.start()
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and d.health().level != "OK":
                time.sleep(0.05)
            assert d.health().level == "OK"
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and "no reading" not in d.health().message:
                time.sleep(0.05)
            health = d.health()
            assert health.level == "ERROR" and f"no reading from {arm.link}" in health.message, health
        finally:
            stop.set()
            runner.join(10)
            d.close()


def test_a_real_rollout_session_refuses_the_scripted_policy_unless_asked() -> None:
    from teleop_flywheel.ros.session.launch.graph import build_graph, config_from_arguments

    real = {"leader_calibration": "/cal/leader.yaml", "follower_calibration": "/cal/follower.yaml"}
    plain = build_graph("rollout", config_from_arguments(real)).node("policy").parameters
    assert plain["policy"] == "scripted" and "simulated" not in plain and "scripted_on_real" not in plain
    asked = build_graph("rollout", config_from_arguments({**real, "scripted_on_real": "true"}))
    assert asked.node("policy").parameters["scripted_on_real"] is True
    assert "simulated" not in build_graph("rollout", config_from_arguments(real)).node("follower_arm").parameters
    sim = build_graph("sim")
    assert sim.node("policy").parameters["simulated"] is True
    assert "--grip-object" in sim.sim_arms[1].command("python")
    # What the real session's policy node does with those parameters: refuses, one line.
    line = one_line_failure(node_cmd("policy", **{k: v for k, v in plain.items() if v != ""}))
    assert "hard-coded waypoints" in line and "scripted_on_real" in line


def test_malformed_ros_arguments_are_one_line_and_exit_2() -> None:
    res = subprocess.run(node_cmd("policy", checkpoint_id=""), capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert res.stderr.strip().splitlines()[-1].startswith("policy: cannot parse the ROS arguments")


def test_a_driver_that_cannot_go_on_ends_its_node_with_exit_1_and_says_why(tmp_path: Path) -> None:
    """A driver state that ends the bus loop (`state.fatal`: a dead bus thread, two servos at one
    id) is the node's failure: a last line naming the port and why, exit 1, never a node left
    spinning with no arm behind it. Shown with the duplicate id, the fault the simulator can inject from outside."""
    faults = Faults()
    parse_fault("duplicate:3", faults)
    with SimulatedArm("follower", link=tmp_path / "follower", faults=faults) as arm:
        res = subprocess.run(node_cmd("arm_driver", port=arm.link, role="follower", simulated="true",
                                      calibration_file=sim_calibration_file("follower")),
                             capture_output=True, text=True, timeout=120)
    assert res.returncode == 1 and "Traceback" not in res.stderr, (res.returncode, res.stderr)
    last = res.stderr.strip().splitlines()[-1]  # after the driver's INFO lines of its configure
    assert "two servos answer to id 3 (elbow_flex)" in last and str(arm.link) in last, last
