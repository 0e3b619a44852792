"""An advisory lock beside a file or dataset, so two processes never read-modify-replace it at once.

`locked(path)` holds `flock(LOCK_EX)` on `<path>.lock` (opened with O_NOFOLLOW: a planted symlink
there is refused, never followed). The kernel drops the lock when the process dies, even by
`kill -9`, so a crash never leaves a stale lock; the empty lock file itself stays (harmless).
"""
from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from teleop_flywheel.data.errors import LockError


def lock_path(path: str | os.PathLike[str]) -> Path:
    p = Path(path)
    return p.with_name(p.name + ".lock")


@contextmanager
def locked(path: str | os.PathLike[str], wait: bool = True, what: str = "") -> Iterator[Path]:
    """Hold the exclusive lock of `path` (`<path>.lock`) for the `with` block."""
    lock = lock_path(path)
    lock.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise LockError(f"{lock}: cannot open the lock file: {exc.strerror or exc}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            raise LockError(f"{path}: in use by another process{' (' + what + ')' if what else ''} "
                            f"(lock {lock}); try again when it has finished") from None
        yield lock
    finally:
        os.close(fd)
