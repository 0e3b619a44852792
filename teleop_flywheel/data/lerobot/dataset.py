"""Read any LeRobot v3.0 dataset on disk: metadata, the episodes table and numeric data columns.

The reports (audit, curate, manifest, card, stats) must work on anyone's dataset, not only ours,
and must stay fast at a million frames, so this reader touches only what LeRobot 0.4.x writes and
only the columns asked for: `meta/info.json` (fps, features, data_path), `meta/episodes/*/*.parquet`
(one row per episode; the flattened `stats/...` columns are skipped unless asked for; ours keep the
curation columns in `meta/episode_scores.parquet` beside them, joined in: `read_scores`),
`meta/tasks.parquet`, and the `data/*/*.parquet` files read with pyarrow column projection.
Video is never opened. Vector features come back as (frames, dims) numpy arrays whatever their
Arrow list flavour (`fixed_size_list` from `datasets>=4`, `list` from older writers). A feature our
layout renamed is found by any of its names (`flywheel_schema.resolve`: the leader arm's reading is
`complementary_info.leader_state`, or `observation.leader_state` in datasets converted before), and
comes back under the name asked for.

A dataset whose path is a pointer to versions (`commit/`) is read from the version it points to
when it is opened (`files`), whatever commits follow; `root` stays the path given.
"""
from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from teleop_flywheel.data.errors import DatasetError
from teleop_flywheel.data.lerobot.commit import snapshot
from teleop_flywheel.data.lerobot.flywheel_schema import resolve

INFO_PATH = "meta/info.json"
EPISODES_DIR = "meta/episodes"
SCORES_PATH = "meta/episode_scores.parquet"  # v3_layout.SCORES_PATH
SCORE_INPUT = "input/"  # the scores file's columns that are what the scores are computed from, not scores
TASKS_PATH = "meta/tasks.parquet"
DATA_DIR = "data"
SUPPORTED_VERSIONS = ("v3.0",)
STATE = "observation.state"
ACTION = "action"


@dataclass(frozen=True)
class Feature:
    name: str
    dtype: str
    shape: tuple[int, ...]
    names: tuple[str, ...] | None

    @property
    def is_visual(self) -> bool:
        return self.dtype in ("video", "image")

    @property
    def width(self) -> int:
        return int(np.prod(self.shape)) if self.shape else 1


def _feature_names(raw: Any) -> tuple[str, ...] | None:
    """LeRobot writes names as a list, or (older robots) as {"motors": [...]}; flatten both."""
    if raw is None:
        return None
    if isinstance(raw, dict):
        flat: list[str] = []
        for value in raw.values():
            flat.extend(str(v) for v in (value if isinstance(value, list) else [value]))
        return tuple(flat)
    if isinstance(raw, list):
        return tuple(str(v) for v in raw)
    return None


