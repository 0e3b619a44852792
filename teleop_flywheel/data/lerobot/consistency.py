"""Is a LeRobot v3.0 dataset on disk consistent, and what can be repaired without losing data?

`convert` refuses to append to a dataset with any problem here, and `teleop-flywheel doctor`
explains them and, with `--repair`, applies the repairs that lose nothing, each through a commit
(`commit/`: a new version, so a reader never sees a repair half done):

- what an interrupted commit left beside the dataset (a staging directory, a version never
  published, a temporary pointer): remove it (`commit.recover`; the dataset is its last published
  version);
- a pointer that is not the dataset's (a symlink elsewhere), that names a missing version, or a
  versions directory whose pointer was removed, or the journal of an append the commit format before
  versions left half done: no repair, the finding says what is there;
- a data parquet or mp4 no episode refers to (an orphan: left by a crash of an older converter,
  or copied in): link it into `<DATASET>.orphans/` (never deleted) and leave it out of the next
  version;
- info.json totals/splits that disagree with the episodes table: recompute them from the table;
- stats.json missing or unreadable: recompute it from the table's per-episode stats;
- an unreadable episodes table, tasks table or info.json; a referenced file missing, unreadable
  (a parquet without footer) or with other row/frame counts than the table says: no repair, the
  episodes named are lost; re-convert their bags into a new dataset.

Checks read footers and headers only (parquet metadata, mp4 stream headers), never the data.

The seal: a convert checks the dataset before every append, and the full check reads the episodes
table and a header of every data and video file: O(episodes), and O(appends) files opened. So each
convert's commit records, in the version it publishes, the size, mtime and inode of every file the
check reads (`meta/.consistency_seal`, `write_seal`: hard links keep all three, so the files the
commit carries over keep theirs; a closed chunk directory, which commits carry whole: the mtime and
inode of the directory, `_chunk_key`). The version it seals is consistent by construction: the append
was checked before it, and writes only consistent new files. Before the next append, when every
such file is there with the same size, mtime and inode and no other is (`sealed`: one stat per
file), nothing the check reads changed since that commit and the check is not run again; anything
else (a file truncated, replaced, edited, copied in or removed; a dataset copied elsewhere; a commit
that is not a convert's, which carries the old seal over while it replaces files) runs the whole
check. `teleop-flywheel doctor` always runs the whole check. What neither catches is the same as
before: bytes changed inside a file without its size or mtime changing (the check reads headers only).
"""
from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import av
import pandas as pd
import pyarrow.parquet as pq

from teleop_flywheel.core.files import is_replace_temp
from teleop_flywheel.data.errors import CommitError
from teleop_flywheel.data.lerobot import commit, v3_layout

ORPHANS_SUFFIX = ".orphans"
SEAL_PATH = "meta/.consistency_seal"  # no .json: our record of the version's files, not dataset content
SEAL_FORMAT = "teleop_flywheel.consistency_seal/2"
LEGACY_JOURNAL = ".convert-journal.json"  # beside a dataset of the commit format before versions


@dataclass
class Problem:
    detail: str
    repair: str | None = None  # what `--repair` does; None: not repairable
    fix: Callable[[Path], list[str]] | None = None  # writes into the next version's stage; the files it drops
    leftover: bool = False  # beside the dataset, not in it: removed by `commit.recover`, no commit
    layout: bool = False  # the pointer or versions (not repairable here, but nothing in them is lost)

    def to_dict(self) -> dict[str, Any]:
        return {"problem": self.detail, "repair": self.repair}


def _move_aside(root: Path, rel: str, _stage: Path) -> list[str]:
    dest = root.with_name(root.name + ORPHANS_SUFFIX) / rel
    k = 1
    while os.path.lexists(dest):
        dest = dest.with_name(f"{dest.stem}_{k}{dest.suffix}")
        k += 1
    dest.parent.mkdir(parents=True, exist_ok=True)
    os.link(root / rel, dest)
    return [rel]


