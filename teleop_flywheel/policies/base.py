"""The policy interface and how a policy is chosen by name.

A policy maps the follower's state (radians, JOINT_NAMES order) at a monotonic time to a
joint command. Built-ins: `scripted` (waypoints, what the simulator runs) and `replay`
(the commands of a recorded episode). Anything else is looked up in the entry-point group
`teleop_flywheel.policies` and imported only then, so learned policies (and torch) cost
nothing unless asked for.
"""
from __future__ import annotations

from collections.abc import Sequence
from importlib.metadata import entry_points
from typing import Protocol

ENTRY_POINT_GROUP = "teleop_flywheel.policies"


class Policy(Protocol):
    checkpoint_id: str

    def reset(self, state: Sequence[float] | None, t_ns: int) -> None:
        """Start an episode from `state` (None before the first follower sample)."""

    def act(self, state: Sequence[float] | None, t_ns: int) -> list[float] | None:
        """The joint command for time t (None = nothing to command yet)."""


def load_policy(name: str, args: str, checkpoint_id: str) -> Policy:
    """A policy by name: `scripted`, `replay`, or an installed plugin."""
    if name == "scripted":
        from teleop_flywheel.policies.scripted import ScriptedPolicy

        return ScriptedPolicy.from_args(args, checkpoint_id)
    if name == "replay":
        from teleop_flywheel.policies.replay import ReplayPolicy

        return ReplayPolicy.from_bag(args, checkpoint_id)
    plugins = {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}
    if name not in plugins:
        known = ", ".join(["scripted", "replay", *sorted(plugins)])
        raise ValueError(f"unknown policy {name!r}; available: {known}")
    factory = plugins[name].load()
    return factory(args, checkpoint_id)
