"""episode_table: our metadata columns, the whole-EpisodeMeta JSON form, and foreign datasets."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from teleop_flywheel.core.episode import EpisodeMeta, Intervention
from teleop_flywheel.data.lerobot.dataset import LeRobotDataset
from teleop_flywheel.data.lerobot.episode_table import episode_records, table_ids, table_records, table_times
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


def test_times_and_ids_from_the_columns_are_the_records_own() -> None:
    """`table_times` and `table_ids` (no record per row) give what a record per row gives: the column's
    time, an empty time cell (the metadata JSON then decides, or nothing), an empty id, no time column."""
    clock = {"wall_ns": 1_700_000_000_000_000_000, "mono_ns": 5_000}

    def meta(started: int) -> str:
        return json.dumps(EpisodeMeta(episode_name="e", task="t", started_mono_ns=started, clock_start=clock)
                          .to_strings())

    rows = [(1_700_000_000_123_456_789, "a" * 64, None), (None, "b" * 64, meta(9_000)), (None, "", None),
            (1_700_000_001_000_000_000, None, meta(7_000)), (None, "None", meta(0))]
    df = pd.DataFrame({"episode_index": range(len(rows)), "length": [30] * len(rows),
                       "recorded_wall_ns": pd.array([r[0] for r in rows], dtype="Int64"),
                       "episode_id": [r[1] for r in rows], "episode_meta": [r[2] for r in rows]})
    tasks = [["t"]] * len(rows)
    recs = table_records(df, tasks, 30.0)
    want = [r.recorded_wall_ns for r in recs]
    assert table_times(df, tasks, 30.0) == want and table_ids(df) == [r.episode_id for r in recs]
    assert want[0] == rows[0][0] and want[1] == clock["wall_ns"] + 4_000 and want[2] is None  # the cases differ
    arrow = pa.Table.from_pandas(df).to_pandas(types_mapper=pd.ArrowDtype)  # columns read as arrow arrays
    assert table_times(arrow, tasks, 30.0) == want and table_ids(arrow) == [r.episode_id for r in recs]
    no_column = df.drop(columns=["recorded_wall_ns"])
    assert table_times(no_column, tasks, 30.0) == [r.recorded_wall_ns for r in table_records(no_column, tasks, 30.0)]