def _read_table(root: Path, problems: list[Problem], stats: bool = False) -> pd.DataFrame | None:
    """The episodes table; without `stats`, its per-episode stats columns left unread (most of the
    table, and nothing the checks read: a convert checks the dataset before every append)."""
    files = sorted((root / "meta" / "episodes").glob("*/*.parquet"))
    if not files:
        problems.append(Problem(f"{root}: meta/info.json exists but no episodes table (meta/episodes/*/*.parquet)"))
        return None
    frames = []
    for path in files:
        try:
            names = pq.read_schema(path).names
            frames.append(pq.read_table(path, columns=[c for c in names if stats or not c.startswith("stats/")])
                          .to_pandas())
        except Exception as exc:  # noqa: BLE001 - any parse failure is the finding
            problems.append(Problem(f"{path.relative_to(root)}: unreadable episodes table ({exc}); every episode "
                                    "it lists is lost from this dataset"))
            return None
    table = pd.concat(frames, ignore_index=True)
    idx = sorted(int(i) for i in table["episode_index"]) if "episode_index" in table else []
    if idx != list(range(len(table))):
        problems.append(Problem(f"{root}: episodes table episode_index is not 0..{len(table) - 1} exactly once"))
        return None
    return table.sort_values("episode_index").reset_index(drop=True)


def _data_files(root: Path, table: pd.DataFrame, problems: list[Problem]) -> None:
    wanted: dict[str, int] = {}
    cols = ("data/chunk_index", "data/file_index")
    if not set(cols) <= set(table.columns):
        problems.append(Problem("episodes table has no data/chunk_index, data/file_index columns"))
        return
    for ci, fi, n in zip(table[cols[0]], table[cols[1]], table["length"], strict=True):
        rel = v3_layout.DATA_PATH.format(chunk_index=int(ci), file_index=int(fi))
        wanted[rel] = wanted.get(rel, 0) + int(n)
    present = sorted(p.relative_to(root).as_posix() for p in (root / "data").glob("*/*.parquet"))
    _check_files(root, wanted, present, problems, _parquet_rows, "rows")


def _parquet_rows(path: Path) -> int:
    return int(pq.read_metadata(path).num_rows)


def _video_frames(path: Path) -> int:
    with av.open(str(path)) as c:
        return int(c.streams.video[0].frames)


def _check_files(root: Path, wanted: dict[str, int], present: list[str], problems: list[Problem],
                 count: Callable[[Path], int], unit: str) -> None:
    for rel in present:
        if rel not in wanted:
            problems.append(Problem(f"{rel}: no episode refers to it (an orphan: its {unit} are not part of the "
                                    "dataset, but a reader globbing the folder would count them)",
                                    f"move it to {root.name}{ORPHANS_SUFFIX}/{rel}", partial(_move_aside, root, rel)))
    for rel, expected in sorted(wanted.items()):
        path = root / rel
        if not path.is_file():
            problems.append(Problem(f"{rel}: missing, but episodes refer to it; they are lost from this dataset"))
            continue
        try:
            n = count(path)
        except Exception as exc:  # noqa: BLE001 - unreadable is the finding
            problems.append(Problem(f"{rel}: unreadable ({type(exc).__name__}: {exc}); the episodes in it are lost"))
            continue
        if n and n != expected:
            problems.append(Problem(f"{rel}: holds {n} {unit}, the episodes table says {expected}"))


def _videos(root: Path, info: dict[str, Any], table: pd.DataFrame, problems: list[Problem]) -> None:
    for key, feat in info.get("features", {}).items():
        if feat.get("dtype") != "video":
            continue
        wanted: dict[str, int] = {}
        cols = (f"videos/{key}/chunk_index", f"videos/{key}/file_index")
        if not set(cols) <= set(table.columns):
            problems.append(Problem(f"episodes table has no {cols[0]} column for video feature {key}"))
            continue
        for ci, fi, n in zip(table[cols[0]], table[cols[1]], table["length"], strict=True):
            rel = v3_layout.VIDEO_PATH.format(video_key=key, chunk_index=int(ci), file_index=int(fi))
            wanted[rel] = wanted.get(rel, 0) + int(n)
        present = sorted(p.relative_to(root).as_posix() for p in (root / "videos" / key).glob("*/*.mp4"))
        _check_files(root, wanted, present, problems, _video_frames, "frames")