@dataclass
class LeRobotDataset:
    """A v3.0 dataset directory, opened lazily: metadata at once, data columns on request."""

    root: Path
    info: dict[str, Any]
    features: dict[str, Feature]
    episodes: pd.DataFrame
    tasks: dict[int, str]
    files: Path  # the version read (`commit.snapshot`); `root` itself if the dataset has no versions
    _cache: dict[str, np.ndarray] = field(default_factory=dict, repr=False)

    @classmethod
    def open(cls, root: str | Path, episode_stats: bool = False, files: Path | None = None,
             episode_columns: list[str] | None = None) -> LeRobotDataset:
        """`files`: the version of `root` to read (one `commit.pinned` holds); default the current one.
        `episode_columns`: the only columns of the episodes table read, with `episode_index`, `length` and
        `tasks` (the verdicts and metadata are most of a row: an append's refresh reads a few columns)."""
        root = Path(root)
        files = snapshot(root) if files is None else files
        info_path = files / INFO_PATH
        if not info_path.is_file():
            error = DatasetError(f"{root}: " + (f"not a LeRobot dataset (no {INFO_PATH})" if root.exists()
                                                else "no such dataset directory"))
            error.fix = "give a dataset's root folder, the one `teleop-flywheel convert --dataset` wrote"
            raise error
        try:
            info = json.loads(info_path.read_text())
        except json.JSONDecodeError as exc:
            raise DatasetError(f"{info_path}: invalid JSON: {exc}") from None
        version = info.get("codebase_version")
        if version not in SUPPORTED_VERSIONS:
            raise DatasetError(
                f"{info_path}: codebase_version {version!r} is not supported (expected {SUPPORTED_VERSIONS})"
            )
        for key in ("fps", "features"):
            if key not in info:
                raise DatasetError(f"{info_path}: missing key {key!r}")
        features = {
            name: Feature(name, str(spec.get("dtype")), tuple(int(s) for s in spec.get("shape", ())),
                          _feature_names(spec.get("names")))
            for name, spec in info["features"].items()
        }
        return cls(root, info, features, _read_episodes(files, episode_stats, episode_columns), _read_tasks(files),
                   files)

    # ------------------------------------------------------------------ metadata
    @property
    def fps(self) -> float:
        return float(self.info["fps"])

    @property
    def robot_type(self) -> str:
        return str(self.info.get("robot_type") or "")

    @property
    def repo_id(self) -> str:
        """info.json `repo_id` (our converter's `--repo-id`; LeRobot itself stores none): "" if unknown."""
        return str(self.info.get("repo_id") or "")

    def feature_name(self, name: str) -> str | None:
        """`name` as this dataset calls it, whichever layout of ours it has (None: no such feature)."""
        return resolve(name, self.features)

    def joint_names(self, feature: str) -> list[str]:
        f = self.features[self.feature_name(feature) or feature]
        if f.names and len(f.names) == f.width:
            return list(f.names)
        return [f"{feature}[{i}]" for i in range(f.width)]

    def data_files(self) -> list[Path]:
        """Data parquet files in (chunk, file) order, which is frame `index` order for LeRobot."""
        files = sorted((self.files / DATA_DIR).glob("chunk-*/file-*.parquet"))
        if not files:
            files = sorted((self.files / DATA_DIR).rglob("*.parquet"))
        if not files:
            raise DatasetError(f"{self.root / DATA_DIR}: no data parquet files")
        return files

    def episode_tasks(self) -> list[list[str]]:
        """Each episode's task strings (the `tasks` column), in episode order."""
        if "tasks" not in self.episodes.columns:
            return [[] for _ in range(len(self.episodes))]
        out: list[list[str]] = []
        for value in self.episodes["tasks"]:
            if value is None:
                out.append([])
            elif isinstance(value, str):
                out.append([value])
            else:
                out.append([str(v) for v in value])
        return out

    # ------------------------------------------------------------------ data
    def read_table(self, columns: list[str]) -> pa.Table:
        """The named data columns (as this dataset names them) over all data files, in file order."""
        missing = [c for c in columns if c not in self.data_schema().names]
        if missing:
            raise DatasetError(f"{self.root}: data files have no column(s) {', '.join(missing)}")
        tables = []
        for path in self.data_files():
            try:
                tables.append(pq.read_table(path, columns=columns))
            except (pa.ArrowInvalid, OSError) as exc:
                raise DatasetError(f"{path}: unreadable parquet: {exc}") from None
        return pa.concat_tables(tables)

    def data_schema(self) -> pa.Schema:
        path = self.data_files()[0]
        try:
            return pq.read_schema(path)
        except (pa.ArrowInvalid, OSError) as exc:
            raise DatasetError(f"{path}: unreadable parquet: {exc}") from None

    def has_column(self, name: str) -> bool:
        return resolve(name, self.data_schema().names) is not None

    def column(self, name: str) -> np.ndarray:
        """One data column as numpy: (frames,) for scalars, (frames, dims) for vectors. Cached."""
        if name not in self._cache:
            self._cache.update(self.columns([name]))
        return self._cache[name]

    def columns(self, names: list[str]) -> dict[str, np.ndarray]:
        """Several columns in one pass over the files (one projection read per file)."""
        todo = [n for n in names if n not in self._cache]
        if todo:
            present = self.data_schema().names
            stored = {n: resolve(n, present) or n for n in todo}
            table = self.read_table(list(dict.fromkeys(stored.values())))
            for name in todo:
                self._cache[name] = to_numpy(table.column(stored[name]), name)
        return {n: self._cache[n] for n in names}


def to_numpy(column: pa.ChunkedArray, name: str = "") -> np.ndarray:
    """An Arrow column as numpy; list columns of a fixed width become a 2-D array."""
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    kind = arr.type
    if pa.types.is_fixed_size_list(kind):
        values = arr.flatten().to_numpy(zero_copy_only=False)
        return values.reshape(len(arr), kind.list_size)
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        lengths = pc.list_value_length(arr).to_numpy(zero_copy_only=False)
        if len(lengths) and (lengths.min() != lengths.max()):
            raise DatasetError(f"column {name!r}: rows of different lengths ({lengths.min()}..{lengths.max()})")
        width = int(lengths[0]) if len(lengths) else 0
        return arr.flatten().to_numpy(zero_copy_only=False).reshape(len(arr), width)
    if pa.types.is_boolean(kind):
        return arr.to_numpy(zero_copy_only=False).astype(bool)
    return arr.to_numpy(zero_copy_only=False)


