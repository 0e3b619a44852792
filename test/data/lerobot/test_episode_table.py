"""episode_table: our metadata columns, the whole-EpisodeMeta JSON form, and foreign datasets."""
from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from teleop_flywheel.core.episode import EpisodeMeta, Intervention
from teleop_flywheel.data.lerobot.dataset import LeRobotDataset
from teleop_flywheel.data.lerobot.episode_table import episode_records
from teleop_flywheel.testing.synthetic_dataset import SyntheticSpec, write


def test_episode_meta_json_column(tmp_path: Path) -> None:
    root = write(tmp_path / "ds", SyntheticSpec(episodes=2, min_length=10, max_length=12,
                                                episode_metadata=False)).root
    metas = [EpisodeMeta(episode_name=f"e{i}", task="pick", operator="ana", outcome="success", attempts=2,
                         policy_checkpoint="ck", started_mono_ns=10**9 * 5,
                         clock_start={"mono_ns": 10**9, "wall_ns": 10**18, "uncertainty_ns": 1},
                         interventions=[Intervention(1, 1, 2, "too_slow"), Intervention(2, 3, 4, None)])
             for i in range(2)]
    path = next((root / "meta/episodes").rglob("*.parquet"))
    t = pq.read_table(path)
    t = t.append_column("episode_meta", pa.array([json.dumps(m.to_strings()) for m in metas]))
    pq.write_table(t, path)
    recs = episode_records(LeRobotDataset.open(root))
    r = recs[0]
    assert (r.operator, r.outcome, r.attempts, r.checkpoint) == ("ana", "success", 2, "ck")
    assert r.recorded_wall_ns == 10**18 + 4 * 10**9
    assert r.triggers == ["too_slow", None] and r.num_interventions == 2
    assert r.task == "pick the brick"  # the dataset's own task column wins over the bag's


def test_foreign_dataset_has_nothing_invented(tmp_path: Path) -> None:
    root = write(tmp_path / "ds", SyntheticSpec(episodes=3, min_length=10, max_length=12,
                                                episode_metadata=False)).root
    for r in episode_records(LeRobotDataset.open(root)):
        assert (r.episode_id, r.operator, r.outcome, r.attempts, r.checkpoint, r.recorded_wall_ns, r.triggers) == (
            None, None, None, None, None, None, None)
