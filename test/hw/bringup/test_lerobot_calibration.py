"""LeRobot's own SO-101 driver accepts a calibration made by `teleop-flywheel calibrate`.

Runs where LeRobot is installed (its separate venv: `pip install "lerobot[feetech]==0.4.4"` plus
this project); skipped elsewhere (LeRobot with torch is ~8 GB, too heavy for CI). The simulated
follower is calibrated with our command, then LeRobot's `SOFollower` connects to the same
simulated servos with the JSON we wrote and must find them calibrated (it compares the file with
the servos' EEPROM) without running its own calibration.
"""
from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

lerobot_so = pytest.importorskip("lerobot.robots.so_follower", reason="LeRobot is not installed here (separate venv)")

CLI = [sys.executable, "-m", "teleop_flywheel.cli"]


def test_lerobot_so101_follower_reads_our_calibration_as_calibrated(tmp_path: Path) -> None:
    link = tmp_path / "follower"
    sim = subprocess.Popen([*CLI, "sim-bus", "--arm", "follower", "--human", "--link", str(link)],
                           stdout=subprocess.PIPE, text=True)
    try:
        assert sim.stdout is not None and sim.stdout.readline().strip()
        calib_dir = tmp_path / "calibration"
        calib_dir.mkdir()
        done = subprocess.run([*CLI, "calibrate", "--port", str(link), "--arm", "follower",
                               "--out", str(tmp_path / "ours.yaml"), "--lerobot-json", str(calib_dir / "ours.json"),
                               "--non-interactive", "3"], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        config = lerobot_so.SO101FollowerConfig(port=str(link), id="ours", calibration_dir=calib_dir,
                                                use_degrees=True)
        robot = lerobot_so.SOFollower(config)
        robot.connect(calibrate=False)
        try:
            assert robot.is_calibrated, "LeRobot found the servos' EEPROM different from our calibration file"
            observation = robot.get_observation()
        finally:
            robot.disconnect()
        assert set(observation) == {f"{j}.pos" for j in ("shoulder_pan", "shoulder_lift", "elbow_flex",
                                                          "wrist_flex", "wrist_roll", "gripper")}
        assert all(math.isfinite(v) for v in observation.values())
        assert 0.0 <= observation["gripper.pos"] <= 100.0
        # The check fires: one limit off by a step and LeRobot no longer calls the arm calibrated.
        doc = json.loads((calib_dir / "ours.json").read_text())
        doc["gripper"]["range_max"] -= 1
        (calib_dir / "off_by_one.json").write_text(json.dumps(doc))
        other = lerobot_so.SOFollower(lerobot_so.SO101FollowerConfig(
            port=str(link), id="off_by_one", calibration_dir=calib_dir, use_degrees=True))
        other.bus.connect()
        try:
            assert not other.is_calibrated
        finally:
            other.bus.disconnect(disable_torque=False)
    finally:
        sim.terminate()
        sim.wait(10)