def _totals(root: Path, info: dict[str, Any], table: pd.DataFrame, tasks: list[str], problems: list[Problem]) -> None:
    n, frames = len(table), int(table["length"].sum())
    want = {"total_episodes": n, "total_frames": frames, "total_tasks": len(tasks), "splits": {"train": f"0:{n}"}}
    wrong = {k: v for k, v in want.items() if info.get(k) != v}
    if wrong:
        def fix(stage: Path) -> list[str]:
            fresh = json.loads((root / v3_layout.INFO_PATH).read_text())
            fresh.update(want)
            v3_layout.write_json(stage / v3_layout.INFO_PATH, fresh)
            return []
        said = ", ".join(f"{k} {info.get(k)!r}" for k in wrong)
        problems.append(Problem(f"meta/info.json says {said}; the episodes table has {n} episodes, {frames} frames",
                                "recompute the totals and splits in meta/info.json from the episodes table", fix))
    try:
        json.loads((root / v3_layout.STATS_PATH).read_text())
    except (OSError, ValueError):
        def fix_stats(stage: Path) -> list[str]:
            full = _read_table(root, [], stats=True)
            rows = full.to_dict("records") if full is not None else []
            per = [v3_layout.stats_from_episode_row(r, list(info["features"])) for r in rows]
            v3_layout.write_json(stage / v3_layout.STATS_PATH, v3_layout.stats_to_json(v3_layout.aggregate_stats(per)))
            return []
        problems.append(Problem("meta/stats.json missing or unreadable",
                                "recompute it from the per-episode stats in the episodes table", fix_stats))
    listed = {t for ts in table.get("tasks", pd.Series(dtype=object)) for t in (ts if ts is not None else [])}
    missing = sorted(listed - set(tasks))
    if missing:
        problems.append(Problem(f"meta/tasks.parquet lacks task(s) {missing[:3]} the episodes list"))


def _layout(root: Path) -> list[Problem]:
    """The pointer and versions beside `root` (`commit/`), and what a crash left there."""
    try:
        version = commit.current(root)
        left = commit.pending(root)
    except CommitError as exc:
        return [Problem(str(exc), layout=True)]
    out = [Problem(line, line.rsplit(": ", 1)[-1], leftover=True) for line in left]
    journal = root.with_name(root.name + LEGACY_JOURNAL)
    if os.path.lexists(journal):
        out.append(Problem(f"{journal}: an append interrupted under the commit format before versions, half moved "
                           "into the dataset; finish it with that teleop-flywheel's `doctor --repair`, then run this "
                           "one", layout=True))
    versions = commit.versions_path(root)
    if version is not None and not version.is_dir() and not left:
        out.append(Problem(f"{root}: points to {version.name}, which is not in {versions.name}/ (removed by hand?)",
                           layout=True))
    elif not os.path.lexists(root) and versions.is_dir() and not left:
        out.append(Problem(f"{versions}: versions of a dataset whose pointer {root.name} is gone; "
                           f"`ln -s {versions.name}/vNNNNNN {root.name}` beside them makes one the dataset again",
                           layout=True))
    return out


NAMES = "names"  # a chunk directory's seal entry made from its file names (`_chunk_key`)


def _chunk_key(chunk: Path, by_names: bool) -> list[Any]:
    """A chunk directory carried whole (`commit.carried_chunks`): the mtime and inode of the directory
    it is or resolves to (one stat: a file added, removed or renamed there changes its mtime; a
    rename or RENAME_EXCHANGE of the directory itself changes neither), or, for a directory the sealed
    commit makes (it does not exist yet), the digest of its file names (one listing, once). Not a stat
    of each file: nothing writes a file of a closed chunk; bytes edited in place there are seen by
    `doctor`'s whole check only."""
    if by_names:
        names = sorted(n for n in os.listdir(chunk) if not is_replace_temp(n))
        return [NAMES, hashlib.sha256("\n".join(names).encode()).hexdigest()]
    st = chunk.stat()
    return [st.st_mtime_ns, st.st_ino]


