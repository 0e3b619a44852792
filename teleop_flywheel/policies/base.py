"""The policy interface and how a policy is chosen by name.

A policy maps the follower's state (radians, JOINT_NAMES order) at a monotonic time — plus the
latest image of each camera it names in `cameras` — to a joint command. Built-ins: `scripted`
(waypoints, what the simulator runs) and `replay` (the commands of a recorded episode). Anything
else is looked up in the entry-point group `teleop_flywheel.policies` and imported only then, so
learned policies (and torch) cost nothing unless asked for.

`policy_args` is one string, `TARGET[,key=value...]`: a file, bag, dataset or checkpoint, then
options (`split_args`); each policy documents its own keys.
"""
from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from importlib.metadata import entry_points
from types import MappingProxyType
from typing import Protocol

import numpy as np

ENTRY_POINT_GROUP = "teleop_flywheel.policies"

Images = Mapping[str, np.ndarray]
"""Camera name → the latest frame of `/cameras/<name>/image/compressed`, RGB uint8 (H, W, 3)."""
NO_IMAGES: Images = MappingProxyType({})


class Policy(Protocol):
    checkpoint_id: str

    @property
    def cameras(self) -> tuple[str, ...]:
        """Names of the cameras whose images `act` needs (empty: state only)."""

    def reset(self, state: Sequence[float] | None, t_ns: int) -> None:
        """Start an episode from `state` (None before the first follower sample)."""

    def act(self, state: Sequence[float] | None, t_ns: int, images: Images = NO_IMAGES) -> list[float] | None:
        """The joint command for time t (None = nothing to command yet)."""


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


def load_policy(name: str, args: str, checkpoint_id: str) -> Policy:
    """A policy by name: `scripted`, `replay`, or an installed plugin."""
    if name == "scripted":
        from teleop_flywheel.policies.scripted import ScriptedPolicy

        return ScriptedPolicy.from_args(args, checkpoint_id)
    if name == "replay":
        from teleop_flywheel.policies.replay import ReplayPolicy

        return ReplayPolicy.from_args(args, checkpoint_id)
    plugins = {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}
    if name not in plugins:
        known = ", ".join(["scripted", "replay", *sorted(plugins)])
        raise ValueError(f"unknown policy {name!r}; available: {known}")
    factory = plugins[name].load()
    return factory(args, checkpoint_id)
