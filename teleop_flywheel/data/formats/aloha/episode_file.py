"""The ALOHA/ACT episode file: what ACT's loader and ALOHA's recorder read and write, and our units in it.

ACT (`tonyzhaozh/act` utils.py `EpisodicDataset`, `get_norm_stats`) opens
`<dir>/episode_<i>.hdf5` for i = 0..N-1 and reads the root attribute `sim`, `/action` (T, joints),
`/observations/qpos` and `/observations/qvel` (T, joints) and `/observations/images/<camera>`
(T, H, W, 3) uint8. ALOHA's recorder also writes `/observations/effort` and, with its JPEG
option, the root attribute `compress` = True, each camera as (T, padded) uint8 rows of JPEG bytes
(zero-padded to the longest frame; `cv2.imdecode` ignores the padding) and `/compress_len`
(cameras, T) with each frame's length (float32, as ALOHA writes it).

Units (ALOHA's convention): joint angles in radians, the gripper normalised to 0..1. Our LeRobot
datasets hold LeRobot's SO-101 units (degrees for the five body joints, 0..100 for the gripper).
A body joint's radians are exactly `math.radians` of its LeRobot degrees: LeRobot writes
drive_mode 0 for every SO-101 joint, and `core/calibration.py` maps degrees to radians through the
raw steps with that identity (its docstring). The gripper's 0..100 is already its calibrated range
normalised, so 0..1 is that over 100. Values are stored as float64, so the float32 LeRobot values
come back bit-identical on import. Joint order: `core/so101.JOINT_NAMES`, recorded in the root
attribute `joint_names`.
"""
from __future__ import annotations

import json
import re
from types import ModuleType

import numpy as np

from teleop_flywheel.core.errors import UsageError
from teleop_flywheel.core.so101 import GRIPPER, JOINT_NAMES

FORMAT = "hdf5-aloha"
EPISODE_FILE = "episode_{index}.hdf5"
EPISODE_NAME = re.compile(r"^episode_(\d+)\.hdf5$")
QPOS = "observations/qpos"
QVEL = "observations/qvel"
EFFORT = "observations/effort"
IMAGES = "observations/images"
ACTION = "action"
COMPRESS_LEN = "compress_len"
EXTRAS = "teleop_flywheel"  # our group: ACT's and ALOHA's readers never open it
FRAMES = f"{EXTRAS}/frames"  # per-frame columns beyond qpos/action/effort, as the dataset stores them
ABSENT = "absent"  # dataset attribute: True on a zeros array standing in for what the dataset has not
EFFORT_NAMES = [f"{j}.effort" for j in JOINT_NAMES]
GRIPPER_COLUMN = JOINT_NAMES.index(GRIPPER)
QPOS_UNITS = "radians (body joints), gripper normalised 0..1"
EFFORT_UNITS = "load as a signed fraction of max torque, -1..1 (Present_Load)"
ALOHA_FPS = 50  # ALOHA's control rate (ACT's DT = 0.02 s): the frame rate of a file that states none


def to_aloha(values: np.ndarray) -> np.ndarray:
    """(T, 6) LeRobot SO-101 units → ALOHA's: radians, gripper 0..1 (float64)."""
    out = np.deg2rad(np.asarray(values, dtype=np.float64))
    out[:, GRIPPER_COLUMN] = np.asarray(values, dtype=np.float64)[:, GRIPPER_COLUMN] / 100.0
    return out


def from_aloha(values: np.ndarray) -> np.ndarray:
    """(T, 6) ALOHA units → LeRobot SO-101 units (float32), the inverse of `to_aloha`."""
    v = np.asarray(values, dtype=np.float64)
    out = np.rad2deg(v)
    out[:, GRIPPER_COLUMN] = v[:, GRIPPER_COLUMN] * 100.0
    return out.astype(np.float32)


def json_attr(value: object) -> str:
    """A structured attribute as JSON text (HDF5 attributes hold strings, not dicts)."""
    return json.dumps(value, sort_keys=True)


def h5py_module(fmt: str = FORMAT) -> ModuleType:
    """h5py, imported only when an HDF5 command (of format `fmt`) runs: an optional extra."""
    try:
        import h5py  # noqa: PLC0415
    except ImportError:
        raise UsageError("h5py is not installed", where=fmt,
                         fix="pip install 'teleop_flywheel[hdf5]' (or pip install h5py)") from None
    return h5py
