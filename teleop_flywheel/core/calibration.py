"""Per-arm calibration (LeRobot's SO-101 convention) and the unit conversions that use it.

Three units, one place (docs/CONTRACTS.md "Units"):

* raw steps — `Present_Position` / `Goal_Position` as the servo reports them, i.e. *after* the
  firmware subtracted `Homing_Offset` (the driver writes the offset at start).
* LeRobot units — exactly `FeetechMotorsBus._normalize/_unnormalize` of LeRobot 0.4.x with the
  SO-101 motor modes: body joints `MotorNormMode.DEGREES`:
  ``deg = (raw - mid) * 360 / 4095`` with ``mid = (range_min + range_max) / 2`` (no clamping,
  drive_mode ignored — as LeRobot does); the gripper `RANGE_0_100`:
  ``g = (clamp(raw, range_min, range_max) - range_min) / (range_max - range_min) * 100`` and
  ``100 - g`` when drive_mode is 1.
* radians (ROS topics, REP-103) — LeRobot's DEGREES rule in radians, for all six joints
  including the gripper, with drive_mode as the direction: ``rad = s * (raw - mid) * 2π / 4095``,
  ``s = -1 if drive_mode else +1``. With drive_mode 0 (what LeRobot's SO-101 calibration always
  writes) a body joint's radians are exactly ``math.radians`` of its LeRobot degrees.

Radians → raw rounds to the nearest step (LeRobot truncates with ``int()``; < 1 step apart) and
clamps into [range_min, range_max]. Radians ↔ LeRobot go through the *unrounded* raw value, so the
data engine's conversion is lossless.

File format (YAML; LeRobot's own calibration JSON, joint name → fields, is also accepted, with the
arm id taken from the file name):

    arm_id: follower_sim
    joints:
      shoulder_pan: {id: 1, drive_mode: 0, homing_offset: 0, range_min: 900, range_max: 3200}
      ...   # all six SO-101 joints
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from teleop_flywheel.core.errors import CalibrationError, yaml_problem
from teleop_flywheel.core.resources import config_path
from teleop_flywheel.core.so101 import GRIPPER, JOINT_IDS, JOINT_NAMES, MAX_RAW

FIELDS = ("id", "drive_mode", "homing_offset", "range_min", "range_max")
MAX_HOMING_OFFSET = 2047  # sign-magnitude with the sign in bit 11
RAD_PER_STEP = 2.0 * math.pi / MAX_RAW
DEG_PER_STEP = 360.0 / MAX_RAW

ArrayLike = float | Sequence[float] | np.ndarray


def _numeric(x: ArrayLike) -> Any:
    """A number as it is, anything else (a list, an array) as a float array."""
    return x if isinstance(x, (int, float)) else np.asarray(x, dtype=float)


def _clip(x: Any, lo: float, hi: float) -> Any:
    """`x` (a `_numeric`) within [lo, hi]: one number without numpy (~10x cheaper on a scalar: a
    leader feeling its follower maps every sample's gripper)."""
    return min(max(x, lo), hi) if isinstance(x, (int, float)) else np.clip(x, lo, hi)


@dataclass(frozen=True)
class JointCalibration:
    """One servo's calibration, in raw steps (LeRobot's `MotorCalibration` fields)."""

    name: str
    id: int
    drive_mode: int
    homing_offset: int
    range_min: int
    range_max: int

    @cached_property
    def mid(self) -> float:
        return (self.range_min + self.range_max) / 2.0

    @cached_property
    def sign(self) -> float:
        return -1.0 if self.drive_mode else 1.0

    # raw <-> radians (plain floats stay floats: the arm driver converts every joint every tick) ---
    def raw_to_rad(self, raw: ArrayLike) -> Any:
        return self.sign * (_numeric(raw) - self.mid) * RAD_PER_STEP

    def rad_to_raw_float(self, rad: ArrayLike) -> Any:
        return self.sign * _numeric(rad) / RAD_PER_STEP + self.mid

    def rad_to_raw(self, rad: float) -> int:
        """The Goal_Position for an angle: nearest step, clamped into the calibrated range."""
        raw = round(self.sign * float(rad) / RAD_PER_STEP + self.mid)  # rad_to_raw_float for one number
        return min(self.range_max, max(self.range_min, raw))

    # raw <-> LeRobot units ------------------------------------------------------------
    def raw_to_lerobot(self, raw: ArrayLike) -> Any:
        steps = _numeric(raw)
        if self.name != GRIPPER:
            return (steps - self.mid) * DEG_PER_STEP
        bounded = _clip(steps, self.range_min, self.range_max)
        norm = (bounded - self.range_min) / (self.range_max - self.range_min) * 100.0
        return 100.0 - norm if self.drive_mode else norm

    def lerobot_to_raw_float(self, value: ArrayLike) -> Any:
        units = _numeric(value)
        if self.name != GRIPPER:
            return units / DEG_PER_STEP + self.mid
        units = 100.0 - units if self.drive_mode else units
        return _clip(units, 0.0, 100.0) / 100.0 * (self.range_max - self.range_min) + self.range_min

    # radians <-> LeRobot units --------------------------------------------------------
    def rad_to_lerobot(self, rad: ArrayLike) -> Any:
        return self.raw_to_lerobot(self.rad_to_raw_float(rad))

    def lerobot_to_rad(self, value: ArrayLike) -> Any:
        return self.raw_to_rad(self.lerobot_to_raw_float(value))

    def rad_range(self) -> tuple[float, float]:
        """The calibrated range in radians (lower, upper)."""
        a, b = float(self.raw_to_rad(self.range_min)), float(self.raw_to_rad(self.range_max))
        return (min(a, b), max(a, b))


@dataclass(frozen=True)
class ArmCalibration:
    """All six joints of one arm, in `so101.JOINT_NAMES` order."""

    arm_id: str
    joints: tuple[JointCalibration, ...]
    source: str = ""

    def __getitem__(self, name: str) -> JointCalibration:
        for joint in self.joints:
            if joint.name == name:
                return joint
        raise KeyError(f"calibration {self.arm_id!r} has no joint {name!r}")

    @property
    def names(self) -> list[str]:
        return [j.name for j in self.joints]

    @property
    def ids(self) -> list[int]:
        return [j.id for j in self.joints]

    def raw_to_rad(self, raws: Sequence[float]) -> list[float]:
        return [float(j.raw_to_rad(float(r))) for j, r in zip(self.joints, raws, strict=True)]

    def rad_to_raw(self, rads: Sequence[float]) -> list[int]:
        return [j.rad_to_raw(r) for j, r in zip(self.joints, rads, strict=True)]

    def rad_to_lerobot(self, rads: np.ndarray | Sequence[Sequence[float]] | Sequence[float]) -> np.ndarray:
        """Radians → LeRobot units; last axis is the six joints (works on (T, 6) arrays)."""
        arr = np.asarray(rads, dtype=float)
        return np.stack([j.rad_to_lerobot(arr[..., i]) for i, j in enumerate(self.joints)], axis=-1)

    def lerobot_to_rad(self, values: np.ndarray | Sequence[Sequence[float]] | Sequence[float]) -> np.ndarray:
        arr = np.asarray(values, dtype=float)
        return np.stack([j.lerobot_to_rad(arr[..., i]) for i, j in enumerate(self.joints)], axis=-1)

    def rad_limits(self) -> dict[str, tuple[float, float]]:
        return {j.name: j.rad_range() for j in self.joints}

    def to_dict(self) -> dict[str, Any]:
        return {
            "arm_id": self.arm_id,
            "joints": {j.name: {f: getattr(j, f) for f in FIELDS} for j in self.joints},
        }

    def to_lerobot_json(self) -> dict[str, dict[str, int]]:
        """LeRobot's calibration file content (`~/.cache/huggingface/lerobot/calibration/...json`)."""
        return {j.name: {f: getattr(j, f) for f in FIELDS} for j in self.joints}

    def save(self, path: str | Path) -> None:
        Path(path).write_text(yaml.safe_dump(self.to_dict(), sort_keys=False))


def _int_field(where: str, entry: Mapping[str, Any], field: str) -> int:
    if field not in entry:
        raise CalibrationError(f"{where}.{field}: missing")
    value = entry[field]
    if isinstance(value, bool) or not isinstance(value, int):
        raise CalibrationError(f"{where}.{field}: expected an integer, got {value!r}")
    return value


def parse_calibration(data: Any, source: str = "<calibration>", default_arm_id: str = "") -> ArmCalibration:
    """Validate a loaded calibration document; errors name `source` and the field path."""
    if not isinstance(data, Mapping):
        raise CalibrationError(f"{source}: expected a mapping with arm_id and joints, got {type(data).__name__}")
    if "joints" in data:
        joints_doc, arm_id = data["joints"], data.get("arm_id", default_arm_id)
        prefix = "joints"
    else:  # LeRobot's JSON: joint name -> fields at top level
        joints_doc, arm_id, prefix = data, default_arm_id, ""
    if not isinstance(arm_id, str) or not arm_id:
        raise CalibrationError(f"{source}: arm_id: missing or not a non-empty string")
    if not isinstance(joints_doc, Mapping):
        raise CalibrationError(f"{source}: joints: expected a mapping of joint name -> fields")
    unknown = sorted(set(map(str, joints_doc)) - set(JOINT_NAMES))
    if unknown:
        raise CalibrationError(f"{source}: {prefix or 'top level'}: unknown joint(s) {unknown}")
    joints = []
    for name in JOINT_NAMES:
        where = f"{source}: {prefix + '.' if prefix else ''}{name}"
        entry = joints_doc.get(name)
        if not isinstance(entry, Mapping):
            raise CalibrationError(f"{where}: missing (every SO-101 joint needs {', '.join(FIELDS)})")
        values = {f: _int_field(where, entry, f) for f in FIELDS}
        if values["id"] != JOINT_IDS[name]:
            raise CalibrationError(f"{where}.id: {values['id']} but the SO-101 {name} is servo {JOINT_IDS[name]}")
        if values["drive_mode"] not in (0, 1):
            raise CalibrationError(f"{where}.drive_mode: must be 0 or 1, got {values['drive_mode']}")
        if abs(values["homing_offset"]) > MAX_HOMING_OFFSET:
            raise CalibrationError(
                f"{where}.homing_offset: {values['homing_offset']} outside ±{MAX_HOMING_OFFSET} (11-bit sign-magnitude)"
            )
        for f in ("range_min", "range_max"):
            if not 0 <= values[f] <= MAX_RAW:
                raise CalibrationError(f"{where}.{f}: {values[f]} outside 0..{MAX_RAW}")
        if values["range_min"] >= values["range_max"]:
            raise CalibrationError(
                f"{where}.range_min: {values['range_min']} must be below range_max {values['range_max']}")
        joints.append(JointCalibration(name=name, **values))
    return ArmCalibration(arm_id=arm_id, joints=tuple(joints), source=source)


def load_calibration(path: str | Path) -> ArmCalibration:
    """Read and validate a calibration file (YAML, or LeRobot's JSON)."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise CalibrationError(f"{path}: cannot read calibration file ({exc.strerror or exc})") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise CalibrationError(f"{path}: not valid YAML/JSON ({yaml_problem(exc)})") from exc
    return parse_calibration(data, str(path), default_arm_id=path.stem)


def sim_calibration_file(role: str) -> Path:
    """The shipped calibration matching the simulated arm of `role` (leader|follower)."""
    return config_path(f"calibration/{role}_sim.yaml")


def sim_full_turn_calibration(role: str) -> dict[str, Any]:
    """The simulated arm's calibration (as a YAML document) with wrist_roll's range the whole turn,
    as LeRobot calibrates a wrist that turns freely: what the encoder-seam tests and bench drive."""
    data = load_calibration(sim_calibration_file(role)).to_dict()
    data["joints"]["wrist_roll"].update(range_min=0, range_max=MAX_RAW)
    return data


@dataclass(frozen=True)
class ArmPair:
    """Leader ↔ follower positions (radians): the body joints are the same angle on both arms (each
    is 0 at its calibrated middle); the gripper is the same *fraction* of each arm's calibrated range
    (LeRobot's 0–100), so a leader whose trigger travels less than the follower's jaws still opens and
    closes them fully. Without both calibrations every joint passes through unchanged."""

    leader: ArmCalibration | None = None
    follower: ArmCalibration | None = None

    def to_follower(self, positions: Sequence[float]) -> list[float]:
        return self._map(positions, self.leader, self.follower)

    def to_leader(self, positions: Sequence[float]) -> list[float]:
        return self._map(positions, self.follower, self.leader)

    @staticmethod
    def _map(positions: Sequence[float], src: ArmCalibration | None, dst: ArmCalibration | None) -> list[float]:
        out = [float(p) for p in positions]
        if src is not None and dst is not None:
            i = JOINT_NAMES.index(GRIPPER)
            out[i] = float(dst[GRIPPER].lerobot_to_rad(src[GRIPPER].rad_to_lerobot(out[i])))
        return out
