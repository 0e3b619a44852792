"""Sample weights (SPEC §5, the seeds' `sample_weights`): interventions weigh more, but not by much
(2–3×), and recent data weighs more (a recency half-life). Written beside the dataset as
`meta/sample_weights.parquet` with the rule in its schema metadata; a training loader reads them
back per episode (`read_weights`) or per frame (`frame_weights`).
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from teleop_flywheel.core.files import replace_atomic
from teleop_flywheel.data.errors import DatasetError
from teleop_flywheel.data.lerobot import v3_layout
from teleop_flywheel.data.lerobot.dataset import LeRobotDataset
from teleop_flywheel.data.lerobot.episode_table import EpisodeRecord
from teleop_flywheel.data.reports.audit import Loaded

WEIGHTS_PATH = v3_layout.SAMPLE_WEIGHTS_PATH
INTERVENTION_WEIGHT = 2.5
HALF_LIFE_DAYS = 30.0
NS_PER_DAY = 86_400 * 10**9
WEIGHT_RULE = (
    "w_e = (intervention_weight if the episode contains an intervention else 1) "
    "* 0.5 ** (age_days / half_life_days); age_days = (newest recording - this recording) / 1 day; "
    "weights normalised to sum to 1 (per episode; a frame sampler uses w_e / length_e per frame)"
)


class WeightedEpisode(Protocol):
    episode_index: int
    episode_id: str | None
    weight: float
    has_intervention: bool
    age_days: float


@dataclass(frozen=True)
class WeightRule:
    intervention_weight: float = INTERVENTION_WEIGHT
    half_life_days: float = HALF_LIFE_DAYS

    def __post_init__(self) -> None:
        if self.intervention_weight < 1.0:
            raise ValueError(f"intervention weight must be >= 1, got {self.intervention_weight}")
        if self.half_life_days <= 0:
            raise ValueError(f"recency half-life must be > 0 days, got {self.half_life_days}")


def sample_weights(has_intervention: np.ndarray, recorded_wall_ns: list[int | None],
                   rule: WeightRule = WeightRule()) -> tuple[np.ndarray, np.ndarray]:
    """(weights summing to 1, age in days) by WEIGHT_RULE; episodes without a time get age 0."""
    known = [t for t in recorded_wall_ns if t is not None]
    newest = max(known) if known else 0
    age = np.array([(newest - t) / NS_PER_DAY if t is not None else 0.0 for t in recorded_wall_ns])
    raw = np.where(has_intervention, rule.intervention_weight, 1.0) * 0.5 ** (age / rule.half_life_days)
    return raw / raw.sum(), age


def episode_has_intervention(ds: LeRobotDataset, data: Loaded, records: list[EpisodeRecord]) -> tuple[np.ndarray, str]:
    """From the per-frame `intervention` column when present, else from the episode metadata."""
    if ds.has_column("intervention"):
        flags: np.ndarray = data.spans.take(ds.column("intervention")).astype(bool)
        if flags.ndim > 1:
            flags = np.asarray(flags.any(axis=1))
        return np.logical_or.reduceat(flags, data.spans.start), "data column 'intervention'"
    counts = [r.num_interventions for r in records]
    if any(c is not None for c in counts):
        return np.array([bool(c) for c in counts]), "episode metadata"
    return np.zeros(len(records), dtype=bool), "none (no intervention column or metadata: all weighted as demos)"


def write_weights(ds: LeRobotDataset, episodes: Sequence[WeightedEpisode], rule: WeightRule,
                  path: Path | None = None) -> Path:
    return write_weight_columns(Path(path) if path else ds.root / WEIGHTS_PATH,
                                [e.episode_index for e in episodes], [e.episode_id for e in episodes],
                                [e.weight for e in episodes], [e.has_intervention for e in episodes],
                                [e.age_days for e in episodes], rule)


def write_weight_columns(path: Path, episode_index: Sequence[int] | np.ndarray, episode_id: Sequence[str | None],
                         weight: Sequence[float] | np.ndarray, has_intervention: Sequence[bool] | np.ndarray,
                         age_days: Sequence[float] | np.ndarray, rule: WeightRule) -> Path:
    """The weights file at `path`, from its columns (an append's: arrays, no object per episode)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.table({
        "episode_index": pa.array(episode_index, type=pa.int64()),
        "episode_id": pa.array(episode_id, type=pa.string()),
        "weight": pa.array(weight, type=pa.float64()),
        "has_intervention": pa.array(has_intervention, type=pa.bool_()),
        "age_days": pa.array(age_days, type=pa.float64()),
    })
    meta = {"rule": WEIGHT_RULE, **asdict(rule)}
    table = table.replace_schema_metadata({b"teleop_flywheel.sample_weights": json.dumps(meta).encode()})
    buf = pa.BufferOutputStream()
    # rewritten whole at every append: its ids and floats are all distinct, so neither dictionaries nor
    # compression make it smaller (0.93 MB at 10,000 episodes either way), and they cost 4.7 -> 1.0 ms of CPU
    pq.write_table(table, buf, use_dictionary=False, compression="none")
    # replaced, never rewritten in place: a dataset's versions share their files (`data/lerobot/commit/`)
    return replace_atomic(path, buf.getvalue().to_pybytes())


def read_weight_table(root: str | Path) -> tuple[pa.Table, dict[str, Any]]:
    """The weights table (`write_weights`' columns, one row per episode) and the rule it was made with."""
    path = Path(root) / WEIGHTS_PATH
    if not path.is_file():
        raise DatasetError(f"{path}: no sample weights (run `teleop-flywheel curate {root}`)")
    table = pq.read_table(path)
    meta = table.schema.metadata or {}
    return table, json.loads(meta.get(b"teleop_flywheel.sample_weights", b"{}"))


def read_weights(root: str | Path) -> tuple[dict[int, float], dict[str, Any]]:
    """{episode_index: weight} and the rule they were made with, for a training loader."""
    table, rule = read_weight_table(root)
    return dict(zip(table.column("episode_index").to_pylist(), table.column("weight").to_pylist(), strict=True)), rule


def frame_weights(ds: LeRobotDataset) -> np.ndarray:
    """Per-frame weights in data row order (w_e / length_e), for a WeightedRandomSampler."""
    weights, _ = read_weights(ds.root)
    ep = ds.column("episode_index").astype(np.int64)
    table = ds.episodes
    missing = set(table["episode_index"].astype(int)) - set(weights)
    if missing:
        raise DatasetError(f"{ds.root / WEIGHTS_PATH}: no weight for episode(s) {sorted(missing)[:10]}; re-run curate")
    per_episode = np.zeros(int(table["episode_index"].max()) + 1)
    for e, n in zip(table["episode_index"].astype(int), table["length"].astype(int), strict=True):
        per_episode[e] = weights[e] / n
    return per_episode[ep]
