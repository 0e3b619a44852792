"""The policy interface.

A policy maps the follower's state (radians, JOINT_NAMES order) at a monotonic time — plus the
latest image of each camera it names in `cameras` — to a joint command. How one is found by name:
`teleop_flywheel.policies.load_policy`.

`policy_args` is one string, `TARGET[,key=value...]`: a file, bag, dataset or checkpoint, then
options (`split_args`); each policy documents its own keys.
"""
from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from types import MappingProxyType
from typing import Protocol

import numpy as np

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
