"""Datasets whose operators pressed differently, for the mashing measures and the reports showing them.

Synthetic sessions (slow sinusoids) with an object between the jaws (`SessionSpec(grip_object=...)`):
the follower's jaws stop on it while the command keeps closing, so the gripper's load builds to its
torque cap. `ana` mashes (cap 0.5: through the 0.2 grip limit, near the 0.25 overload threshold); `bo`
grasps gently (cap 0.15: a grasp, never the limit). Each recorded the leader's feedback (`gripper`).
"""
from __future__ import annotations

from pathlib import Path

from teleop_flywheel.data.convert import converter as conv
from teleop_flywheel.testing.synthetic_session import SessionSpec, write_session

GRASP = dict(duration_s=6.0, grip_object=0.3, width=256, height=192)
OPERATORS = (("ana", 0.5), ("bo", 0.15), ("bo", 0.15))  # (operator, gripper torque cap) per episode


def pressed(root: Path, feedback: str = "gripper", effort: bool = True) -> tuple[Path, list[Path]]:
    """(the dataset, its bags): episode k recorded by OPERATORS[k]."""
    bags = [write_session(root / "bags" / f"ep{k}", SessionSpec(seed=70 + k, operator=op, gripper_torque=cap,
                                                                 feedback=feedback, effort=effort, **GRASP)).bag
            for k, (op, cap) in enumerate(OPERATORS)]
    ds = root / "ds"
    res = conv.convert(bags, ds, codec="h264", workers=1, progress=False)
    assert sum(len(v) for v in res.converted.values()) == len(bags), res
    return ds, bags