def _read_episodes(root: Path, with_stats: bool, only: list[str] | None = None) -> pd.DataFrame:
    files = sorted((root / EPISODES_DIR).rglob("*.parquet"))
    if not files:
        raise DatasetError(f"{root / EPISODES_DIR}: no episodes parquet files")
    copied = _from_scores(root, files[-1], only) if only is not None else None
    if copied is not None:
        return copied
    frames = []
    for path in files:
        try:
            schema = pq.read_schema(path)
            cols = [c for c in schema.names if (with_stats or not c.startswith("stats/")) and
                    (only is None or c in only or c in _ALWAYS)]
            frames.append(pq.read_table(path, columns=cols).to_pandas())
        except (pa.ArrowInvalid, OSError) as exc:
            raise DatasetError(f"{path}: unreadable parquet: {exc}") from None
    episodes = pd.concat(frames, ignore_index=True)
    for key in ("episode_index", "length"):
        if key not in episodes.columns:
            raise DatasetError(f"{root / EPISODES_DIR}: episodes table has no {key!r} column")
    join_scores(episodes, root, only)
    if episodes["episode_index"].duplicated().any():
        dup = episodes.loc[episodes["episode_index"].duplicated(), "episode_index"].tolist()
        raise DatasetError(f"{root / EPISODES_DIR}: episode_index listed twice: {dup[:10]}")
    return episodes.sort_values("episode_index", kind="stable").reset_index(drop=True)


def _from_scores(root: Path, last: Path, only: list[str]) -> pd.DataFrame | None:
    """The columns `only` (and `_ALWAYS`) of the episodes table from the copies the scores file holds, when
    it holds one of each such column the rows have (ours share one schema: the last file's footer says);
    None otherwise. Opens two files, however many episodes files there are."""
    try:
        held = score_names(root)
        names = set(pq.read_schema(last).names)
    except (DatasetError, pa.ArrowInvalid, OSError):
        return None
    if held is None:
        return None
    wanted = [c for c in dict.fromkeys([*_ALWAYS, *only]) if c in names and c != "episode_index"]
    if not all(SCORE_INPUT + c in held for c in wanted):
        return None
    try:
        scores = read_scores(root, ["episode_index", *(SCORE_INPUT + c for c in wanted)])
    except DatasetError:
        return None
    if scores is None:
        return None
    table = scores.rename_columns(["episode_index", *wanted]).to_pandas()
    join_scores(table, root, only)
    return table.sort_values("episode_index", kind="stable").reset_index(drop=True)


_ALWAYS = ("episode_index", "length", "tasks")  # read whatever columns are asked for


def join_scores(episodes: pd.DataFrame, root: Path, only: list[str] | None = None) -> None:
    """Add to the episodes table (in place) the scores file's columns its rows do not hold (`only`: of
    those, the ones named), by episode; nothing when the dataset has no scores file."""
    for name, column in score_columns(root, episodes["episode_index"].to_numpy(), episodes.columns, only).items():
        episodes[name] = column.to_pandas().to_numpy()


def score_columns(root: Path, episode_index: np.ndarray, have: Iterable[str], only: list[str] | None = None
                  ) -> dict[str, pa.ChunkedArray]:
    """The scores file's columns that are not in `have` (nor `SCORE_INPUT` copies; `only`: of those the ones
    named), one row per entry of `episode_index` (null where the file has none): what a reader of the rows
    adds to them ({} without a scores file)."""
    names = score_names(root)
    if names is None:
        return {}
    held = set(have)
    add = [c for c in names if c not in held and not c.startswith(SCORE_INPUT)
           and (only is None or c in only)]
    scores = read_scores(root, ["episode_index", *add])  # the columns added only: the copies are most of it
    if scores is None:
        return {}
    pos = pd.Index(scores.column("episode_index").to_numpy()).get_indexer(np.asarray(episode_index))
    take = pa.array(pos, pa.int64(), mask=pos < 0)
    return {c: scores.column(c).take(take) for c in add}


def score_names(root: Path) -> list[str] | None:
    """The scores file's column names (its footer only), None when the dataset has none."""
    path = root / SCORES_PATH
    if not path.is_file():
        return None
    try:
        return list(pq.read_schema(path).names)
    except (pa.ArrowInvalid, OSError) as exc:
        raise DatasetError(f"{path}: unreadable parquet: {exc}") from None


def read_scores(root: Path, columns: list[str] | None = None) -> pa.Table | None:
    """The scores file of a dataset of ours (`SCORES_PATH`: one row per episode, `episode_index` and the
    curation columns, and what they are computed from under `SCORE_INPUT`), None when it has none (a
    dataset of anyone else's, or of ours converted before it: the curation columns are in its rows).
    `columns`: only those it holds of them."""
    path = root / SCORES_PATH
    if not path.is_file():
        return None
    try:
        if columns is not None:
            have = set(pq.read_schema(path).names)
            columns = [c for c in columns if c in have]
        table = pq.read_table(path, columns=columns)
    except (pa.ArrowInvalid, OSError) as exc:
        raise DatasetError(f"{path}: unreadable parquet: {exc}") from None
    if "episode_index" not in table.column_names:
        raise DatasetError(f"{path}: no episode_index column")
    return table


