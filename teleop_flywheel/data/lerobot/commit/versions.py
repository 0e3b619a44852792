"""Versions: a commit staged and published by one rename of the pointer, what readers resolve and lease,
and the collection of old versions no reader leases."""
from __future__ import annotations

import errno
import fcntl
import os
import shutil
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from teleop_flywheel.data.errors import CommitError
from teleop_flywheel.data.lerobot.commit.plain_upgrade import _upgrade, _upgrade_aside
from teleop_flywheel.data.lerobot.commit.primitives import (
    _WORK,
    _make_lease,
    _number,
    _pointer_target,
    _previous,
    _temp_pointer,
    _versions,
    can_exchange,
    current,
    fault,
    fsync_dir,
    fsync_tree,
    lease_path,
    staging_path,
    versions_path,
)
from teleop_flywheel.data.lerobot.commit.store import (
    SHARED,
    _link_tree,
    _Sharing,
    _swap,
    _unshared,
)

KEEP_S = 600.0  # an old version is kept this long after it stopped being current (readers without a lease)


def snapshot(root: str | os.PathLike[str]) -> Path:
    """The directory a reader should read `root` from: the version it points to now (a plain
    directory, or a symlink that is not a pointer of ours: itself). Everything read below it is one
    version, whatever commits follow."""
    path = Path(root)
    if _upgrade_aside(path) is not None:  # an upgrade killed between its renames: v000000 holds the files
        return versions_path(path) / "v000000"
    try:
        version = current(path)
    except CommitError:
        return path  # read as it is; writers refuse it
    return version if version is not None else path


def _open_lease(path: Path) -> int | None:
    """A descriptor of the lease file (created if missing and we may); None if it cannot be had
    (a dataset we may not write to, published before leases: nothing can collect it under us)."""
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        if exc.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
            raise
    try:
        return os.open(path, os.O_RDONLY)  # flock needs no write access
    except FileNotFoundError:
        return None


@contextmanager
def pinned(root: str | os.PathLike[str]) -> Iterator[Path]:
    """The directory to read `root` from (as `snapshot`), its version leased until the block ends:
    not collected however long the block lasts (package docstring). Give it to LeRobot as `root=`."""
    path = Path(root)
    while True:
        version = snapshot(path)
        if version == path:  # not versioned: nothing collects it
            yield version
            return
        fd = _open_lease(lease_path(version))
        if fd is None:
            yield version
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)  # the collector holds it exclusive only while removing the version
            held = os.path.exists(lease_path(version)) and \
                os.fstat(fd).st_ino == os.stat(lease_path(version)).st_ino
            if held and (version.is_dir() or snapshot(path) == version):  # a version gone by hand: the reader says so
                yield version
                return
        finally:
            os.close(fd)  # closing the last descriptor releases the lease
        # collected between resolving the pointer and taking the lease: the pointer names a newer version


def new_stage(root: Path) -> Path:
    """An empty staging directory for the next version of `root` (the caller, under the lock, has
    run `recover`); a plain-directory dataset is upgraded first."""
    if versions_path(root).is_symlink():
        raise CommitError(f"{versions_path(root)}: a symlink, not this dataset's versions; nothing is written through "
                          "it (remove it)")
    if not os.path.lexists(root) and _versions(root):
        raise CommitError(f"{versions_path(root)}: versions of a dataset whose pointer {root.name} is gone; make "
                          f"one the dataset again (`ln -s {versions_path(root).name}/vNNNNNN {root.name}`) or move "
                          "them away")
    if root.is_dir() and not root.is_symlink():
        _upgrade(root)
    current(root)  # a symlink we did not make: refused before any work
    stage = staging_path(root)
    stage.parent.mkdir(exist_ok=True)
    stage.mkdir()
    return stage


def publish(root: Path, new: Iterable[str] = (), drop: Iterable[str] = ()) -> Path:
    """Make what `new_stage` holds the next version of `root` and point `root` to it (package
    docstring); `new` are files that must not exist yet, `drop` files of the current version left
    out. Returns the new version's directory."""
    stage = staging_path(root)
    base = current(root)
    if base is None and os.path.lexists(root):
        raise CommitError(f"{root}: appeared while the commit was staged; nothing was changed")
    if base is not None:
        taken = [rel for rel in new if os.path.lexists(base / rel)]
        if taken:
            raise CommitError(f"{root / taken[0]}: exists already; a commit never overwrites a file it adds "
                              "(run `teleop-flywheel doctor`)")
    shutil.rmtree(stage / _WORK, ignore_errors=True)
    fsync_tree(stage)
    number = max(_versions(root), default=-1) + 1
    if base is not None:
        entry = versions_path(root) / SHARED / f"v{number:06d}"
        shutil.rmtree(entry, ignore_errors=True)  # a killed commit's, never published: no version links it
        sharing = _Sharing(versions_path(root), entry.name, _previous(root, base), can_exchange(stage))
        _link_tree(base, stage, set(drop), sharing)
        fsync_tree(stage, files=False)  # the linked files are on disk already: their new names are not
        if entry.is_dir():  # the store's new directories: on disk before a version links them
            fsync_tree(entry, files=False)
            fsync_dir(entry.parent)
        _swap(stage, base, sharing.swaps, "exchanged")  # after the walks: a directory taken is not walked
    fault("staged")
    if base is None:  # a new dataset: the pointer first (no dataset until it resolves), then its version
        version = versions_path(root) / "v000000"
        _make_lease(version)
        os.symlink(_pointer_target(root, version), root)  # fails if anything appeared there
        fsync_dir(root.parent)
        fault("pointer made")
        os.rename(stage, version)
        fsync_dir(version.parent)
        fault("published")
        return version
    version = versions_path(root) / f"v{number:06d}"
    _make_lease(version)
    os.rename(stage, version)
    fsync_dir(version.parent)
    fault(f"version {version.name}")
    os.replace(_temp_pointer(root, _pointer_target(root, version)), root)
    fsync_dir(root.parent)
    fault("published")
    collect(root)
    return version


def collect(root: Path, now: float | None = None, keep_s: float | None = None) -> list[Path]:
    """Remove versions older than the previous one that stopped being current `keep_s` (`KEEP_S`)
    ago and that no reader leases; the versions removed."""
    cur = current(root)
    have = _versions(root)
    if cur is None or _number(cur.name) not in have:
        return []
    n = _number(cur.name)
    assert n is not None
    older = sorted(k for k in have if k < n)
    now = time.time() if now is None else now
    keep_s = KEEP_S if keep_s is None else keep_s
    removed = []
    for k in older[:-1]:  # the previous version is always kept
        successor = min(j for j in have if j > k)
        if now - os.lstat(have[successor]).st_ctime >= keep_s and _remove_unleased(have[k]):
            removed.append(have[k])
    if removed:
        for entry in _unshared(root):  # chunk directories only the removed versions linked
            shutil.rmtree(entry)
    return removed


def _remove_unleased(version: Path) -> bool:
    """Remove `version` and its lease file unless a reader holds the lease; whether it was removed."""
    lease = lease_path(version)
    fd = os.open(lease, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        shutil.rmtree(version)
        lease.unlink()  # under the lock: a reader that opened it sees it gone and resolves the pointer again
        return True
    finally:
        os.close(fd)
