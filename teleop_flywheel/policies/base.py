"""The policy interface.

A policy maps the follower's state (radians, JOINT_NAMES order) at a monotonic time — plus the
latest image of each camera it names in `cameras` — to a joint command. How one is found by name:
`teleop_flywheel.policies.load_policy`.

`policy_args` is one string, `TARGET[,key=value...]`: a file, bag, dataset or checkpoint, then
options (`split_args`); each policy documents its own keys. A policy that speaks LeRobot units
(degrees, gripper 0–100) converts them through the follower's calibration: `follower_calibration`.
"""
from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Protocol

import numpy as np

from teleop_flywheel.core.calibration import ArmCalibration, load_calibration, sim_calibration_file

Images = Mapping[str, np.ndarray]
"""Camera name → the latest frame of `/cameras/<name>/image/compressed`, RGB uint8 (H, W, 3)."""
NO_IMAGES: Images = MappingProxyType({})


class Policy(Protocol):
    """What the policy node runs. Subclass it explicitly to inherit `drop_plan`'s default."""

    checkpoint_id: str

    @property
    def cameras(self) -> tuple[str, ...]:
        """Names of the cameras whose images `act` needs (empty: state only)."""

    def reset(self, state: Sequence[float] | None, t_ns: int) -> None:
        """Start an episode from `state` (None before the first follower sample)."""

    def act(self, state: Sequence[float] | None, t_ns: int, images: Images = NO_IMAGES) -> list[float] | None:
        """The joint command for time t (None = nothing to command yet)."""

    def drop_plan(self) -> None:
        """Authority came back after a human takeover: forget any plan made before it (an action
        chunk planned from a state the human has since changed must not resume). Default: none."""
        return None


CALIBRATION_FIX = ("add calibration=FILE to policy_args, naming the follower's own calibration (the file its arm "
                   "driver runs with; teleop-flywheel calibrate writes one)")


def follower_calibration(given: str, simulated: bool) -> ArmCalibration:
    """The calibration that converts the follower's radians to and from LeRobot units: `given`
    (policy_args' `calibration=FILE`, `~` expanded: a ROS parameter is not a shell word), else —
    only when the follower is a simulator — the simulator's (`config/calibration/follower_sim.yaml`).

    On a real follower a simulator's offsets and ranges put every joint at the wrong angle, so
    there the file must be named and a simulator's calibration (any file with its values) is
    refused, as the arm driver refuses one on a real port.
    """
    if not given:
        if simulated:
            return load_calibration(sim_calibration_file("follower"))
        raise ValueError("LeRobot units need the follower's calibration and the follower is not a simulator "
                         f"(simulated: false): {CALIBRATION_FIX}")
    calibration = load_calibration(Path(given).expanduser())  # CalibrationError names the file and the field
    if not simulated and any(calibration.joints == load_calibration(sim_calibration_file(role)).joints
                             for role in ("leader", "follower")):
        raise ValueError(f"{given}: a simulator's calibration, and the follower is not a simulator "
                         f"(simulated: false): {CALIBRATION_FIX}")
    return calibration


def split_args(args: str, keys: Collection[str]) -> tuple[str, dict[str, str]]:
    """`TARGET[,key=value...]` → (TARGET, options); an unknown or malformed option is a ValueError."""
    target, *rest = args.split(",")
    options: dict[str, str] = {}
    for item in rest:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or key not in keys:
            raise ValueError(f"policy_args {args!r}: option {item!r} is not one of "
                             f"{', '.join(f'{k}=...' for k in sorted(keys))}")
        options[key] = value.strip()
    return target.strip(), options
