"""After every append (convert, ingest): the dataset's own validation record, its data card and its
sample weights are current — never stale from the append before.

- `meta/validation/`: every verdict the converter reached on a bag meant for this dataset (one per
  episode id, the latest verdict wins; rejected bags stay in it, with where they were quarantined to),
  so the card tells the rejection story of the whole dataset, not of the last batch; kept in pieces an
  append adds to (`data/validate/dataset_record.py`: its one reader and writer);
- `meta/sample_weights.parquet`: `data/curation/weights.py`'s rule with the parameters the file was last
  written with (defaults for a new one). Normalised weights and ages depend on the whole dataset, so
  every episode is weighed again — but from what it costs to know per episode: whether it holds an
  intervention is kept in the weights file itself, so only the appended episodes' frames are read
  (their own data file, `update_weights`); the times come from the episodes table. The result equals
  `curate`'s weights over the whole dataset, value for value;
- `README.md`: the data card (`data/reports/card.py`) is written whole when the dataset has none (a new
  dataset) or when asked (`card=True`, `teleop-flywheel card`): it audits every frame (dead air, ranges,
  coverage, pressing), a cost linear in the dataset that an append must not pay. After an append to a
  dataset that has our card, the card gets a staleness notice at its top instead (`mark_card_behind`: the
  episodes the dataset holds now, and the command that regenerates it), so no reader takes it for
  current; `card_behind` tells a program. A README.md the card did not write is kept (the caller is told).

They are replaced in the dataset's current version, each through a temporary file and `os.replace`
(a reader sees the old or the new one; the version's other files, and older versions, which share
files by hard links, are untouched), not by a commit (`data/lerobot/commit/`): they are derived
from the episodes table, and LeRobot reads none of them.
"""
from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from teleop_flywheel.core.files import replace_atomic
from teleop_flywheel.data.curation.weights import (
    WEIGHTS_PATH,
    WeightRule,
    read_weight_table,
    sample_weights,
    write_weight_columns,
)
from teleop_flywheel.data.errors import DatasetError
from teleop_flywheel.data.lerobot import v3_layout
from teleop_flywheel.data.lerobot.commit import fault
from teleop_flywheel.data.lerobot.dataset import LeRobotDataset, to_numpy
from teleop_flywheel.data.lerobot.episode_table import (
    COLUMNS,
    ID_COLUMNS,
    META_JSON_COLUMNS,
    columns_for,
    table_ids,
    table_records,
    table_times,
)
from teleop_flywheel.data.lerobot.flywheel_schema import resolve
from teleop_flywheel.data.reports.card import MARKER, write_card
from teleop_flywheel.data.validate.dataset_record import RECORD_DIR, Record, has_record, write_record
from teleop_flywheel.data.validate.validator import EpisodeReport


def recorded_ids(root: Path, record: Record | None = None) -> set[str]:
    """Episode ids whose verdict the dataset's record (`record`, when read already) holds (an unreadable
    record: none)."""
    try:
        rec = Record.read(root) if record is None else record
    except DatasetError:
        return set()
    return {i for i in rec.ids if i}


def stale(root: Path) -> bool:
    """The dataset has episodes but its validation record, card or weights are missing or behind them
    (a crash between an append and its refresh)."""
    info_path = root / "meta" / "info.json"
    if not info_path.is_file():
        return False
    try:
        total = int(json.loads(info_path.read_text())["total_episodes"])
        weights, _ = read_weight_table(root)
    except (DatasetError, OSError, ValueError, KeyError, pa.ArrowInvalid):
        return True
    return weights.num_rows != total or not has_record(root) or not (root / "README.md").is_file()


def update_record(root: Path, reports: Iterable[EpisodeReport | dict[str, Any]], record: Record | None = None
                  ) -> Path:
    """Merge verdicts into the dataset's validation record (`dataset_record.write_record`; each file it
    writes a write step of the kill tests). `record`: the record as the caller read it already."""
    return write_record(root, reports, record, step=fault)


BEHIND_BEGIN = "<!-- card behind the dataset: begin (removed when the card is regenerated) -->"
BEHIND_END = "<!-- card behind the dataset: end -->"


