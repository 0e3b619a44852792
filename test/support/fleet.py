"""Bags of a fleet with known times: rig, operator, start, motion, outcome, checkpoint, takeovers."""
from __future__ import annotations

from pathlib import Path

from teleop_flywheel.core.episode import EpisodeMeta, Intervention
from teleop_flywheel.recording.mcap.writer import BagWriter

S = 10**9
WALL0 = 1_767_571_200 * S  # 2026-01-05T00:00Z
MONO0 = 1_000 * S


def episode(root: Path, name: str, rig: str, operator: str, start_s: float, motion_s: float, outcome: str,
            checkpoint: str = "", takeovers: tuple[tuple[float, float | None], ...] = ()) -> None:
    """One bag: recorded from WALL0 + start_s for motion_s, takeovers (start, end) in seconds into it."""
    start_ros = WALL0 + round(start_s * S)
    meta = EpisodeMeta(
        episode_name=name, task="pick", operator=operator, rig_id=rig, outcome=outcome, attempts=1,
        policy_checkpoint=checkpoint, session_kind="rollout" if checkpoint else "teleop",
        started_mono_ns=MONO0 + round(start_s * S), stopped_mono_ns=MONO0 + round((start_s + motion_s) * S),
        started_ros_ns=start_ros, stopped_ros_ns=start_ros + round(motion_s * S),
        clock_start={"mono_ns": MONO0, "wall_ns": WALL0, "uncertainty_ns": 100},
        interventions=[Intervention(i + 1, start_ros + round(a * S), None if b is None else start_ros + round(b * S),
                                    "wrong_grasp") for i, (a, b) in enumerate(takeovers)])
    BagWriter(root / name, episode=meta, fsync=False).close()
