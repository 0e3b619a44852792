"""Atomic appends to a LeRobot v3.0 dataset: stage, journal, move, roll forward or back.

LeRobot's reader globs `data/*/*.parquet` and `meta/episodes/*/*.parquet`, so a file is part of
the dataset the moment it exists there. An append therefore never writes inside the dataset until
it is complete:

1. every new or replacing file is written under the staging directory `<DATASET>.convert-staging/`
   (beside the dataset, same filesystem), at its path relative to the dataset, and fsynced;
2. the journal `<DATASET>.convert-journal.json` is created exclusively and fsynced: the commit
   marker, listing the new files (never overwriting anything: linked into place, `link` fails on
   an existing name) and the replaced ones (`os.replace`: info.json, stats.json, the tasks and
   episodes tables), info.json last;
3. the files are moved into place, then the journal and the staging directory are removed.

A crash (kill -9, power) before 2 leaves the dataset exactly as it was; the next run (or
`teleop-flywheel doctor --repair`) removes the staging directory: rolled back. After 2 it finishes
the moves: rolled forward. A journal that does not parse was cut while being written, before any
move: rolled back. `recover_all` does this for a dataset and its schema siblings before anything
else; `locked_dataset` keeps two converts off one dataset (flock, released by the kernel on
kill -9).

Fault injection (tests): `TELEOP_FLYWHEEL_FAULT_AT=N` kills this process with SIGKILL at the N-th
write step (`fault`); `TELEOP_FLYWHEEL_FAULT_LOG=FILE` appends every step's name to FILE.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from teleop_flywheel.core.errors import FlywheelError
from teleop_flywheel.core.files import create_exclusive
from teleop_flywheel.data.filelock import locked

JOURNAL_SUFFIX = ".convert-journal.json"
STAGING_SUFFIX = ".convert-staging"
FORMAT = "teleop_flywheel.convert-journal/1"
FAULT_AT = "TELEOP_FLYWHEEL_FAULT_AT"
FAULT_LOG = "TELEOP_FLYWHEEL_FAULT_LOG"
_steps = [0]


class CommitError(FlywheelError, RuntimeError):
    """A journal that cannot be rolled forward (a staged file is gone, a new file's name is taken)."""


def fault(step: str) -> None:
    """A write step happened; the fault-injection hook may kill the process here (tests only)."""
    _steps[0] += 1
    log = os.environ.get(FAULT_LOG)
    if log:
        with open(log, "a", encoding="utf-8") as f:
            f.write(f"{_steps[0]} {step}\n")
    if os.environ.get(FAULT_AT) == str(_steps[0]):
        os.kill(os.getpid(), signal.SIGKILL)


def journal_path(root: Path) -> Path:
    return root.with_name(root.name + JOURNAL_SUFFIX)


def staging_path(root: Path) -> Path:
    return root.with_name(root.name + STAGING_SUFFIX)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(root: Path) -> None:
    """fsync every file and directory below root (what was staged must be on disk before the journal);
    the `.work` directory of temporary videos is not part of it."""
    for dirpath, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d != ".work"]
        for name in files:
            fd = os.open(Path(dirpath) / name, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(Path(dirpath))


def new_stage(root: Path) -> Path:
    """An empty staging directory for `root` (the caller has recovered any earlier one)."""
    stage = staging_path(root)
    stage.mkdir()
    return stage


def write_journal(root: Path, new: list[str], replace: list[str], episodes: list[str]) -> Path:
    """The commit marker: after this returns, the append will happen even if this process dies."""
    fsync_tree(staging_path(root))
    fault("staged")
    doc = {"format": FORMAT, "dataset": str(root), "staging": str(staging_path(root)),
           "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
           "new": new, "replace": replace, "episodes": episodes, "complete": True}
    path = create_exclusive(journal_path(root), json.dumps(doc, indent=1))
    fsync_dir(path.parent)
    fault("journal")
    return path


def _place_new(staged: Path, final: Path) -> None:
    if os.path.lexists(final):
        if staged.exists() and not os.path.samefile(staged, final):
            raise CommitError(f"{final}: exists and is not the staged file; refusing to overwrite it "
                              "(run `teleop-flywheel doctor`)")
    else:
        if not staged.exists():
            raise CommitError(f"{final}: neither in place nor staged ({staged}); the journal cannot be completed")
        final.parent.mkdir(parents=True, exist_ok=True)
        os.link(staged, final)
    staged.unlink(missing_ok=True)


def _apply(root: Path, doc: dict[str, Any]) -> None:
    stage = staging_path(root)
    for rel in doc["new"]:
        _place_new(stage / rel, root / rel)
        fault(f"move {rel}")
    for rel in doc["replace"]:
        staged = stage / rel
        if staged.exists():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            os.replace(staged, root / rel)
        fault(f"move {rel}")
    for d in {(root / rel).parent for rel in doc["new"] + doc["replace"]}:
        fsync_dir(d)


def _read_journal(path: Path) -> dict[str, Any] | None:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or doc.get("complete") is not True:
        return None
    if not all(isinstance(doc.get(k), list) for k in ("new", "replace")):
        return None
    return doc


def finish(root: Path) -> str | None:
    """Roll an interrupted append forward (journal present and whole) or back (staging only, or a
    journal cut while being written); what was done, or None if there was nothing to do."""
    journal, stage = journal_path(root), staging_path(root)
    if os.path.lexists(journal):
        doc = _read_journal(journal)
        if doc is None:
            journal.unlink()
            _remove_stage(stage)
            return f"{root}: rolled back an append whose journal was cut while being written"
        _apply(root, doc)
        journal.unlink()
        fsync_dir(journal.parent)
        fault("journal removed")
        _remove_stage(stage)
        fault("staging removed")
        return f"{root}: rolled forward an interrupted append ({len(doc.get('episodes') or [])} episodes)"
    if os.path.lexists(stage):
        _remove_stage(stage)
        return f"{root}: rolled back an append interrupted before its commit (removed {stage.name})"
    return None


def _remove_stage(stage: Path) -> None:
    if stage.is_symlink():
        raise CommitError(f"{stage}: is a symlink, not our staging directory; remove it yourself")
    if os.path.lexists(stage):
        shutil.rmtree(stage)


def related(out: Path) -> list[Path]:
    """`out` and every schema sibling `out__*` that exists, or has a journal or staging directory."""
    roots = {out}
    if out.parent.is_dir():
        for p in out.parent.iterdir():
            name = p.name
            for suffix in (JOURNAL_SUFFIX, STAGING_SUFFIX):
                name = name.removesuffix(suffix)
            if name.startswith(out.name + "__") or (name == out.name):
                roots.add(out.parent / name)
    return sorted(roots)


def recover_all(out: Path) -> list[str]:
    """`finish` for the dataset and its siblings; the lines say what was rolled forward or back."""
    return [msg for root in related(out) if (msg := finish(root))]


def pending(root: Path) -> list[str]:
    """What `finish` would do, without doing it (doctor's report)."""
    journal, stage = journal_path(root), staging_path(root)
    if os.path.lexists(journal):
        doc = _read_journal(journal)
        if doc is None:
            return [f"{journal.name}: an append's journal cut while being written: roll back (remove it and "
                    f"{stage.name})"]
        return [f"{journal.name}: an append of {len(doc.get('episodes') or [])} episode(s) was interrupted after "
                f"its commit: roll forward (move {len(doc['new']) + len(doc['replace'])} staged file(s) into place)"]
    if os.path.lexists(stage):
        return [f"{stage.name}: an append interrupted before its commit: roll back (remove it)"]
    return []


@contextmanager
def locked_dataset(out: Path, wait: bool = False) -> Iterator[Path]:
    """One convert/doctor at a time per dataset family (the lock file `<DATASET>.lock` beside it).
    `wait`: queue behind the holder (a background ingest) instead of refusing at once (a user's command)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with locked(out, wait=wait, what="another convert or doctor") as lock:
        yield lock