def card_behind(root: Path) -> bool:
    """The dataset's card (ours) carries the notice that episodes were appended after it was written."""
    path = root / "README.md"
    return path.is_file() and BEHIND_BEGIN in path.read_text(errors="replace")


def mark_card_behind(root: Path, total: int) -> bool:
    """Put (or update) the staleness notice at the top of our card; False when there is no card of ours.
    Rewrites the card's text only (no frame is read)."""
    path = root / "README.md"
    text = path.read_text(errors="replace") if path.is_file() else ""
    if MARKER not in text:
        return False
    if BEHIND_BEGIN in text and BEHIND_END in text:
        head, rest = text.split(BEHIND_BEGIN, 1)
        text = head.rstrip("\n") + "\n" + rest.split(BEHIND_END, 1)[1].lstrip("\n")
    notice = (f"> **This card is behind its dataset**: episodes were appended after it was written; the dataset "
              f"now holds {total} episodes. The counts, rejections, coverage and pressing below describe the "
              f"dataset before them. The validation record (`{RECORD_DIR}/`) and the sample weights "
              f"(`{WEIGHTS_PATH}`) are current. Regenerate it: `teleop-flywheel card {root.name}`.")
    text = text.replace(MARKER, f"{MARKER}\n{BEHIND_BEGIN}\n{notice}\n{BEHIND_END}\n", 1)
    replace_atomic(path, text, written=lambda: fault("temp README.md"))
    return True


def _old_weights(root: Path) -> tuple[pa.Table | None, WeightRule]:
    """The weights file's table and the rule it was last written with (None and the defaults for none, or
    an unreadable one: written again with the defaults). Read once, as columns: no object per episode."""
    rule = WeightRule()
    if not (root / WEIGHTS_PATH).is_file():
        return None, rule
    try:
        table, old = read_weight_table(root)
        return table, WeightRule(float(old.get("intervention_weight", rule.intervention_weight)),
                                 float(old.get("half_life_days", rule.half_life_days)))
    except (DatasetError, OSError, ValueError, pa.ArrowInvalid):
        return None, rule


def _known_flags(table: pa.Table | None, index: np.ndarray, ids: list[str | None]) -> np.ndarray:
    """`has_intervention` of the weights file's `table` for the first episodes of (`index`, `ids`), as far as
    the file holds the same episodes in the same order (an append's: all but the new ones); none if it is
    absent, unreadable or holds others. Compared as columns: no Python object per row of the file."""
    if table is None:
        return np.zeros(0, dtype=bool)
    try:
        n = table.num_rows
        if n > len(index) or not np.array_equal(table.column("episode_index").to_numpy(), index[:n]) or \
                table.column("episode_id").to_pylist() != ids[:n]:
            return np.zeros(0, dtype=bool)
        return np.asarray(table.column("has_intervention").to_numpy(zero_copy_only=False), dtype=bool)
    except (DatasetError, OSError, ValueError, KeyError, pa.ArrowInvalid):
        return np.zeros(0, dtype=bool)


def _read_flags(ds: LeRobotDataset, episodes: list[int]) -> tuple[dict[int, bool], int]:
    """{episode: any frame flagged `intervention`} of `episodes`, read from their own data files only
    (the episodes table says which); and how many frames were read."""
    column = resolve("intervention", ds.data_schema().names) or "intervention"
    table = ds.episodes.set_index("episode_index", drop=False)
    files: dict[tuple[int, int], list[int]] = {}
    for e in episodes:
        key = (int(table.at[e, "data/chunk_index"]), int(table.at[e, "data/file_index"]))
        files.setdefault(key, []).append(e)
    flags: dict[int, bool] = {}
    frames = 0
    for (chunk, file), eps in sorted(files.items()):
        path = ds.files / v3_layout.DATA_PATH.format(chunk_index=chunk, file_index=file)
        try:
            part = pq.read_table(path, columns=["episode_index", column], filters=[("episode_index", "in", eps)])
        except (OSError, ValueError) as exc:
            raise DatasetError(f"{path}: unreadable parquet: {exc}") from None
        frames += part.num_rows
        ep = part.column("episode_index").to_numpy()
        values = to_numpy(part.column(column), column).astype(bool)
        if values.ndim > 1:
            values = np.asarray(values.any(axis=1))
        flagged = set(np.unique(ep[values]).tolist())  # one pass over the frames, not one per episode
        flags.update({e: e in flagged for e in eps})
    return flags, frames


