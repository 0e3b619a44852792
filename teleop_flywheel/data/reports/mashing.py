"""How hard the operators pressed: mashing measured per episode from the follower's load.

"Operators without force feedback produce demonstrations that mash; the policy learns to mash."
Per episode, from `observation.effort` (Present_Load, a signed fraction of the servo's max torque)
and, where the dataset has it, `complementary_info.feedback` (what the leader rendered):

- `grip_limit_s`: seconds the follower's gripper pressed at or above its force limit
  (`GRIP_LIMIT`). The arm driver's grasp guard holds a grasp below it, so a normal grasp touches it
  for a frame or two as contact begins; seconds of it are a hand squeezing through the guard (or a
  rig without one);
- `excess_peak`, `excess_integral`: the load beyond contact — its largest value on any joint, and
  its integral over the episode summed over the joints (load·s). Contact is the gripper's load
  beyond a grasp's, or a body joint's load beyond what free motion and gravity hold *while its shaft
  is stalled* (`observation.state` barely moving: the driver's own collision rule, `hw/arm/settings.py`
  COLLISION) — a joint reversing at speed reaches full load too, but never stands still there;
- `protection_near`, `protection_near_s`: how often and how long some joint's load stayed within
  `NEAR_FRACTION` of the load that starts the servo's own overload timer (its Overload_Torque
  register as the driver writes it) for at least `NEAR_TIME_S`, a quarter of the time that trips it:
  a servo that trips drops its torque mid-task, and one held there heats;
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

import math
from collections import defaultdict
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from teleop_flywheel.core.so101 import GRIPPER, JOINT_NAMES
from teleop_flywheel.data.lerobot.dataset import LeRobotDataset
from teleop_flywheel.data.lerobot.episode_table import EpisodeRecord
from teleop_flywheel.data.lerobot.flywheel_schema import FEEDBACK
from teleop_flywheel.data.reports.audit import EFFORT, Loaded
from teleop_flywheel.hw.arm.config import ArmConfig
from teleop_flywheel.hw.arm.settings import COLLISION, GRIPPER_PROTECTION, Collision
from teleop_flywheel.hw.feetech.control_table import register

# The follower gripper's force limit: the load a close may press with (ArmConfig.grip_force_limit,
# the driver's grasp guard); at or above it the hand is pressing harder than the rig allows.
GRIP_LIMIT = ArmConfig().grip_force_limit
# Contact: the gripper's load that is a grasp (ArmConfig.feedback_grasp_load: the driver renders a
# grasp from it). Body joints: 0.5 with the shaft stalled — gravity holds shoulder_lift at 0.22 with no
# tracking error, and free motion passes full load only while moving (a reversal spends ~13 ms below
# the stall speed, under a frame at 30 fps): load there is the arm pressing on something.
GRIPPER_CONTACT_LOAD = ArmConfig().feedback_grasp_load
BODY_CONTACT_LOAD = 0.5
# A body joint's shaft is stalled below the driver's collision stall speed (rad/s; the dataset's body
# joints are in degrees).
STALL_DEG_S = {joint: math.degrees(c.stall_rad_s) for joint, c in COLLISION.items()}
DEFAULT_STALL_DEG_S = math.degrees(Collision(0.0, 0.0).stall_rad_s)
# The load that starts a servo's overload timer (Overload_Torque, %): the gripper's as the driver
# writes it (LeRobot's 25 %), the body joints' the factory value the driver leaves (80 %). After
# Protection_Time (2 s) above it the servo cuts its torque.
GRIPPER_OVERLOAD = GRIPPER_PROTECTION["Overload_Torque"] / 100
BODY_OVERLOAD = register("Overload_Torque").default / 100
# "Came near": within 10 % of that threshold — one squeeze more and the timer runs — for a quarter of
# the time that trips it (Protection_Time, 10 ms units: 2 s; the driver leaves the factory value):
# a joint passing through high load in free motion does not count, a hand leaning on it does.
NEAR_FRACTION = 0.9
NEAR_TIME_S = 0.25 * register("Protection_Time").default * 0.01


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


def _long_runs(mask: np.ndarray, frames: int) -> tuple[int, int]:
    """(how many runs of True frames last at least `frames`, how many frames they hold)."""
    edges = np.diff(np.concatenate(([0], mask.astype(np.int8), [0])))
    lengths = np.flatnonzero(edges == -1) - np.flatnonzero(edges == 1)
    long = lengths[lengths >= frames]
    return len(long), int(long.sum())


def _stalled(state: np.ndarray, names: list[str], fps: float) -> np.ndarray:
    """Per frame and joint: the shaft below its stall speed (always for the gripper, whose grasp is a
    stall by definition; an unknown speed counts as stalled)."""
    state = np.asarray(state, dtype=np.float64)
    speed = np.abs(np.gradient(state, axis=0)) * fps if len(state) >= 2 else np.zeros_like(state)
    limit = np.array([math.inf if n.removesuffix(".effort") == GRIPPER
                      else STALL_DEG_S.get(n.removesuffix(".effort"), DEFAULT_STALL_DEG_S) for n in names])
    return ~(speed >= limit)


def episode_mashing(episode_index: int, effort: np.ndarray, names: list[str], fps: float,
                    feedback: np.ndarray | None = None, state: np.ndarray | None = None) -> EpisodeMashing:
    """One episode's measures from its (n, joints) load and, where recorded, its (n, 12) feedback;
    `state` (LeRobot units, the same joints): body contact only where the shaft stalled (None: load alone)."""
    load = np.nan_to_num(np.abs(np.asarray(effort, dtype=np.float64)), nan=0.0)
    dt = 1.0 / fps
    excess = np.clip(load - _per_joint(names, GRIPPER_CONTACT_LOAD, BODY_CONTACT_LOAD), 0.0, None)
    if state is not None and np.shape(state) == load.shape:
        excess = np.where(_stalled(state, names, fps), excess, 0.0)
    contact: np.ndarray = np.any(excess > 0, axis=1)
    near_load: np.ndarray = np.any(load >= NEAR_FRACTION * _per_joint(names, GRIPPER_OVERLOAD, BODY_OVERLOAD),
                                   axis=1)
    approaches, near_frames = _long_runs(near_load, math.ceil(NEAR_TIME_S * fps))
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
        approaches, float(near_frames * dt), felt)


def dataset_mashing(ds: LeRobotDataset, data: Loaded) -> list[EpisodeMashing] | None:
    """Every episode's measures (in `data.spans`' order, body contact judged on `data.state`); None for
    a dataset without observation.effort."""
    if EFFORT not in ds.features or not ds.has_column(EFFORT):
        return None
    spans = data.spans
    effort = spans.take(np.asarray(ds.column(EFFORT), dtype=np.float64))
    effort = effort.reshape(len(effort), -1)
    feedback = None
    if FEEDBACK in ds.features and ds.has_column(FEEDBACK):
        feedback = spans.take(np.asarray(ds.column(FEEDBACK), dtype=np.float64))
        feedback = feedback.reshape(len(feedback), -1)
    names = ds.joint_names(EFFORT)
    return [episode_mashing(int(e), effort[a:b], names, ds.fps, None if feedback is None else feedback[a:b],
                            data.state[a:b])
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
