"""The task spec's checks at the rig: the follower's pose against the start region and the success
predicate, live and at stop, beside the operator's flag (no ROS).

The recorder keeps the follower's last `/joint_states` messages (bytes); these functions take each
joint's newest position from them (an arm driver whose servos do not all answer publishes the
joints that did) and judge the pose with `core/task_spec.py`. At stop the predicate is judged on
the last follower states the episode recorded (`EpisodeMeta.outcome_check`: `passed`, `detail`,
and `operator_answer` when the rig asked about a flag the predicate disagrees with: `kept` or
`changed`). The validator recomputes its own verdict from the bag (`data/validate/task_checks.py`).
"""
from __future__ import annotations

from collections.abc import Sequence
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


def follower_pose(states: Sequence[bytes]) -> tuple[list[float] | None, str]:
    """(the follower's latest position of every joint, radians in `core.so101.JOINT_NAMES` order; or
    None and why) from its JointState CDR messages, oldest first. An arm driver whose servos do not
    all answer publishes the joints that did: each joint's position is its newest in `states`."""
    pose: dict[str, float] = {}
    for data in reversed(states):
        try:
            state = decode_joint_states([data])
        except CdrError:
            continue
        if state.position.size:
            for name, q in zip(state.names, state.position[0], strict=True):
                pose.setdefault(name, float(q))
        if all(name in pose for name in JOINT_NAMES):
            return [pose[name] for name in JOINT_NAMES], ""
    if not states:
        return None, "no follower state recorded"
    missing = [name for name in JOINT_NAMES if name not in pose]
    return None, f"no position of {', '.join(missing)} in the follower's last {len(states)} states"


def _judge(predicate: Any, states: Sequence[bytes]) -> tuple[bool, str]:
    pose, why = follower_pose(states)
    return (False, why) if pose is None else predicate.judge(pose)


def outcome_check(spec: TaskSpec | None, final_states: Sequence[bytes], answer: str = "") -> dict[str, Any]:
    """The success predicate on an episode's last follower states (and the operator's answer, if
    asked); empty without a predicate to judge."""
    if spec is None or spec.success is None:
        return {}
    passed, detail = _judge(spec.success, final_states)
    return {"passed": passed, "detail": detail, **({"operator_answer": answer} if answer else {})}


def live_checks(spec: TaskSpec | None, latest_states: Sequence[bytes], last: dict[str, Any]) -> dict[str, Any]:
    """What the console shows of the spec: name, id, instruction; the latest follower pose against
    the start region (`start`) and the success predicate (`success`), each None when there is no
    pose or no such part; `last`: the last stopped episode's check beside its flag. Empty without a spec."""
    if spec is None:
        return {}
    pose, _why = follower_pose(latest_states)
    out: dict[str, Any] = {"id": spec.id, "name": spec.name, "instruction": spec.instruction,
                           "start": None, "success": None, "last": last}
    if pose is not None and spec.start_region is not None:
        inside, detail = spec.start_region.judge(pose)
        out["start"] = {"inside": inside, "detail": detail}
    if pose is not None and spec.success is not None:
        passed, detail = spec.success.judge(pose)
        out["success"] = {"passed": passed, "detail": detail}
    return out
