"""The curation scores stored in a dataset, kept current by every append (docs/dataset_reports.md).

The scores are relative to the dataset (`jerk_z` to the task's episodes, `duration_ratio` to its median
length, `coverage_gain` to the other start states), so an append changes them for old episodes too.
They live in the scores file (`meta/episode_scores.parquet`, `v3_layout.SCORES_PATH`), with copies of
what they are computed from, so an append scores every episode from that file alone and only ever adds
to the episodes files (`score_table`); datasets converted before it hold them in their episodes rows
(`with_scores` over the whole table). `store` writes what `curate` computes into either.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from teleop_flywheel.data.curation.curate import (
    COVERAGE_KEY,
    COVERAGE_RULE,
    coverage_width,
    curate,
    dataset_scores,
    integrated_squared_jerk,
    table_successes,
)
from teleop_flywheel.data.lerobot import commit, v3_layout
from teleop_flywheel.data.lerobot.append import ID_COLUMNS, episode_files, read_episode_table, read_info
from teleop_flywheel.data.lerobot.dataset import SCORE_INPUT, LeRobotDataset, read_scores
from teleop_flywheel.data.lerobot.episode_table import COLUMNS, CURATION_COLUMNS, START_STATE, columns_for
from teleop_flywheel.data.reports.audit import load

STATE = "observation.state"


def with_scores(table: pa.Table, root: Path, fps: float, success: np.ndarray | None = None) -> pa.Table:
    """The episodes table of an append with every episode's scores (re)computed. New rows bring their
    `jerk` and `start_state` (the converter computed them from the rows it writes); rows of a dataset
    converted before the scores existed get theirs from the data at `root`, which the append has not
    touched yet. The box is the visited range of every episode (its `stats/observation.state/min|max`).
    Only the columns the scores read are converted: the table's other columns (the per-episode stats, the
    verdicts) are most of it and grow with every append. `coverage_gain` is brought up to date from the
    rows `root` holds (`_known_gains`) when it can be. `success`: each row's graded success, when known
    already (else from the outcome and attempts columns)."""
    # the scalar columns as a frame; the jerk, start states and tasks as arrow columns (a frame makes a
    # Python object or array per row of them: ~35 ms CPU at 10,000 episodes)
    df = table.select([c for c in columns_for(table.column_names, "outcome", "attempts") if c != "tasks"]).to_pandas()
    n = table.num_rows
    jerk = _floats(table, "jerk")
    state = table.column(START_STATE) if START_STATE in table.column_names else pa.nulls(n)
    lacking = np.flatnonzero(state.is_null().to_numpy(zero_copy_only=False)).tolist()
    if lacking:
        starts: list[Any] = state.to_pylist()
        old = LeRobotDataset.open(root)
        data = load(old, STATE)
        old_jerk = integrated_squared_jerk(data.action, data.spans.start, data.spans.stop, old.fps)
        where = {int(e): k for k, e in enumerate(data.spans.episode_index)}
        for i in lacking:
            k = where[int(df["episode_index"].iloc[i])]
            jerk[i], starts[i] = old_jerk[k], data.start_states[k]
        start_arr = np.array([np.asarray(v, dtype=np.float64) for v in starts])
    else:
        start_arr = _stacked(table, START_STATE)
    lows, highs = (_stacked(table, f"stats/{STATE}/{stat}") for stat in ("min", "max"))
    lo, hi = np.nanmin(lows, axis=0), np.nanmax(highs, axis=0)
    if success is None:
        tasks = [[str(t) for t in v] if v is not None else [] for v in table.column("tasks").to_pylist()]
        success = table_successes(df, tasks, fps)
    known = None if lacking else _known_gains(table, root, lows, highs)
    scored = dataset_scores(success, _first_tasks(table), df["length"].to_numpy(), jerk, start_arr, lo, hi, known)
    return _set_columns(table, scored.columns(start_arr))


# The episodes-table columns the scores file holds a copy of, as `input/<column>` (`dataset.SCORE_INPUT`):
# what the scores are computed from, so an append scores every episode from that file alone; and, where
# the rows have them, what an append reads of every episode besides (the ids for the duplicates, the
# times and data files for the sample weights: `dataset.LeRobotDataset.open(episode_columns=...)` reads
# them there), so it opens no episodes file but the last
SCORED_FROM = ("tasks", "length", f"stats/{STATE}/min", f"stats/{STATE}/max")
CARRIED = (*ID_COLUMNS, *COLUMNS["recorded_wall_ns"], "data/chunk_index", "data/file_index")


def score_file(scored: pa.Table) -> pa.Table:
    """The scores file's table of an episodes table whose rows hold their scores (`with_scores`')."""
    copies = [*SCORED_FROM, *(c for c in CARRIED if c in scored.column_names)]
    return scored.select(["episode_index", *copies, *CURATION_COLUMNS]).rename_columns(
        ["episode_index", *(SCORE_INPUT + c for c in copies), *CURATION_COLUMNS])


def score_table(added: pa.Table, root: Path, fps: float) -> pa.Table:
    """The scores file after an append of the episodes-table rows `added` (`append.write_episodes`'
    `scores`): `with_scores` over the rows the dataset's scores file holds (their inputs and scores, a
    few floats an episode: the episodes files are not read) and the added ones. A dataset without one
    (new, or converted before it: its rows hold the scores), or whose file copies other columns than
    the added rows have, is scored from every row of its table."""
    old = read_scores(root)
    carried = [c for c in CARRIED if c in added.column_names]
    copies = [*SCORED_FROM, *carried]
    have = set(old.column_names) if old is not None else set()
    if old is None or not {*(SCORE_INPUT + c for c in copies), *CURATION_COLUMNS} <= have or \
            any(SCORE_INPUT + c in have for c in CARRIED if c not in carried):
        whole = read_episode_table(root)
        table = added if whole is None else pa.concat_tables([whole, added], promote_options="permissive")
        return score_file(with_scores(table, root, fps))
    prior = old.select(["episode_index", *(SCORE_INPUT + c for c in copies), *CURATION_COLUMNS]).rename_columns(
        ["episode_index", *copies, *CURATION_COLUMNS])
    wanted = ["episode_index", *copies, "jerk", START_STATE, *columns_for(added.column_names, "outcome", "attempts")]
    new = added.select([c for c in dict.fromkeys(wanted) if c in added.column_names])
    df = new.to_pandas()
    gained = table_successes(df, [[str(t) for t in v] if v is not None else [] for v in df["tasks"]], fps)
    success = np.concatenate([prior.column("graded_success").to_numpy(zero_copy_only=False).astype(np.float64),
                              gained])
    table = pa.concat_tables([prior, new.select([c for c in new.column_names if c in prior.column_names])],
                             promote_options="permissive")
    return score_file(with_scores(table, root, fps, success))


def _first_tasks(table: pa.Table) -> list[str]:
    """Each row's first task ("" for none), from the list column's offsets: no list per row."""
    column = table.column("tasks").combine_chunks()
    offsets = column.offsets.to_numpy()
    has = offsets[1:] > offsets[:-1]  # a null row's offsets are equal
    first = pc.fill_null(column.values.take(pa.array(offsets[:-1][has])), "None")  # str(None), as a list's would
    out = np.full(len(column), "", dtype=object)
    out[has] = first.to_numpy(zero_copy_only=False)
    return [str(t) for t in out]


def _floats(table: pa.Table, name: str) -> np.ndarray:
    """A column as floats, NaN where it is null (or the table has no such column)."""
    if name not in table.column_names:
        return np.full(table.num_rows, np.nan)
    column = pc.cast(table.column(name), pa.float64())
    return np.asarray(column.to_numpy(zero_copy_only=False), dtype=np.float64).copy()  # nulls: NaN; written to


def _stacked(table: pa.Table, name: str) -> np.ndarray:
    """A list column of equal-length float lists as one (rows, length) array."""
    column = table.column(name).combine_chunks()
    return np.asarray(column.flatten().to_numpy(zero_copy_only=False), dtype=np.float64).reshape(len(column), -1)


def _known_gains(table: pa.Table, root: Path, lows: np.ndarray, highs: np.ndarray) -> np.ndarray | None:
    """The `coverage_gain` of the rows the dataset at `root` holds (the first rows of `table`, an
    append's), when they can be brought up to date: written under this rule (info.json `COVERAGE_KEY`)
    and the same `coverage_width` as the whole table's. None: compute every value again."""
    info = read_info(root) or {}
    n = int(info.get("total_episodes", 0))
    if info.get(COVERAGE_KEY) != COVERAGE_RULE or not 0 < n <= len(table) or "coverage_gain" not in \
            table.column_names or table.column("episode_index").slice(0, n).to_pylist() != list(range(n)):
        return None
    before = coverage_width(np.nanmin(lows[:n], axis=0), np.nanmax(highs[:n], axis=0))
    if not np.array_equal(before, coverage_width(np.nanmin(lows, axis=0), np.nanmax(highs, axis=0))):
        return None
    gains = table.column("coverage_gain").slice(0, n).to_numpy(zero_copy_only=False)
    return np.asarray(gains, dtype=np.float64)  # null (a lone episode's) -> NaN


def _set_columns(table: pa.Table, columns: Mapping[str, list[Any] | pa.Array]) -> pa.Table:
    for name, values in columns.items():
        kind = pa.list_(pa.float64()) if name == START_STATE else pa.float64()
        array = values if isinstance(values, pa.Array) else pa.array(values, type=kind)
        i = table.schema.get_field_index(name)
        table = table.set_column(i, name, array) if i >= 0 else table.append_column(name, array)
    return table


def store(root: Path) -> list[str]:
    """Write the scores of `curate` into the dataset's scores file (a dataset with one: ours) or else its
    episodes table(s), atomically (the commit of `data/lerobot/commit/`, under the dataset's lock); the
    files replaced."""
    root = Path(os.path.abspath(root))
    with commit.locked_dataset(root):
        commit.recover(root)  # what an interrupted commit left
        ds = LeRobotDataset.open(root)
        report = curate(ds)
        by_episode = {s.episode_index: k for k, s in enumerate(report.episodes)}
        starts = report.start_states
        side = read_scores(ds.files)
        tables = {v3_layout.SCORES_PATH: side} if side is not None else \
            {str(p.relative_to(ds.files)): pq.read_table(p) for p in episode_files(ds.files)}
        stage = commit.new_stage(root)
        replaced = []
        try:
            for rel, table in tables.items():
                rows = [by_episode[int(e)] for e in table.column("episode_index").to_pylist()]
                eps = [report.episodes[k] for k in rows]
                cols: dict[str, list[Any]] = {"graded_success": [s.success for s in eps], "jerk": [s.jerk for s in eps],
                        "jerk_z": [s.jerk_z for s in eps], "duration_ratio": [s.duration_ratio for s in eps],
                        "coverage_gain": [s.coverage_gap for s in eps],
                        START_STATE: [[float(x) for x in starts[k]] for k in rows]}
                (stage / rel).parent.mkdir(parents=True, exist_ok=True)
                pq.write_table(_set_columns(table, cols), stage / rel)
                replaced.append(rel)
            commit.publish(root)
        finally:
            commit.recover(root)  # a staging directory not published: removed
    return replaced


