"""Our layout on top of LeRobot's: its version in info.json and the features each version renamed.

The one place that knows a feature's names across versions. info.json `teleop_flywheel_schema`
(an integer; LeRobot keeps info keys it does not know):

- 1 — datasets converted before the key existed (told by `observation.leader_state`): the leader
  arm's reading was an observation. LeRobot gives a policy every `observation.*` feature as an
  input (`dataset_to_policy_features`), and the leader's reading is nearly the action during
  teleoperation and absent at deployment: a policy trained on it learns to copy its input.
- 2 — it is `complementary_info.leader_state` (same dtype, shape, names and stats), which LeRobot
  loads with every frame and gives no policy.

Readers accept every version (`resolve`); the converter writes the current one and refuses to
append to an older one; `teleop-flywheel migrate` upgrades a dataset (`data/migrate.py`).
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from teleop_flywheel.core.so101 import JOINT_NAMES

SCHEMA_KEY = "teleop_flywheel_schema"
SCHEMA_VERSION = 2
LEADER_STATE = "complementary_info.leader_state"
# What the leader rendered as force feedback (`/leader/feedback`), float32 (12,): six goal offsets (rad)
# then six torque ceilings (fraction of max torque), joint order. Optional (bags recorded before it:
# no feature), so it needs no new version: a dataset without it reads as before.
FEEDBACK = "complementary_info.feedback"
FEEDBACK_NAMES = [f"{j}.offset_rad" for j in JOINT_NAMES] + [f"{j}.ceiling" for j in JOINT_NAMES]
# version -> {the name a feature had before that version: its name from then on}
RENAMED: dict[int, dict[str, str]] = {2: {"observation.leader_state": LEADER_STATE}}
CHANGES = {2: "the leader arm's reading moved from observation.leader_state (an input LeRobot gives every policy) "
              "to complementary_info.leader_state"}


def schema_version(info: Mapping[str, Any]) -> int | None:
    """The version of our layout a dataset's info.json says, 1 for ours from before the key, None
    for a dataset that is not ours (nothing tells)."""
    version = info.get(SCHEMA_KEY)
    if isinstance(version, int) and not isinstance(version, bool):
        return version
    features = info.get("features") or {}
    return 1 if any(old in features for old in RENAMED[2]) else None


def renames_since(version: int) -> dict[str, str]:
    """{name in `version`: current name} for every feature renamed after `version`."""
    out: dict[str, str] = {}
    for since, names in sorted(RENAMED.items()):
        if since > version:
            out = {old: names.get(now, now) for old, now in out.items()}
            out.update({old: now for old, now in names.items() if old not in out})
    return out


def pending_renames(info: Mapping[str, Any]) -> dict[str, str]:
    """{name: current name} that would bring the dataset of this info.json to the current layout
    (empty for a current dataset, or one that is not ours)."""
    version = schema_version(info)
    return renames_since(version) if version is not None and version < SCHEMA_VERSION else {}


def renamed_column(column: str, renames: Mapping[str, str]) -> str:
    """A data or episodes-table column after `renames`: a feature, or its `stats/<feature>/<stat>`."""
    kind, sep, rest = column.partition("/")
    if kind == "stats" and sep:
        feature, slash, stat = rest.rpartition("/")
        return f"stats/{renames.get(feature, feature)}{slash}{stat}"
    return renames.get(column, column)


def names_of(name: str) -> tuple[str, ...]:
    """Every name the feature `name` (in any version) has had, the current one first."""
    current = renames_since(0).get(name, name)
    return (current, *sorted(old for old, now in renames_since(0).items() if now == current))


def resolve(name: str, available: Iterable[str]) -> str | None:
    """The name under which the feature `name` (in any version) is among `available`, or None."""
    have = set(available)
    return next((n for n in (name, *names_of(name)) if n in have), None)


def changes_since(version: int) -> list[str]:
    """What changed after `version`, one entry per later version."""
    return [CHANGES[v] for v in sorted(CHANGES) if v > version]
