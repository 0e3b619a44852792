"""Policies the `policy` node runs, found by name: one registry for built-ins and plugins.

Every policy is an entry point of the group `teleop_flywheel.policies` (setup.py registers
`scripted`, `replay` and `lerobot`; a plugin package adds its own the same way) whose factory is
`factory(policy_args, checkpoint_id, *, simulated) -> Policy` (the protocol in `policies.base`);
`simulated` says whether the follower is a simulator the session started, which decides whether
a policy in LeRobot units may fall back to the simulator's calibration (`base.follower_calibration`).
It is imported only when asked for, so learned policies (and torch) cost nothing unless used.
"""
from __future__ import annotations

from importlib.metadata import entry_points

from teleop_flywheel.policies.base import Policy

ENTRY_POINT_GROUP = "teleop_flywheel.policies"


def load_policy(name: str, args: str, checkpoint_id: str, *, simulated: bool = False) -> Policy:
    """A policy by name from the `teleop_flywheel.policies` entry points (built-ins included), for
    a real follower unless `simulated`."""
    plugins = {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}
    if name not in plugins:
        known = ", ".join(sorted(plugins)) or "none (is teleop_flywheel installed?)"
        raise ValueError(f"unknown policy {name!r}; available: {known}")
    factory = plugins[name].load()
    policy: Policy = factory(args, checkpoint_id, simulated=simulated)
    return policy
