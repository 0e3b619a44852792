"""Write numeric-only LeRobot v3.0 datasets of synthetic SO-101 episodes, fast, with pyarrow.

For benchmarks (a million frames in seconds) and for tests of the reports, which need datasets
whose every number is known. The layout is LeRobot 0.4.x's (info.json, tasks.parquet, episodes
parquet with flattened stats, chunked data parquet with `fixed_size_list` vectors); there are no
video features, because nothing that reads these datasets may decode video anyway.

The motion is a minimum-jerk reach from a start pose to a goal, after a few leading frames in
which the command does not change (an operator settling), with actions quantised to the servo's
resolution so slow stretches repeat bit-identically, as real teleoperation does. State at frame t
is the command of frame t-1 (the frame contract: action t carries state t to state t+1).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from teleop_flywheel.core.so101 import JOINT_NAMES, STEPS_PER_TURN
from teleop_flywheel.data.lerobot.dataset import EPISODES_DIR, INFO_PATH, TASKS_PATH

FEATURE_NAMES = [f"{j}.pos" for j in JOINT_NAMES]
HOME = np.array([0.0, -90.0, 90.0, 60.0, 0.0, 5.0])
START_SPREAD = np.array([6.0, 2.0, 0.2, 3.0, 6.0, 1.0])
GOAL_LOW = np.array([-90.0, -60.0, 20.0, -30.0, -90.0, 0.0])
GOAL_HIGH = np.array([90.0, 20.0, 95.0, 90.0, 90.0, 35.0])
QUANTUM = np.float32(360.0 / STEPS_PER_TURN)  # one STS3215 step in degrees
DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
STAT_NAMES = ("min", "max", "mean", "std", "count", "q01", "q10", "q50", "q90", "q99")


@dataclass
class SyntheticSpec:
    episodes: int = 50
    min_length: int = 183
    max_length: int = 306
    fps: int = 30
    seed: int = 0
    tasks: tuple[str, ...] = ("pick the brick",)
    operators: tuple[str, ...] = ("ana", "ben")
    checkpoints: tuple[str, ...] = ("ckpt-a", "ckpt-b")
    max_lead_dead: int = 12
    intervention_share: float = 0.3
    frames_per_file: int = 500_000
    start_wall_ns: int = 1_767_225_600 * 10**9  # 2026-01-01T00:00:00Z
    days_between_episodes: float = 0.5
    episode_metadata: bool = True
    list_type: str = "fixed"  # "fixed" (datasets>=4) or "list" (older writers)
    lengths: tuple[int, ...] | None = None  # explicit episode lengths (overrides min/max_length)
    extra_info: dict[str, Any] = field(default_factory=dict)


@dataclass
class SyntheticDataset:
    root: Path
    lengths: np.ndarray
    frames: int


def _vector_array(values: np.ndarray, list_type: str) -> pa.Array:
    flat = pa.array(values.reshape(-1), type=pa.float32())
    if list_type == "fixed":
        return pa.FixedSizeListArray.from_arrays(flat, values.shape[1])
    offsets = pa.array(np.arange(0, values.size + 1, values.shape[1], dtype=np.int32))
    return pa.ListArray.from_arrays(offsets, flat)


def _stats(values: np.ndarray) -> dict[str, list[float]]:
    v = values.reshape(len(values), -1).astype(np.float64)
    q = np.quantile(v, [0.01, 0.10, 0.50, 0.90, 0.99], axis=0)
    return {"min": v.min(0).tolist(), "max": v.max(0).tolist(), "mean": v.mean(0).tolist(),
            "std": v.std(0).tolist(), "count": [len(v)], "q01": q[0].tolist(), "q10": q[1].tolist(),
            "q50": q[2].tolist(), "q90": q[3].tolist(), "q99": q[4].tolist()}


def generate(spec: SyntheticSpec) -> dict[str, np.ndarray]:
    """All frames of all episodes as arrays (vectorised: a million frames in well under a second)."""
    rng = np.random.default_rng(spec.seed)
    n = spec.episodes
    lengths = rng.integers(spec.min_length, spec.max_length + 1, size=n)
    if spec.lengths is not None:
        if len(spec.lengths) != n:
            raise ValueError(f"{len(spec.lengths)} lengths for {n} episodes")
        lengths = np.asarray(spec.lengths, dtype=np.int64)
    lead = rng.integers(0, spec.max_lead_dead + 1, size=n)
    starts = HOME + rng.normal(0.0, 1.0, size=(n, 6)) * START_SPREAD
    goals = GOAL_LOW + rng.random((n, 6)) * (GOAL_HIGH - GOAL_LOW)
    ep = np.repeat(np.arange(n), lengths)
    first = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    frame = np.arange(len(ep)) - first[ep]
    moving = np.maximum(lengths - lead - 1, 1)
    tau = np.clip((frame - lead[ep]) / moving[ep], 0.0, 1.0)
    profile = tau**3 * (10 - 15 * tau + 6 * tau**2)  # minimum-jerk
    raw = starts[ep] + (goals[ep] - starts[ep]) * profile[:, None]
    action = (np.round(raw / QUANTUM) * QUANTUM).astype(np.float32)
    state = np.empty_like(action)
    state[1:] = action[:-1]
    state[first] = (np.round(starts / QUANTUM) * QUANTUM).astype(np.float32)
    interv = np.zeros(len(ep), dtype=bool)
    has_interv = rng.random(n) < spec.intervention_share
    for e in np.flatnonzero(has_interv):
        lo = first[e] + lengths[e] // 3
        interv[lo: lo + lengths[e] // 5] = True
    return {"episode_index": ep, "frame_index": frame, "action": action, "observation.state": state,
            "intervention": interv, "lengths": lengths, "has_intervention": has_interv,
            "task_index": (np.arange(n) % len(spec.tasks))[ep]}


def write(root: str | Path, spec: SyntheticSpec | None = None) -> SyntheticDataset:
    """Write the dataset; `root` must not exist yet (never overwrites)."""
    spec = spec or SyntheticSpec()
    root = Path(root)
    root.mkdir(parents=True, exist_ok=False)
    g = generate(spec)
    n_frames = len(g["episode_index"])
    blend = g["intervention"].astype(np.float32)
    columns: dict[str, pa.Array] = {
        "action": _vector_array(g["action"], spec.list_type),
        "observation.state": _vector_array(g["observation.state"], spec.list_type),
        "intervention": pa.array(g["intervention"]),
        "complementary_info.blend_weight": pa.array(blend),
        "timestamp": pa.array((g["frame_index"] / spec.fps).astype(np.float32)),
        "frame_index": pa.array(g["frame_index"].astype(np.int64)),
        "episode_index": pa.array(g["episode_index"].astype(np.int64)),
        "index": pa.array(np.arange(n_frames, dtype=np.int64)),
        "task_index": pa.array(g["task_index"].astype(np.int64)),
    }
    table = pa.table(columns)
    lengths = g["lengths"]
    bounds = np.concatenate(([0], np.cumsum(lengths)))
    file_of_episode = []
    file_index, rows_in_file, start = 0, 0, 0
    for length in lengths:
        if rows_in_file and rows_in_file + length > spec.frames_per_file:
            _write_data(root, table.slice(start, rows_in_file), file_index)
            file_index, start, rows_in_file = file_index + 1, start + rows_in_file, 0
        file_of_episode.append(file_index)
        rows_in_file += int(length)
    _write_data(root, table.slice(start, rows_in_file), file_index)

    pq.write_table(pa.table({"task_index": pa.array(range(len(spec.tasks)), type=pa.int64()),
                             "task": list(spec.tasks)}), _mk(root / TASKS_PATH))
    episodes = _episodes_table(spec, g, lengths, bounds, file_of_episode)
    pq.write_table(episodes, _mk(root / EPISODES_DIR / "chunk-000" / "file-000.parquet"))
    stats = {k: _stats(np.asarray(g[k])) for k in ("action", "observation.state")}
    (root / "meta" / "stats.json").write_text(json.dumps(stats, indent=2))
    (root / INFO_PATH).write_text(json.dumps(_info(spec, n_frames), indent=2))
    return SyntheticDataset(root, lengths, n_frames)


def _mk(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def _write_data(root: Path, table: pa.Table, file_index: int) -> None:
    pq.write_table(table, _mk(root / DATA_PATH.format(chunk_index=0, file_index=file_index)))


def _episodes_table(spec: SyntheticSpec, g: dict[str, np.ndarray], lengths: np.ndarray,
                    bounds: np.ndarray, file_of_episode: list[int]) -> pa.Table:
    n = len(lengths)
    cols: dict[str, Any] = {
        "episode_index": pa.array(np.arange(n, dtype=np.int64)),
        "tasks": pa.array([[spec.tasks[e % len(spec.tasks)]] for e in range(n)], type=pa.list_(pa.string())),
        "length": pa.array(lengths.astype(np.int64)),
        "data/chunk_index": pa.array(np.zeros(n, dtype=np.int64)),
        "data/file_index": pa.array(np.asarray(file_of_episode, dtype=np.int64)),
        "dataset_from_index": pa.array(bounds[:-1].astype(np.int64)),
        "dataset_to_index": pa.array(bounds[1:].astype(np.int64)),
        "meta/episodes/chunk_index": pa.array(np.zeros(n, dtype=np.int64)),
        "meta/episodes/file_index": pa.array(np.zeros(n, dtype=np.int64)),
    }
    for key in ("action", "observation.state"):
        per_ep = [_stats(g[key][bounds[e]:bounds[e + 1]]) for e in range(n)]
        for stat in STAT_NAMES:
            cols[f"stats/{key}/{stat}"] = pa.array([s[stat] for s in per_ep], type=pa.list_(pa.float64()))
    if spec.episode_metadata:
        rng = np.random.default_rng(spec.seed + 1)
        outcomes = np.where(rng.random(n) < 0.8, "success", "failure")
        attempts = np.where(outcomes == "success", rng.integers(1, 4, size=n), rng.integers(1, 3, size=n))
        cols["episode_id"] = pa.array([hashlib.sha256(f"{spec.seed}/{e}".encode()).hexdigest() for e in range(n)])
        cols["operator"] = pa.array([spec.operators[e % len(spec.operators)] for e in range(n)])
        cols["outcome"] = pa.array(outcomes.tolist())
        cols["attempts"] = pa.array(attempts.astype(np.int64))
        cols["policy_checkpoint"] = pa.array(
            [spec.checkpoints[min(e * len(spec.checkpoints) // n, len(spec.checkpoints) - 1)] for e in range(n)])
        day = 86_400 * 10**9
        cols["recorded_wall_ns"] = pa.array(
            (spec.start_wall_ns + np.arange(n) * spec.days_between_episodes * day).astype(np.int64))
        labels = ("wrong_grasp", "too_slow", "about_to_collide", "wrong_object")
        cols["interventions"] = pa.array([
            json.dumps([{"id": 1, "trigger": labels[e % len(labels)]}] if g["has_intervention"][e] else [])
            for e in range(n)])
    return pa.table(cols)


def _feature(dtype: str, names: list[str] | None, width: int = 1) -> dict[str, Any]:
    return {"dtype": dtype, "shape": [width], "names": names}


def _info(spec: SyntheticSpec, n_frames: int) -> dict[str, Any]:
    info = {
        "codebase_version": "v3.0",
        "robot_type": "so101_follower",
        "total_episodes": spec.episodes,
        "total_frames": n_frames,
        "total_tasks": len(spec.tasks),
        "chunks_size": 1000,
        "data_files_size_in_mb": 100,
        "video_files_size_in_mb": 200,
        "fps": spec.fps,
        "splits": {"train": f"0:{spec.episodes}"},
        "data_path": DATA_PATH,
        "video_path": VIDEO_PATH,
        "features": {
            "action": _feature("float32", FEATURE_NAMES, 6),
            "observation.state": _feature("float32", FEATURE_NAMES, 6),
            "intervention": _feature("bool", None),
            "complementary_info.blend_weight": _feature("float32", None),
            "timestamp": _feature("float32", None),
            "frame_index": _feature("int64", None),
            "episode_index": _feature("int64", None),
            "index": _feature("int64", None),
            "task_index": _feature("int64", None),
        },
    }
    info.update(spec.extra_info)
    return info
