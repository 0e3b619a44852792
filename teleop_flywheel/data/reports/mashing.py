"""How hard the operators pressed: mashing measured per episode from the follower's load.

"Operators without force feedback produce demonstrations that mash; the policy learns to mash."
Per episode, from `observation.effort` (Present_Load, a signed fraction of the servo's max torque)
and, where the dataset has it, `complementary_info.feedback` (what the leader rendered):

- `grip_limit_s`: seconds the follower's gripper pressed at or above its force limit
  (`GRIP_LIMIT`). The arm driver's grasp guard holds a grasp below it, so a normal grasp touches it
  for a frame or two as contact begins; seconds of it are a hand squeezing through the guard (or a
  rig without one);
- `excess_peak`, `excess_integral`: the load beyond contact (`CONTACT_LOAD`, per joint) — its
  largest value on any joint, and its integral over the episode summed over the joints (load·s);
- `protection_near`, `protection_near_s`: how often (separate approaches) and how long some joint's
  load was within `NEAR_FRACTION` of the load that starts the servo's own overload protection
  (`OVERLOAD`, its Overload_Torque register as the driver writes it): a servo that trips drops its
  torque mid-task, and one held there heats;
- `felt_share`: of the frames in contact (some excess), the share during which the leader rendered
  something (a torque ceiling above 0 on some joint), i.e. the operator could feel the contact; None
  without `complementary_info.feedback`.

The converter stores each episode's measures in the episodes table (`TABLE_COLUMNS`), so
`manifest create --filter "grip_limit_s < 1"` chooses by them.

None of it for a dataset without `observation.effort` (recorded before efforts were): nothing to
measure, never zeros. Frames whose load is unknown (NaN) count as nothing. `curate` shows it as an
axis, `stats` per operator, the card per dataset.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from teleop_flywheel.core.so101 import GRIPPER, JOINT_NAMES
from teleop_flywheel.data.lerobot.dataset import EpisodeSpans, LeRobotDataset
from teleop_flywheel.data.lerobot.episode_table import EpisodeRecord
from teleop_flywheel.data.lerobot.flywheel_schema import FEEDBACK
from teleop_flywheel.data.reports.audit import EFFORT
from teleop_flywheel.hw.arm.config import ArmConfig
from teleop_flywheel.hw.arm.settings import GRIPPER_PROTECTION
from teleop_flywheel.hw.feetech.control_table import register

# The follower gripper's force limit: the load a close may press with (ArmConfig.grip_force_limit,
# the driver's grasp guard); at or above it the hand is pressing harder than the rig allows.
GRIP_LIMIT = ArmConfig().grip_force_limit
# Contact: the gripper's load that is a grasp (ArmConfig.feedback_grasp_load: the driver renders a
# grasp from it). Body joints: 0.5, above what free motion and gravity hold for more than a frame (gravity
# loads shoulder_lift to 0.22 with no tracking error; a reversal reaches the cap for ~13 ms, under one
# frame at 30 fps): more is the arm pressing on something.
GRIPPER_CONTACT_LOAD = ArmConfig().feedback_grasp_load
BODY_CONTACT_LOAD = 0.5
# The load that starts a servo's overload timer (Overload_Torque, %): the gripper's as the driver
# writes it (LeRobot's 25 %), the body joints' the factory value the driver leaves (80 %). After
# Protection_Time (2 s) above it the servo cuts its torque.
GRIPPER_OVERLOAD = GRIPPER_PROTECTION["Overload_Torque"] / 100
BODY_OVERLOAD = register("Overload_Torque").default / 100
# "Came near": within 10 % of that threshold — one squeeze more and the timer runs.
NEAR_FRACTION = 0.9


# Episodes-table columns (`table_columns`): each episode's own measures, written by `convert`.
TABLE_COLUMNS = ("grip_limit_s", "excess_load_peak", "excess_load_s", "protection_near", "contact_felt_share")


@dataclass
class EpisodeMashing:
    episode_index: int
    grip_limit_s: float
    excess_peak: float  # fraction of max torque
    excess_integral: float  # load·s, summed over the joints
    contact_s: float  # seconds with some joint beyond contact
    protection_near: int  # separate approaches to the overload threshold
    protection_near_s: float
    felt_share: float | None  # of the contact frames, those the leader rendered something in (None: not recorded)


def table_columns(m: EpisodeMashing) -> dict[str, float | int | None]:
    """The episode's measures as its episodes-table columns (TABLE_COLUMNS)."""
    return dict(zip(TABLE_COLUMNS, (m.grip_limit_s, m.excess_peak, m.excess_integral, m.protection_near,
                                    m.felt_share), strict=True))


def _per_joint(names: list[str], gripper: float, body: float) -> np.ndarray:
    return np.array([gripper if n.removesuffix(".effort") == GRIPPER else body for n in names])


def _runs(mask: np.ndarray) -> int:
    """How many separate runs of True frames."""
    return int(np.count_nonzero(np.diff(np.concatenate(([0], mask.astype(np.int8)))) == 1))


