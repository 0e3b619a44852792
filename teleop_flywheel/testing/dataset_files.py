"""A LeRobot v3.0 dataset's files with plain pandas/pyarrow: the independent reader the reports are
checked against (reading with nothing of `data.lerobot.dataset`), and edits that plant faults in a
dataset (rows dropped, an episode removed, a column rewritten) the way `synthetic_session` plants
them in bags, or make it a dataset of our older layout (`layout_1_copy`)."""
from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from teleop_flywheel.data.lerobot.dataset import join_scores
from teleop_flywheel.data.lerobot.flywheel_schema import SCHEMA_KEY, renames_since
from teleop_flywheel.data.migrate import rename_features


def data_files(root: Path) -> list[Path]:
    return sorted((root / "data").glob("chunk-*/file-*.parquet"))


def read_frames(root: Path) -> pd.DataFrame:
    """Every data row with pandas alone (the independent reader the reports are checked against)."""
    return pd.concat([pd.read_parquet(p) for p in data_files(root)], ignore_index=True)


def read_episodes(root: Path) -> pd.DataFrame:
    """Every row of the episodes files, with the curation columns of the scores file where it has one
    (`dataset.read_scores`), by episode_index."""
    files = sorted((root / "meta" / "episodes").rglob("*.parquet"))
    table = pd.concat([pd.read_parquet(p) for p in files], ignore_index=True)
    join_scores(table, root)
    return table


def stack(column: pd.Series) -> np.ndarray:
    return np.stack([np.asarray(v) for v in column])


def drop_rows(root: Path, episode: int, count: int) -> None:
    """Remove the last `count` rows of one episode from its data file; metadata left untouched."""
    for path in data_files(root):
        table = pq.read_table(path)
        ep = table.column("episode_index").to_numpy()
        rows = np.flatnonzero(ep == episode)
        if len(rows):
            keep = np.ones(len(ep), dtype=bool)
            keep[rows[-count:]] = False
            pq.write_table(table.filter(pa.array(keep)), path)
            return
    raise ValueError(f"{root}: episode {episode} not found in any data file")


def rewrite_column(root: Path, column: str, fn: Callable[[np.ndarray], np.ndarray]) -> None:
    """Replace a data column in every file with fn(numpy array of it) (same Arrow type)."""
    for path in data_files(root):
        table = pq.read_table(path)
        i = table.schema.get_field_index(column)
        kind = table.schema.field(i).type
        col = table.column(i).combine_chunks()
        if pa.types.is_fixed_size_list(kind):
            values = col.flatten().to_numpy().reshape(len(col), kind.list_size)
            new = pa.FixedSizeListArray.from_arrays(pa.array(fn(values).reshape(-1), type=kind.value_type),
                                                    kind.list_size)
        else:
            new = pa.array(fn(col.to_numpy(zero_copy_only=False)), type=kind)
        pq.write_table(table.set_column(i, table.schema.field(i), new), path)


def drop_episode(root: Path, episode: int, renumber: bool = False) -> None:
    """Remove an episode everywhere (data rows, episodes table, totals), as a consistent edit; with
    `renumber` the later episodes move down one index, as deleting an episode with a dataset tool
    does. Videos are left as they are: the other episodes keep their spans in them."""
    def shift(ep: np.ndarray) -> np.ndarray:
        return ep - (ep > episode) if renumber else ep

    for path in data_files(root):
        t = pq.read_table(path)
        t = t.filter(pa.array(t.column("episode_index").to_numpy() != episode))
        i = t.schema.get_field_index("episode_index")
        pq.write_table(t.set_column(i, t.schema.field(i), pa.array(shift(t.column(i).to_numpy()))), path)
    path = next((root / "meta/episodes").rglob("*.parquet"))
    t = pq.read_table(path)
    t = t.filter(pa.array(t.column("episode_index").to_numpy() != episode))
    starts = np.concatenate(([0], np.cumsum(t.column("length").to_numpy())))
    for name, values in (("dataset_from_index", starts[:-1]), ("dataset_to_index", starts[1:]),
                         ("episode_index", shift(t.column("episode_index").to_numpy()))):
        t = t.set_column(t.schema.get_field_index(name), name, pa.array(values.astype(np.int64)))
    pq.write_table(t, path)
    rewrite_column(root, "index", lambda a: np.arange(len(a), dtype=np.int64))
    info = json.loads((root / "meta/info.json").read_text())
    info["total_episodes"] -= 1
    info["total_frames"] = int(starts[-1])
    (root / "meta/info.json").write_text(json.dumps(info))


def layout_1_copy(src: Path, dest: Path) -> Path:
    """A copy of a dataset our converter wrote, as it wrote it before layout 2: the leader arm's
    reading `observation.leader_state`, no `teleop_flywheel_schema` in info.json."""
    shutil.copytree(src, dest)
    rename_features(dest, {now: old for old, now in renames_since(1).items()}, {})
    info_path = dest / "meta" / "info.json"
    info = json.loads(info_path.read_text())
    del info[SCHEMA_KEY]
    info_path.write_text(json.dumps(info, indent=4))
    return dest
