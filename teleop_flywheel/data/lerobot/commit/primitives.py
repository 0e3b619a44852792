"""The layout beside a dataset (its pointer, versions, staging directory and leases) and the write primitives
every commit step uses: the fault-injection hook, fsync, RENAME_EXCHANGE."""
from __future__ import annotations

import ctypes
import errno
import functools
import os
import re
import signal
from pathlib import Path
from typing import Any

from teleop_flywheel.data.errors import CommitError

VERSIONS_SUFFIX = ".versions"
STAGING = ".staging"
NO_EXCHANGE = "TELEOP_FLYWHEEL_NO_EXCHANGE"  # set: upgrade as on a filesystem without RENAME_EXCHANGE (tests)
FAULT_AT = "TELEOP_FLYWHEEL_FAULT_AT"
FAULT_LOG = "TELEOP_FLYWHEEL_FAULT_LOG"
LEASE_SUFFIX = ".lease"
_VERSION = re.compile(r"^v(\d{6})$")
_WORK = ".work"  # temporary videos of a convert, inside the staging directory: never part of a version
_steps = [0]


def fault(step: str) -> None:
    """A write step happened; the fault-injection hook may kill the process here (tests only)."""
    _steps[0] += 1
    log = os.environ.get(FAULT_LOG)
    if log:
        with open(log, "a", encoding="utf-8") as f:
            f.write(f"{_steps[0]} {step}\n")
    if os.environ.get(FAULT_AT) == str(_steps[0]):
        os.kill(os.getpid(), signal.SIGKILL)


def versions_path(root: Path) -> Path:
    return root.with_name(root.name + VERSIONS_SUFFIX)


def staging_path(root: Path) -> Path:
    return versions_path(root) / STAGING


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(root: Path, files: bool = True) -> None:
    """fsync every file (unless not `files`) and directory below root (what was staged must be on
    disk before it is published); the `.work` directory of temporary videos is not part of it."""
    for dirpath, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if d != _WORK]
        for name in names if files else ():
            fd = os.open(Path(dirpath) / name, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(Path(dirpath))


def _number(name: str) -> int | None:
    m = _VERSION.match(name)
    return int(m.group(1)) if m else None


def current(root: Path) -> Path | None:
    """The version directory `root` points to; None when `root` is a plain directory or absent.
    A symlink that is not our pointer (to anything but `<root>.versions/vNNNNNN`) is refused."""
    if not root.is_symlink():
        return None
    target = os.readlink(root)
    parts = Path(target).parts
    if len(parts) != 2 or parts[0] != root.name + VERSIONS_SUFFIX or _number(parts[1]) is None:
        raise CommitError(f"{root}: a symlink to {target}, not to a version of this dataset "
                          f"({root.name}{VERSIONS_SUFFIX}/vNNNNNN); give the directory it points to")
    return versions_path(root) / parts[1]


def lease_path(version: Path) -> Path:
    """The lease file of a version directory: readers hold it shared, the collector exclusive."""
    return version.with_name(version.name + LEASE_SUFFIX)


def _make_lease(version: Path) -> None:
    """The lease file of a version about to be published (so readers that cannot create files lease it)."""
    os.close(os.open(lease_path(version), os.O_WRONLY | os.O_CREAT, 0o644))


def _versions(root: Path) -> dict[int, Path]:
    vdir = versions_path(root)
    if not vdir.is_dir() or vdir.is_symlink():
        return {}
    return {n: p for p in vdir.iterdir() if (n := _number(p.name)) is not None}


def can_exchange(folder: Path) -> bool:
    """Whether the filesystem of `folder` (a staging directory) swaps names by RENAME_EXCHANGE (`_exchange`)."""
    a, b = folder / ".exchange-probe-a", folder / ".exchange-probe-b"
    for p in (a, b):
        if os.path.lexists(p):
            p.unlink()
        os.symlink(p.name, p)
    try:
        return _exchange(a, b)
    finally:
        a.unlink()
        b.unlink()


def _previous(root: Path, version: Path) -> Path | None:
    """The version before `version` (kept as long as `version` is current: `collect`), if any."""
    n = _number(version.name)
    older = [k for k in _versions(root) if n is not None and k < n]
    return versions_path(root) / f"v{max(older):06d}" if older else None


@functools.cache
def _renameat2() -> Any:
    """libc's renameat2, looked up once (a commit exchanges once per closed chunk); None without it."""
    try:
        return ctypes.CDLL(None, use_errno=True).renameat2
    except AttributeError:
        return None


def _exchange(a: Path, b: Path) -> bool:
    """Swap the names `a` and `b` atomically (renameat2 RENAME_EXCHANGE); False where unsupported
    (or where `NO_EXCHANGE` is set: the tests take the path of NFS and CIFS that way)."""
    fn = _renameat2()
    if os.environ.get(NO_EXCHANGE) or fn is None:
        return False
    at_fdcwd, rename_exchange = -100, 2
    if fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP):
        return False
    raise OSError(err, os.strerror(err), str(a), None, str(b))


def _pointer_target(root: Path, version: Path) -> str:
    return f"{root.name}{VERSIONS_SUFFIX}/{version.name}"


def _temp_pointer(root: Path, target: str) -> Path:
    tmp = root.with_name(f".{root.name}.pointer-{os.getpid()}")
    if os.path.lexists(tmp):
        tmp.unlink()
    os.symlink(target, tmp)
    return tmp