# What `update_weights` reads of the episodes table (`table_times`, `table_ids`, `_read_flags`): with the
# data's intervention column, `LeRobotDataset.open(root, episode_columns=FLAGGED_COLUMNS)` is enough for it
# (ours: read from the scores file's copies, no episodes file opened); else the metadata's takeovers too
FLAGGED_COLUMNS = [*ID_COLUMNS, *META_JSON_COLUMNS, *COLUMNS["recorded_wall_ns"], "data/chunk_index",
                   "data/file_index"]
WEIGHT_COLUMNS = [*FLAGGED_COLUMNS, *COLUMNS["interventions"], *COLUMNS["triggers"]]


def update_weights(ds: LeRobotDataset) -> tuple[Path, int]:
    """Write the sample weights of every episode (`curate`'s, value for value), reading the frames only of
    the episodes the weights file does not hold yet; (its path, frames read)."""
    old, rule = _old_weights(ds.root)
    flagged = ds.has_column("intervention")  # else the metadata's takeovers say which episodes had one
    fields = ("recorded_wall_ns",) if flagged else ("recorded_wall_ns", "interventions", "triggers")
    table = ds.episodes[columns_for(ds.episodes.columns, *fields)]
    frames = 0
    if flagged:  # what a weight needs per row as columns: no record per row (`table_times`)
        order = np.argsort(table["episode_index"].to_numpy(), kind="stable")
        table = table.iloc[order]
        index = table["episode_index"].to_numpy(np.int64)
        ids = table_ids(table)

        def tasks() -> list[list[str]]:  # only for rows without a time in the column: rare, a list per row
            every = ds.episode_tasks()
            return [every[i] for i in order]

        times = table_times(table, tasks, ds.fps)
        known = _known_flags(old, index, ids)
        todo = index[len(known):].tolist()
        read, frames = _read_flags(ds, todo) if todo else ({}, 0)
        has_int = np.concatenate([known, np.array([read[e] for e in todo], dtype=bool)])
    else:  # `weights.episode_has_intervention`'s fallback: the episode metadata
        recs = sorted(table_records(table, ds.episode_tasks(), ds.fps), key=lambda r: r.episode_index)
        index, ids, times = [r.episode_index for r in recs], [r.episode_id for r in recs], \
            [r.recorded_wall_ns for r in recs]
        has_int = np.array([bool(r.num_interventions) for r in recs], dtype=bool)
    weights, ages = sample_weights(has_int, times, rule)
    return write_weight_columns(ds.root / WEIGHTS_PATH, index, ids, weights, has_int, ages, rule), frames



def refresh(root: Path, reports: Iterable[EpisodeReport | dict[str, Any]] = (), card: bool = False,
            record: Record | None = None) -> list[str]:
    """Update the record with `reports`, the weights, and the card (whole with `card` or when the dataset
    has none, else marked behind); what was done, one line each. `record`: the record as read already."""
    done = [f"validation record {update_record(root, reports, record)}"]
    fault(f"refresh {RECORD_DIR}")
    ds = LeRobotDataset.open(root, episode_columns=FLAGGED_COLUMNS)
    if not ds.has_column("intervention"):  # the weights read the metadata's takeovers instead
        ds = LeRobotDataset.open(root, episode_columns=WEIGHT_COLUMNS)
    path, frames = update_weights(ds)
    fault(f"refresh {WEIGHTS_PATH}")
    done.append(f"sample weights {path} ({frames} frames read)")
    readme = root / "README.md"
    try:
        if not card and readme.is_file() and mark_card_behind(root, len(ds.episodes)):
            done.append(f"data card {readme} marked behind the dataset (regenerate: teleop-flywheel card)")
        else:
            done.append(f"data card {write_card(root)}")
        fault("refresh README.md")
    except DatasetError as exc:
        done.append(f"data card not written: {exc}")
    return done
