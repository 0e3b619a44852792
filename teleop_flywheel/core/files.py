"""The two ways the project writes a file, so neither a crash nor a planted symlink can hurt data.

- `create_exclusive`: files that must never be overwritten (bags' metadata, manifests,
  lineage entries, calibration output). Created with O_CREAT|O_EXCL|O_NOFOLLOW: an existing file
  or a symlink at the path is an error, never followed. Written, flushed and fsynced.
- `inside`: every path the engine builds from a name it read (a camera's video, an episode's work
  file) is resolved and compared with its root before anything is written there, so a name that
  got past `core/names.py` still cannot lead a write out of the dataset (docs/security.md).
- `replace_atomic`: files replaced by design (info.json, stats.json, an episodes table). Written
  to a unique temp file (`mkstemp`) in the same directory, fsynced, then `os.replace`d over the
  target: readers see the old or the new file, never half of one, and no predictable temp name
  exists for anyone to plant. A process killed between the two leaves the temp file
  (`.<name>.XXXXXXXX.tmp`); `is_replace_temp` recognises the name, so a dataset's commit never
  carries one into a version and `recover`/`doctor` remove it (`data/lerobot/commit/`).
"""
from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Callable
from pathlib import Path

from teleop_flywheel.core.errors import FileExistsRefused, OutsideRootError


def inside(root: str | os.PathLike[str], path: str | os.PathLike[str], follow_symlinks: bool = True) -> Path:
    """`path` if, resolved (symlinks followed, `..` collapsed), it is `root` or below it; else
    OutsideRootError naming both. Relative paths are taken from `root`. `follow_symlinks=False`
    judges the name alone (`..` collapsed, symlinks kept): for reading a foreign dataset whose
    files may be links into a cache (a Hugging Face snapshot's files point into its blobs)."""
    base = Path(root).resolve() if follow_symlinks else Path(os.path.abspath(root))
    target = (base / path).resolve() if follow_symlinks else Path(os.path.normpath(base / path))
    if target != base and base not in target.parents:
        raise OutsideRootError(f"{path}: outside {root} (resolves to {target}); nothing was read or written there")
    return Path(path) if Path(path).is_absolute() else base / path


def create_exclusive(path: str | os.PathLike[str], data: bytes | str) -> Path:
    """Create `path` with `data`; refuse if anything (file or symlink) is already there."""
    target = Path(path)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    try:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except FileExistsError as exc:
        raise FileExistsRefused(f"{target}: already exists; it is never overwritten (choose another name)") from exc
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        target.unlink(missing_ok=True)
        raise
    return target


_TEMP_SUFFIX = ".tmp"
# `.<target name>.` + mkstemp's 8 random characters (lower-case letters, digits, `_`) + `.tmp`
_REPLACE_TEMP = re.compile(r"\..+\.[a-z0-9_]{8}\.tmp")


def is_replace_temp(name: str) -> bool:
    """Whether a file name is a temp file of `replace_atomic` (one a kill left: never data)."""
    return _REPLACE_TEMP.fullmatch(name) is not None


def replace_atomic(path: str | os.PathLike[str], data: bytes | str, written: Callable[[], None] | None = None) -> Path:
    """Replace `path` with `data` atomically (unique temp file in the same directory + rename).
    `written` is called between the two (the fault-injection hook of the kill tests)."""
    target = Path(path)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=_TEMP_SUFFIX, dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        if written is not None:
            written()
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target
