"""Calibration: LeRobot 0.4.x normalisation values, round trips, and errors naming file + field."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml
from support.paths import ROOT

from teleop_flywheel.core.calibration import load_calibration, parse_calibration, sim_calibration_file
from teleop_flywheel.core.errors import CalibrationError
from teleop_flywheel.core.so101 import JOINT_NAMES

CONFIG = ROOT / "config" / "calibration"


def _doc(**overrides: object) -> dict:
    joints = {n: {"id": i + 1, "drive_mode": 0, "homing_offset": 0, "range_min": 1000, "range_max": 3000}
              for i, n in enumerate(JOINT_NAMES)}
    doc = {"arm_id": "t", "joints": joints}
    for path, value in overrides.items():
        joint, field = path.split("__")
        joints[joint][field] = value
    return doc


def test_lerobot_degrees_and_gripper_values() -> None:
    cal = parse_calibration(_doc(gripper__range_min=2000, gripper__range_max=3000))
    pan = cal["shoulder_pan"]
    # LeRobot DEGREES: (raw - mid) * 360 / 4095, mid = 2000; not clamped to the range
    assert float(pan.raw_to_lerobot(2000)) == 0.0
    assert float(pan.raw_to_lerobot(3000)) == pytest.approx(1000 * 360 / 4095)
    assert float(pan.raw_to_lerobot(4000)) == pytest.approx(2000 * 360 / 4095)
    # radians = the same rule: degrees converted
    assert float(pan.raw_to_rad(3000)) == pytest.approx(math.radians(1000 * 360 / 4095))
    grip = cal["gripper"]
    assert float(grip.raw_to_lerobot(2000)) == 0.0
    assert float(grip.raw_to_lerobot(2250)) == pytest.approx(25.0)
    assert float(grip.raw_to_lerobot(3500)) == 100.0  # RANGE_0_100 clamps
    flipped = parse_calibration(_doc(gripper__drive_mode=1, shoulder_pan__drive_mode=1,
                                     gripper__range_min=2000, gripper__range_max=3000))
    assert float(flipped["gripper"].raw_to_lerobot(2250)) == pytest.approx(75.0)
    # DEGREES ignores drive_mode in LeRobot; our radians carry it as the direction
    assert float(flipped["shoulder_pan"].raw_to_lerobot(3000)) == pytest.approx(1000 * 360 / 4095)
    assert float(flipped["shoulder_pan"].raw_to_rad(3000)) < 0
    assert float(flipped["shoulder_pan"].rad_to_lerobot(flipped["shoulder_pan"].raw_to_rad(3000))) == \
        pytest.approx(1000 * 360 / 4095)


def test_round_trips() -> None:
    for dm in (0, 1):
        cal = parse_calibration(_doc(shoulder_lift__drive_mode=dm, gripper__drive_mode=dm))
        raws = [1000, 1500, 2345, 2999, 3000, 1001]
        assert cal.rad_to_raw(cal.raw_to_rad(raws)) == raws
        rads = np.random.default_rng(dm).uniform(-0.7, 0.7, size=(50, 6))
        assert np.allclose(cal.lerobot_to_rad(cal.rad_to_lerobot(rads)), rads)
    # goal clamped into the calibrated range
    assert cal["shoulder_pan"].rad_to_raw(10.0) == 3000


def test_one_number_maps_as_an_array_of_them_does() -> None:
    """A leader feeling its follower maps one gripper angle per sample without numpy: the same
    values as the array path, clamps and drive modes included."""
    for dm in (0, 1):
        grip = parse_calibration(_doc(gripper__drive_mode=dm, gripper__range_min=2000, gripper__range_max=3000))
        grip_joint = grip["gripper"]
        raws = [1500.0, 2000.0, 2250.5, 2999.0, 3500.0]
        values = [-10.0, 0.0, 37.5, 100.0, 120.0]
        assert [grip_joint.raw_to_lerobot(r) for r in raws] == pytest.approx(list(grip_joint.raw_to_lerobot(raws)))
        assert ([grip_joint.lerobot_to_raw_float(v) for v in values]
                == pytest.approx(list(grip_joint.lerobot_to_raw_float(values))))


def test_shipped_files_load_and_lerobot_json_accepted(tmp_path: Path) -> None:
    for role in ("leader", "follower"):
        assert load_calibration(sim_calibration_file(role)).arm_id == f"{role}_sim"
    real = load_calibration(CONFIG / "example_real_follower.yaml")
    path = tmp_path / "my_arm.json"
    path.write_text(json.dumps(real.to_lerobot_json()))
    again = load_calibration(path)
    assert again.arm_id == "my_arm" and again.joints == real.joints


@pytest.mark.parametrize("override, match", [
    ({"gripper__range_min": 3000}, r"gripper\.range_min: 3000 must be below range_max"),
    ({"elbow_flex__id": 7}, r"elbow_flex\.id: 7 but the SO-101 elbow_flex is servo 3"),
    ({"wrist_roll__homing_offset": 3000}, r"wrist_roll\.homing_offset"),
    ({"wrist_flex__drive_mode": 2}, r"wrist_flex\.drive_mode"),
    ({"shoulder_pan__range_max": 5000}, r"shoulder_pan\.range_max: 5000 outside"),
    ({"shoulder_pan__range_max": "x"}, r"shoulder_pan\.range_max: expected an integer"),
])
def test_bad_fields_named(tmp_path: Path, override: dict, match: str) -> None:
    path = tmp_path / "arm.yaml"
    path.write_text(yaml.safe_dump(_doc(**override)))
    with pytest.raises(CalibrationError, match=str(path).replace(".", r"\.") + ".*" + match):
        load_calibration(path)


def test_missing_file_and_field(tmp_path: Path) -> None:
    with pytest.raises(CalibrationError, match="nope.yaml: cannot read"):
        load_calibration(tmp_path / "nope.yaml")
    doc = _doc()
    del doc["joints"]["gripper"]["range_max"]
    path = tmp_path / "a.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(CalibrationError, match=r"a\.yaml: joints\.gripper\.range_max: missing"):
        load_calibration(path)
    del doc["joints"]["gripper"]
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(CalibrationError, match=r"joints\.gripper: missing"):
        load_calibration(path)
    path.write_text("joints: [1, 2")
    with pytest.raises(CalibrationError, match="not valid YAML"):
        load_calibration(path)