def _read_tasks(root: Path) -> dict[int, str]:
    path = root / TASKS_PATH
    if not path.is_file():
        return {}
    table = pq.read_table(path).to_pandas()
    if "task_index" not in table.columns:
        raise DatasetError(f"{path}: no task_index column")
    names = table["task"] if "task" in table.columns else table.index
    return {int(i): str(t) for i, t in zip(table["task_index"], names, strict=True)}


@dataclass(frozen=True)
class EpisodeSpans:
    """Where each episode's rows are in the concatenated data: rows [start[i], stop[i])."""

    episode_index: np.ndarray
    start: np.ndarray
    stop: np.ndarray
    order: np.ndarray | None  # row permutation that made episodes contiguous (None: already were)

    @property
    def lengths(self) -> np.ndarray:
        return self.stop - self.start

    def take(self, values: np.ndarray) -> np.ndarray:
        """values re-ordered so every episode's rows are contiguous, in frame order."""
        return values if self.order is None else values[self.order]


def episode_spans(episode_index: np.ndarray, frame_index: np.ndarray | None = None) -> EpisodeSpans:
    """Contiguous row ranges per episode from the data's own episode_index column.

    LeRobot writes episodes contiguously in frame order; if a foreign writer did not, rows are
    stably sorted by (episode_index, frame_index) once and the permutation is kept.
    """
    ep = np.asarray(episode_index)
    order = None
    if len(ep) and (np.any(np.diff(ep) < 0) or (frame_index is not None and not _frames_ascending(ep, frame_index))):
        keys = (frame_index, ep) if frame_index is not None else (ep,)
        order = np.lexsort(keys)
        ep = ep[order]
    if len(ep) == 0:
        empty = np.zeros(0, dtype=np.int64)
        return EpisodeSpans(empty, empty, empty, None)
    change = np.flatnonzero(np.diff(ep)) + 1
    start = np.concatenate(([0], change)).astype(np.int64)
    stop = np.concatenate((change, [len(ep)])).astype(np.int64)
    return EpisodeSpans(ep[start].astype(np.int64), start, stop, order)


def _frames_ascending(ep: np.ndarray, frame_index: np.ndarray) -> bool:
    same = ep[1:] == ep[:-1]
    return bool(np.all(np.diff(frame_index)[same] > 0))


def check_lengths(ds: LeRobotDataset, spans: EpisodeSpans, index: np.ndarray | None = None) -> list[str]:
    """Every disagreement between the episodes table and the data rows, one message each.

    A cross-check that cannot fire is not a check: metadata `length` (and dataset_from/to_index
    where present, against the data's global `index` column) versus the rows actually carrying
    that episode_index, plus the info.json totals.
    """
    problems: list[str] = []
    meta = ds.episodes
    counted = dict(zip(spans.episode_index.tolist(), spans.lengths.tolist(), strict=True))
    firsts = spans.take(index)[spans.start] if index is not None else spans.start
    first_row = dict(zip(spans.episode_index.tolist(), np.asarray(firsts).tolist(), strict=True))
    has_bounds = {"dataset_from_index", "dataset_to_index"} <= set(meta.columns) and spans.order is None
    for row in meta.itertuples(index=False):
        ep = int(row.episode_index)
        declared = int(row.length)
        actual = counted.pop(ep, 0)
        if actual != declared:
            problems.append(f"episode {ep}: metadata length {declared} but {actual} data rows")
            continue
        if has_bounds:
            lo, hi = int(row.dataset_from_index), int(row.dataset_to_index)
            if hi - lo != declared:
                problems.append(f"episode {ep}: dataset_from/to_index [{lo}, {hi}) spans {hi - lo}, length {declared}")
            elif lo != first_row[ep]:
                problems.append(f"episode {ep}: dataset_from_index {lo} but its first row has index {first_row[ep]}")
    for ep, n in sorted(counted.items()):
        problems.append(f"episode {ep}: {n} data rows but no entry in the episodes table")
    total_frames = ds.info.get("total_frames")
    if total_frames is not None and int(total_frames) != int(spans.lengths.sum()):
        problems.append(f"info.json total_frames {total_frames} but {int(spans.lengths.sum())} data rows")
    total_episodes = ds.info.get("total_episodes")
    if total_episodes is not None and int(total_episodes) != len(meta):
        problems.append(f"info.json total_episodes {total_episodes} but {len(meta)} rows in the episodes table")
    return problems