def episode_mashing(episode_index: int, effort: np.ndarray, names: list[str], fps: float,
                    feedback: np.ndarray | None = None) -> EpisodeMashing:
    """One episode's measures from its (n, joints) load and, where recorded, its (n, 12) feedback."""
    load = np.nan_to_num(np.abs(np.asarray(effort, dtype=np.float64)), nan=0.0)
    dt = 1.0 / fps
    excess = np.clip(load - _per_joint(names, GRIPPER_CONTACT_LOAD, BODY_CONTACT_LOAD), 0.0, None)
    contact: np.ndarray = np.any(excess > 0, axis=1)
    near: np.ndarray = np.any(load >= NEAR_FRACTION * _per_joint(names, GRIPPER_OVERLOAD, BODY_OVERLOAD), axis=1)
    grip = [j for j, n in enumerate(names) if n.removesuffix(".effort") == GRIPPER]
    felt = None
    if feedback is not None:
        rendered: np.ndarray = np.any(np.nan_to_num(np.asarray(feedback, dtype=np.float64)[:, len(JOINT_NAMES):]) > 0,
                                      axis=1)
        felt = float(rendered[contact].mean()) if contact.any() else 0.0
    return EpisodeMashing(
        episode_index,
        float(np.count_nonzero(load[:, grip[0]] >= GRIP_LIMIT) * dt) if grip else 0.0,
        float(excess.max()) if excess.size else 0.0, float(excess.sum() * dt), float(contact.sum() * dt),
        _runs(near), float(near.sum() * dt), felt)


def dataset_mashing(ds: LeRobotDataset, spans: EpisodeSpans) -> list[EpisodeMashing] | None:
    """Every episode's measures (in `spans`' order); None for a dataset without observation.effort."""
    if EFFORT not in ds.features or not ds.has_column(EFFORT):
        return None
    effort = spans.take(np.asarray(ds.column(EFFORT), dtype=np.float64))
    effort = effort.reshape(len(effort), -1)
    feedback = None
    if FEEDBACK in ds.features and ds.has_column(FEEDBACK):
        feedback = spans.take(np.asarray(ds.column(FEEDBACK), dtype=np.float64))
        feedback = feedback.reshape(len(feedback), -1)
    names = ds.joint_names(EFFORT)
    return [episode_mashing(int(e), effort[a:b], names, ds.fps, None if feedback is None else feedback[a:b])
            for e, a, b in zip(spans.episode_index, spans.start, spans.stop, strict=True)]


@dataclass
class MashingSummary:
    """A group of episodes (a dataset, an operator): how hard they pressed."""

    episodes: int
    seconds: float
    grip_limit_s: float  # total
    grip_limit_share: float  # of the group's time
    worst_episode: int  # most seconds at the grip limit
    worst_grip_limit_s: float
    excess_peak: float
    excess_integral_per_min: float  # load·s per minute recorded
    protection_near: int  # approaches, total
    episodes_near_protection: int
    felt_share: float | None  # of the contact time, felt through the leader (None: no feedback recorded)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def summarise(measures: list[EpisodeMashing], lengths: list[int], fps: float) -> MashingSummary:
    seconds = float(sum(lengths)) / fps
    worst = max(measures, key=lambda m: (m.grip_limit_s, -m.episode_index))
    contact = sum(m.contact_s for m in measures)
    felt = [m for m in measures if m.felt_share is not None]
    return MashingSummary(
        len(measures), seconds, sum(m.grip_limit_s for m in measures),
        sum(m.grip_limit_s for m in measures) / seconds if seconds else 0.0, worst.episode_index,
        worst.grip_limit_s, max(m.excess_peak for m in measures),
        sum(m.excess_integral for m in measures) / (seconds / 60) if seconds else 0.0,
        sum(m.protection_near for m in measures), sum(1 for m in measures if m.protection_near),
        None if not felt else (sum((m.felt_share or 0.0) * m.contact_s for m in felt) / contact if contact else 0.0))


def by_operator(measures: list[EpisodeMashing], records: list[EpisodeRecord], fps: float
                ) -> dict[str, MashingSummary]:
    """`summarise` per operator (episodes without one: "unknown"), `records` in `measures`' order."""
    groups: dict[str, list[tuple[EpisodeMashing, int]]] = defaultdict(list)
    for m, rec in zip(measures, records, strict=True):
        groups[rec.operator or "unknown"].append((m, rec.length))
    return {op: summarise([m for m, _ in g], [n for _, n in g], fps) for op, g in sorted(groups.items())}


def worst_episode(s: MashingSummary) -> str:
    return f"worst episode {s.worst_episode}: {s.worst_grip_limit_s:.1f} s" if s.worst_grip_limit_s else "none at it"


def thresholds_line() -> str:
    """The rule, as every report states it."""
    return (f"grip limit {GRIP_LIMIT:g} (follower gripper load, fraction of max torque); contact beyond "
            f"{GRIPPER_CONTACT_LOAD:g} (gripper) / {BODY_CONTACT_LOAD:g} (body joints); protection near at "
            f"{NEAR_FRACTION:g} x the overload threshold ({GRIPPER_OVERLOAD:g} gripper, {BODY_OVERLOAD:g} body)")


def summary_lines(s: MashingSummary, title: str = "mashing") -> list[str]:
    felt = "" if s.felt_share is None else f"; contact felt through the leader {100 * s.felt_share:.0f} % of the time"
    return [f"{title}: at the grip limit {s.grip_limit_s:.1f} s ({100 * s.grip_limit_share:.1f} % of "
            f"{s.seconds:.0f} s; {worst_episode(s)}), excess load peak "
            f"{s.excess_peak:.2f}, {s.excess_integral_per_min:.2f} load·s/min, protection came near "
            f"{s.protection_near} time(s) in {s.episodes_near_protection} of {s.episodes} episodes{felt}"]
