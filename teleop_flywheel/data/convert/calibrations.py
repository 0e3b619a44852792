"""Which calibration converts an episode: the one it recorded for each arm role, else one supplied.

Radians become LeRobot units through the arm's own calibration, so a wrong one silently shifts
every value. `EpisodeMeta.calibration_by_role()` reads what the episode recorded (role-keyed, or a
legacy file stem that names the role); a role still missing can be supplied
(`convert --calibration ROLE=FILE`); otherwise the episode is not converted and the error says so.
"""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from teleop_flywheel.core.calibration import ArmCalibration, load_calibration, parse_calibration
from teleop_flywheel.core.episode import CALIBRATION_ROLES
from teleop_flywheel.data.errors import MissingCalibrationError
from teleop_flywheel.recording.mcap.reader import Bag

CALIBRATION_MISSING = "CALIBRATION_MISSING"


def episode_calibrations(bag: Bag, supplied: Mapping[str, ArmCalibration]) -> dict[str, ArmCalibration]:
    """{role: calibration}: the episode's own by role, else the one supplied for that role."""
    recorded = bag.episode.calibration_by_role() if bag.episode else {}
    out: dict[str, ArmCalibration] = {}
    for role in CALIBRATION_ROLES:
        if role in recorded:
            out[role] = parse_calibration(recorded[role], f"{bag.mcap_path}: calibration {role}", default_arm_id=role)
        elif role in supplied:
            out[role] = supplied[role]
        else:
            keys = sorted(bag.episode.calibration) if bag.episode else []
            raise MissingCalibrationError(
                f"{bag.name}: no {role} calibration in the episode metadata (recorded keys: {keys or 'none'}); "
                f"give the {role} arm's file with --calibration {role}=FILE")
    return out


def joint_limits(cal: ArmCalibration) -> dict[str, list[float]]:
    """Each joint's calibrated range in LeRobot units, keyed by feature name."""
    return {f"{j.name}.pos": sorted(float(x) for x in j.rad_to_lerobot(np.array(j.rad_range()))) for j in cal.joints}


def union_limits(a: Mapping[str, list[float]], b: Mapping[str, list[float]]) -> dict[str, list[float]]:
    """Per joint the range covering both (a joint in one only keeps its range)."""
    return {k: [min(a[k][0], b[k][0]), max(a[k][1], b[k][1])] if k in a and k in b else list(a.get(k) or b[k])
            for k in {**a, **b}}


def load_supplied(files: Mapping[str, str | Path]) -> dict[str, ArmCalibration]:
    """{role: calibration file} → loaded calibrations; an unknown role or a bad file is an error."""
    out = {}
    for role, path in files.items():
        if role not in CALIBRATION_ROLES:
            raise ValueError(f"calibration role must be one of {', '.join(CALIBRATION_ROLES)}, got {role!r}")
        out[role] = load_calibration(path)
    return out


def role_files(items: list[str]) -> dict[str, str]:
    """`--calibration ROLE=FILE` arguments → {role: file}."""
    out: dict[str, str] = {}
    for item in items:
        role, sep, path = item.partition("=")
        if not sep or role not in CALIBRATION_ROLES or not path:
            raise ValueError(
                f"--calibration {item!r}: expected ROLE=FILE with ROLE one of {', '.join(CALIBRATION_ROLES)}"
            )
        if role in out:
            raise ValueError(f"--calibration {role}=… given twice")
        out[role] = path
    return out
