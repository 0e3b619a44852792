"""The task spec's checks at the rig: the follower's pose against the start region and the success
predicate, live and at stop, beside the operator's flag (no ROS).

The recorder keeps the follower's latest `/joint_states` bytes; these functions decode one message
and judge it with `core/task_spec.py`. At stop the predicate is judged on the last follower state
the episode recorded (`EpisodeMeta.outcome_check`: `passed`, `detail`, and `operator_answer` when
the rig asked about a flag the predicate disagrees with: `kept` or `changed`).
"""
from __future__ import annotations

from typing import Any

from teleop_flywheel.core.so101 import JOINT_NAMES
from teleop_flywheel.core.task_spec import TaskSpec
from teleop_flywheel.recording.mcap.cdr import decode_joint_states
from teleop_flywheel.recording.mcap.exceptions import CdrError

# The operator's answer when the rig asked about a flag the spec's success predicate disagrees with:
# kept the flag, or changed it ("" = not asked).
OUTCOME_ANSWERS = ("", "kept", "changed")


def outcome_disagrees(outcome: str, passed: bool) -> bool:
    """The operator's flag and the spec's success predicate disagree (an unset flag disagrees with nothing)."""
    return (outcome == "success" and not passed) or (outcome == "failure" and passed)


def follower_pose(data: bytes | None) -> list[float] | None:
    """The follower's joint positions (radians, `core.so101.JOINT_NAMES` order) in one JointState's
    CDR bytes; None without a message, or when it lacks a joint or is undecodable."""
    if data is None:
        return None
    try:
        states = decode_joint_states([data])
    except CdrError:
        return None
    by_name = dict(zip(states.names, states.position[0], strict=False)) if states.position.size else {}
    if any(name not in by_name for name in JOINT_NAMES):
        return None
    return [float(by_name[name]) for name in JOINT_NAMES]


def outcome_check(spec: TaskSpec | None, final_state: bytes | None, answer: str = "") -> dict[str, Any]:
    """The success predicate on an episode's last follower state (and the operator's answer, if
    asked); empty without a predicate to judge."""
    if spec is None or spec.success is None:
        return {}
    passed, detail = spec.success.judge(follower_pose(final_state))
    return {"passed": passed, "detail": detail, **({"operator_answer": answer} if answer else {})}


def live_checks(spec: TaskSpec | None, latest_state: bytes | None, last: dict[str, Any]) -> dict[str, Any]:
    """What the console shows of the spec: name, id, instruction; the latest follower pose against
    the start region (`start`) and the success predicate (`success`), each None when there is no
    pose or no such part; `last`: the last stopped episode's check beside its flag. Empty without a spec."""
    if spec is None:
        return {}
    pose = follower_pose(latest_state)
    out: dict[str, Any] = {"id": spec.id, "name": spec.name, "instruction": spec.instruction,
                           "start": None, "success": None, "last": last}
    if pose is not None and spec.start_region is not None:
        inside, detail = spec.start_region.judge(pose)
        out["start"] = {"inside": inside, "detail": detail}
    if pose is not None and spec.success is not None:
        passed, detail = spec.success.judge(pose)
        out["success"] = {"passed": passed, "detail": detail}
    return out