def _checked(root: Path, whole: dict[str, Path | None] | None = None) -> dict[str, list[Any]]:
    """{file: [size, mtime_ns, inode]} of every file `problems` reads or globs for under `root`; a
    chunk directory in `whole`: {dir/: `_chunk_key`} of the directory given there, by its names where
    none is given (the chunk as it is in `root`)."""
    out: dict[str, list[Any]] = {}
    whole = whole or {}
    files: list[Path] = []
    for pattern, names in (("data/*", "*.parquet"), ("videos/*/*", "*.mp4"), ("meta/episodes/*", "*.parquet")):
        for chunk in root.glob(pattern):
            rel = chunk.relative_to(root).as_posix()
            if rel in whole and chunk.is_dir():
                out[rel + "/"] = _chunk_key(whole[rel] or chunk, whole[rel] is None)
            else:
                files += chunk.glob(names)
    for path in [*files, *(root / rel for rel in (v3_layout.INFO_PATH, v3_layout.TASKS_PATH, v3_layout.STATS_PATH))]:
        if path.is_file():
            st = path.stat()
            out[path.relative_to(root).as_posix()] = [st.st_size, st.st_mtime_ns, st.st_ino]
    return out


def write_seal(root: Path, stage: Path) -> None:
    """Seal the version a convert stages in `stage` on top of the dataset at `root`, checked before
    (module docstring): every file the check reads, as the staged version will hold it (staged, or
    the current version's, which the commit hard-links, or a chunk directory it carries whole)."""
    files = _checked(root, commit.carried_chunks(root, stage)) if os.path.lexists(root) else {}
    files.update(_checked(stage))
    v3_layout.write_json(stage / SEAL_PATH, {"format": SEAL_FORMAT, "files": files})


def sealed(root: Path) -> bool:
    """Every file the check reads is as the last convert's commit sealed it, and no other is there."""
    try:
        doc = json.loads((root / SEAL_PATH).read_text())
        whole = {rel.removesuffix("/"): None if key[0] == NAMES else root / rel
                 for rel, key in doc["files"].items() if rel.endswith("/")}
        return bool(doc.get("format") == SEAL_FORMAT and doc.get("files") == _checked(root, whole))
    except (OSError, ValueError, AttributeError, KeyError, IndexError, TypeError):  # not a seal of ours
        return False


def problems(root: Path, trust_seal: bool = False) -> list[Problem]:
    """Every inconsistency of the dataset at `root` (and leftovers beside it), repairable or not.
    `trust_seal` (a convert before its append): none when the dataset is as its last convert sealed it."""
    out = _layout(root)
    if out or not root.exists():
        return out  # the rest is checked once the layout is right
    if trust_seal and sealed(root):
        return out
    if not (root / v3_layout.INFO_PATH).is_file():
        stray = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()
                       and p.relative_to(root).parts[0] in ("data", "videos", "meta"))
        for rel in stray:
            out.append(Problem(f"{rel}: dataset files without meta/info.json (a first convert that crashed)",
                               f"move it to {root.name}{ORPHANS_SUFFIX}/{rel}", partial(_move_aside, root, rel)))
        return out
    try:
        info = json.loads((root / v3_layout.INFO_PATH).read_text())
    except (OSError, ValueError) as exc:
        return [Problem(f"meta/info.json unreadable ({exc})")]
    table = _read_table(root, out)
    if table is None:
        return out
    try:
        tasks_file = root / v3_layout.TASKS_PATH
        tasks = [str(t) for t in pd.read_parquet(tasks_file).index] if tasks_file.exists() else []
    except Exception as exc:  # noqa: BLE001
        return out + [Problem(f"meta/tasks.parquet unreadable ({exc})")]
    _data_files(root, table, out)
    _videos(root, info, table, out)
    _totals(root, info, table, tasks, out)
    return out


def repair(root: Path) -> tuple[list[str], list[Problem]]:
    """Apply every repair that loses nothing, until none is left; (what was done, what remains).
    Leftovers beside the dataset are removed; the repairs of its content are one commit."""
    done: list[str] = []
    for _ in range(4):  # removing leftovers reveals the next layer of checks
        found = problems(root)
        fixable = [p for p in found if p.repair is not None and (p.leftover or p.fix is not None)]
        if not fixable:
            return done, found
        if any(p.leftover for p in fixable):
            commit.recover(root)
        else:
            stage = commit.new_stage(root)
            try:
                drop = [rel for p in fixable if p.fix is not None for rel in p.fix(stage)]
                commit.publish(root, drop=drop)
            finally:
                commit.recover(root)
        done += [f"{p.repair} ({p.detail})" for p in fixable]
    return done, problems(root)
