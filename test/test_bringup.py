"""Bring-up commands against the simulator, as a user runs them (real processes, real ptys)."""
from __future__ import annotations

import glob
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from teleop_flywheel.core.calibration import load_calibration
from teleop_flywheel.hw.feetech.bus import FeetechBus
from teleop_flywheel.hw.feetech.sim import SimulatedArm

CLI = [sys.executable, "-m", "teleop_flywheel.cli"]


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout)


def test_setup_motors_gives_a_factory_servo_its_joint_id(tmp_path: Path) -> None:
    link = tmp_path / "bench"
    with SimulatedArm("follower", factory_new=True, link=link) as arm:
        done = cli("setup-motors", "--port", str(link), "--arm", "follower", "--non-interactive", "--joint", "wrist_flex")
        assert done.returncode == 0, done.stderr
        assert "wrist_flex: servo id 1" in done.stdout and "-> id 4" in done.stdout
        with FeetechBus(str(link)) as bus:
            assert bus.scan() == [4] and bus.read_register(4, "Lock")[0] == 1
        assert arm.servos[1].get("ID") == 4


def test_setup_motors_refuses_more_than_one_servo(tmp_path: Path) -> None:
    link = tmp_path / "arm"
    with SimulatedArm("follower", link=link):
        done = cli("setup-motors", "--port", str(link), "--arm", "follower", "--non-interactive", "--joint", "gripper")
    assert done.returncode == 1
    assert "6 servos answer" in done.stderr and "connect exactly one servo" in done.stderr
    missing = cli("setup-motors", "--port", str(link), "--arm", "follower", "--non-interactive")
    assert missing.returncode == 2 and "--joint" in missing.stderr


def test_calibrate_records_ranges_and_writes_eeprom_yaml_and_lerobot_json(tmp_path: Path) -> None:
    link = tmp_path / "follower"
    out, lerobot = tmp_path / "my_follower.yaml", tmp_path / "my_follower.json"
    with SimulatedArm("follower", human=True, link=link) as arm:
        done = cli("calibrate", "--port", str(link), "--arm", "follower", "--out", str(out),
                   "--lerobot-json", str(lerobot), "--non-interactive", "4")
        assert done.returncode == 0, done.stderr
        cal = load_calibration(out)
        with FeetechBus(str(link)) as bus:
            for joint in cal.joints:
                assert bus.read_register(joint.id, "Homing_Offset")[0] == joint.homing_offset
                assert bus.read_register(joint.id, "Min_Position_Limit")[0] == joint.range_min
                assert bus.read_register(joint.id, "Max_Position_Limit")[0] == joint.range_max
                assert bus.read_register(joint.id, "Lock")[0] == 1
        assert arm.servos[1].get("Homing_Offset") == cal["shoulder_pan"].homing_offset
    assert cal.arm_id == "my_follower"
    assert cal["wrist_roll"].range_min == 0 and cal["wrist_roll"].range_max == 4095
    for joint in cal.joints:
        assert joint.range_max - joint.range_min > 300, joint  # the scripted human swept it
    doc = json.loads(lerobot.read_text())
    assert set(doc) == {j.name for j in cal.joints}
    assert load_calibration(lerobot).to_dict()["joints"] == cal.to_dict()["joints"]
    again = cli("calibrate", "--port", str(link), "--arm", "follower", "--out", str(out), "--non-interactive", "1")
    assert again.returncode == 2 and "never overwritten" in again.stderr
    assert yaml.safe_load(out.read_text())["arm_id"] == "my_follower"


def test_calibrate_names_a_joint_that_never_moved(tmp_path: Path) -> None:
    link = tmp_path / "follower"
    with SimulatedArm("follower", human=False, link=link):
        done = cli("calibrate", "--port", str(link), "--arm", "follower", "--out", str(tmp_path / "c.yaml"),
                   "--non-interactive", "0.5")
    assert done.returncode == 1 and "did not move" in done.stderr and "shoulder_pan" in done.stderr
    assert not (tmp_path / "c.yaml").exists()


def test_find_port_names_the_port_that_disappeared(tmp_path: Path) -> None:
    keep, arm_link = tmp_path / "other", tmp_path / "so101"
    with SimulatedArm("leader", link=keep):
        arm = SimulatedArm("follower", link=arm_link)
        arm.start()
        proc = subprocess.Popen([*CLI, "find-port", "--ports", str(tmp_path / "*"), "--after-seconds", "2"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert proc.stdout is not None and "ports now" in proc.stdout.readline()
        finally:
            arm.stop()  # the user unplugs the arm
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert f"the arm is on {arm_link}" in out


def test_find_cameras_lists_the_synthetic_camera_with_a_still(tmp_path: Path) -> None:
    done = cli("find-cameras", "--synthetic", "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert "640x480" in done.stdout and (tmp_path / "synthetic.png").stat().st_size > 1000


@pytest.mark.skipif(not glob.glob("/dev/video*"), reason="no V4L2 device on this machine (/dev/video*)")
def test_find_cameras_describes_v4l2_devices(tmp_path: Path) -> None:
    done = cli("find-cameras", "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert "/dev/video" in done.stdout and " fps" in done.stdout


def test_find_cameras_without_devices_says_so(tmp_path: Path) -> None:
    if glob.glob("/dev/video*"):
        pytest.skip("this machine has V4L2 devices")
    done = cli("find-cameras", "--out", str(tmp_path))
    assert done.returncode == 2 and "no V4L2 capture device" in done.stderr
    time.sleep(0)
