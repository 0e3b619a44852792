"""Atomic commits to a LeRobot v3.0 dataset: versions published by one rename of a pointer.

LeRobot's reader globs `data/*/*.parquet` and `meta/episodes/*/*.parquet`, so a file is part of
the dataset the moment it is there, and it reads info.json, the tables and the data as separate
files. A commit therefore never changes a directory a reader may be reading. As table formats such
as Delta Lake and Iceberg commit, every change is a new version, published by one atomic rename:

    DATASET                  -> DATASET.versions/v000007   (a relative symlink: the pointer)
    DATASET.versions/v000006/  the previous version
    DATASET.versions/v000007/  the current one: meta/, data/, videos/, README.md ...

`DATASET` stays the path users give LeRobot as `root=`; it always names one complete version.
A commit (under the dataset's lock, `locked_dataset`):

1. `new_stage`: an empty staging directory `DATASET.versions/.staging/`; every new or replacing
   file is written there at its path relative to the dataset (the current version is only read);
2. `publish`: each file of the current version not written there (unchanged) is hard-linked into
   it, except the ones the commit drops; a new file must not exist in the current version (never
   overwritten); the written files and every directory are fsynced, the staging directory renamed
   to the next version `vNNNNNN`, and the pointer replaced: a symlink made under a temporary name,
   `os.replace`d onto `DATASET` (one rename), the parent directory fsynced. Cost: one hard link per
   file, no copy, but for closed chunks (below). A new dataset's
   first commit makes the pointer first (dangling: still no dataset), then renames the staging
   directory to `v000000`: the dataset appears whole.

Closed chunks: one-at-a-time ingests add a data parquet and an mp4 per camera each (10,000 ingests:
20,000 files with one camera), and linking every file into every version cost 0.31 s of CPU per
commit at 20,000. A chunk directory of `data/` or `videos/<key>/` with a later chunk beside it
(here or staged) is closed: appends write only in the last one. The first commit after it closes
links its files once into the shared store `DATASET.versions/.shared/vNNNNNN/<chunk path>` (named
after that commit's version); from then on the CURRENT version holds the chunk as a real directory
of the same files (the store entry's twin), and each commit moves that directory into its new
version with one `renameat2(RENAME_EXCHANGE)` against a relative symlink to the store entry it
staged in its place (the same text resolves from every version): the version it leaves behind gets
the symlink, the new one the directory, and no published version lacks the chunk at any moment. A
commit's links are so bounded by the open chunk (`chunks_size`, 1,000 files a kind), whatever the
dataset holds. Which entry a directory twins is known without listing it: the previous version's
symlink at that path names the entry, and the entry records the inode of its twin beside it
(`<chunk>.twin`, a symlink whose text is the inode: nothing is added inside a chunk directory,
which readers list); a directory of a version's own (a commit staged or dropped a file in it) has
another inode and is linked into a new entry once. A chunk symlink to anything but the store is
refused. Store entries no published version links (their versions collected, or a commit killed
between sharing and publishing) are removed by `collect` and `recover`; a commit killed after
taking directories from the current version leaves it symlinks (the same files): `recover` gives
the directories back first (`_swap_back`). So the current version is symlink-free, and an upload of
`DATASET` (huggingface_hub's `upload_folder`, so `huggingface-cli upload` and LeRobot's
`push_to_hub`, list it with Python's recursive glob, which skips directory symlinks) holds every
file. Where the filesystem has no RENAME_EXCHANGE (NFS, CIFS; `TELEOP_FLYWHEEL_NO_EXCHANGE=1`) every
later version, the current one too, carries the symlink instead (one `symlink` call): such an upload
would leave closed chunks out, so `upload_note` says to copy with `cp -rL` first (docs/convert.md).
A dataset whose current version carries symlinks (an older teleop-flywheel's, or moved from such a
filesystem) gets directories again at its next commit (one link per file, once).

A file is never written in place once it is in a version: versions share files by hard links,
and replacing one is writing a new file under another version's directory. So a reader that
resolves the pointer once (`snapshot`: our `LeRobotDataset.open`) sees the old version or the new
one, never a mix. A reader that opens `DATASET/...` path by path (LeRobot's loader given
`root=DATASET`) gets each file whole from a published version, but a commit landing between two
of its opens (its start-up reads info.json, the tables, then globs the data) gives it files of two
adjacent versions: seen in `test/data/lerobot/test_commit.py`, info.json and the episodes table
saying 5 episodes beside data files holding 6. Given the version itself (`pinned`) it reads one.

Reader leases: `pinned(DATASET)` resolves the pointer once and holds a shared `flock` on the
version's lease file `DATASET.versions/vNNNNNN.lease` until the block ends; the kernel releases it
when the process exits, however it dies, so a crashed reader never leaks a lease. `train`,
`manifest materialize` and the loader benchmark give LeRobot the pinned version folder this way.

Old versions: after a commit, a version older than the previous one is removed once it has not
been current for `KEEP_S` seconds (the previous version is always kept) and no reader leases it:
the collector takes the lease file's exclusive lock without waiting, and skips the version when a
reader holds it (a later commit collects it). A reader of `snapshot` (no lease) that outlives
`KEEP_S` keeps the files it opened (hard links: the data stays until closed); files it had not
opened yet are gone.

A crash (kill -9, power, full disk) before the pointer's rename leaves the dataset exactly as it
was (the old version); after it, the new version is whole. What a crash leaves beside the dataset
(the staging directory, a renamed version never published, a temporary pointer, an upgrade's old
directory, a new dataset's dangling pointer, the lease file of a version that is gone) or in it (a
`replace_atomic` temp file `.<name>.XXXXXXXX.tmp` of a derived file replaced in place, such as
`meta/validation/record.json`: never hard-linked into a next version) is never read by anyone;
`recover` removes it (every writer runs it first under the lock; `teleop-flywheel
doctor` reports it and `--repair` removes it). No journal, nothing to roll forward.

A dataset written before versions (a plain directory) is upgraded by the first commit: its files
are hard-linked into `v000000`, then the directory and a pointer to `v000000` swap names in one
`renameat2(RENAME_EXCHANGE)`, so a reader sees the plain directory or the same files through the
pointer. Where the filesystem has no RENAME_EXCHANGE (NFS, CIFS) the directory is renamed aside to
`DATASET.versions/.plain` and the pointer made in its place: between the two `DATASET` does not
exist. `snapshot` (and so `pinned` and `LeRobotDataset.open`) then reads `v000000`, the same files,
whole on disk before the directory moved; a process given the bare path (LeRobot's loader) fails
with "no such dataset" for those microseconds, never sees a mix. A kill there is completed forward
by the next writer's `recover` (or `doctor --repair`): the pointer is made, the directory removed.
`TELEOP_FLYWHEEL_NO_EXCHANGE=1` takes that path on any filesystem (the kill tests run both).

Fault injection (tests): `TELEOP_FLYWHEEL_FAULT_AT=N` kills this process with SIGKILL at the N-th
write step (`fault`); `TELEOP_FLYWHEEL_FAULT_LOG=FILE` appends every step's name to FILE.
"""
from __future__ import annotations

import ctypes
import errno
import fcntl
import functools
import os
import re
import shutil
import signal
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from teleop_flywheel.core.errors import UsageError
from teleop_flywheel.core.files import is_replace_temp
from teleop_flywheel.data.errors import CommitError
from teleop_flywheel.data.filelock import locked

VERSIONS_SUFFIX = ".versions"
STAGING = ".staging"
UPGRADE = ".upgrade"
PLAIN = ".plain"  # an upgrade's plain directory, moved aside where RENAME_EXCHANGE is missing
NO_EXCHANGE = "TELEOP_FLYWHEEL_NO_EXCHANGE"  # set: upgrade as on a filesystem without RENAME_EXCHANGE (tests)
FAULT_AT = "TELEOP_FLYWHEEL_FAULT_AT"
FAULT_LOG = "TELEOP_FLYWHEEL_FAULT_LOG"
KEEP_S = 600.0  # an old version is kept this long after it stopped being current (readers without a lease)
LEASE_SUFFIX = ".lease"
_VERSION = re.compile(r"^v(\d{6})$")
_CHUNK = re.compile(r"^chunk-\d{3,}$")
SHARED = ".shared"  # closed chunk directories, each linked once and carried by every later version whole
TWIN = ".twin"  # beside a store entry: the inode of the version directory holding its files (`_record_twin`)
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


def lease_path(version: Path) -> Path:
    """The lease file of a version directory: readers hold it shared, the collector exclusive."""
    return version.with_name(version.name + LEASE_SUFFIX)


def _make_lease(version: Path) -> None:
    """The lease file of a version about to be published (so readers that cannot create files lease it)."""
    os.close(os.open(lease_path(version), os.O_WRONLY | os.O_CREAT, 0o644))


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
    not collected however long the block lasts (module docstring). Give it to LeRobot as `root=`."""
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


def _versions(root: Path) -> dict[int, Path]:
    vdir = versions_path(root)
    if not vdir.is_dir() or vdir.is_symlink():
        return {}
    return {n: p for p in vdir.iterdir() if (n := _number(p.name)) is not None}


def _link_tree(src: Path, dst: Path, skip: set[str], share: _Sharing | None = None) -> None:
    """Hard-link every file below `src` into `dst` at its relative path, but those in `skip`, temp
    files of `replace_atomic` (`core.files.is_replace_temp`) and those already in `dst` (staged: they
    replace it). Plain strings: thousands of files per commit. With `share`, a chunk directory nothing
    is staged in or dropped from is carried whole (`_carry`: no link per file)."""
    for dirpath, dirs, files in os.walk(src):
        rel_dir = os.path.relpath(dirpath, src)
        out_dir = os.path.join(dst, rel_dir)
        os.makedirs(out_dir, exist_ok=True)
        if any(_shares(rel_dir, d) for d in dirs):
            chunks = sorted(d for d in {*dirs, *os.listdir(out_dir)} if _shares(rel_dir, d))  # staged ones too
            dirs[:] = [d for d in dirs if not (_shares(rel_dir, d) and _carry(Path(dirpath), d, rel_dir, chunks[-1],
                                                                                  dst, skip, share))]
        for name in files:
            if (name if rel_dir == "." else f"{rel_dir}/{name}") in skip or is_replace_temp(name):
                continue  # dropped, or a temp file a kill left in the version: never carried forward
            try:
                os.link(os.path.join(dirpath, name), os.path.join(out_dir, name))
            except FileExistsError:
                continue  # staged: it replaces this one


def _shares(rel_dir: str, name: str) -> bool:
    """`rel_dir/name` is a chunk directory of a kind versions share whole: `data/`, `videos/<key>/`
    (the episodes table's files, 1,000 rows each, fill a chunk at a million episodes: not shared, and
    its readers glob it recursively, which does not follow a symlink)."""
    video = rel_dir.startswith("videos/") and rel_dir.count("/") == 1
    return bool(_CHUNK.match(name)) and (rel_dir == "data" or video)


def _chunk_parents(version: Path) -> list[Path]:
    """The directories of a version whose chunk directories versions share (`_shares`)."""
    videos = version / "videos"
    parents = [version / "data", *(videos.iterdir() if videos.is_dir() and not videos.is_symlink() else [])]
    return [p for p in parents if p.is_dir() and not p.is_symlink()]


def _shared_target(rel: str, entry: str) -> str:
    """The symlink at `vNNNNNN/rel` to the shared store's copy of that directory made by version `entry`."""
    return "../" * (rel.count("/") + 1) + f"{SHARED}/{entry}/{rel}"


def _shared_entry(link: Path, rel: str) -> str:
    """The store entry (`vNNNNNN`) the chunk symlink `link` at `rel` names; a symlink we did not make
    (any other target) is refused: nothing is read or written through it."""
    target = os.readlink(link)
    m = re.fullmatch(re.escape("../" * (rel.count("/") + 1) + SHARED + "/") + r"(v\d{6})/" + re.escape(rel), target)
    if m is None or not _shares(os.path.dirname(rel), os.path.basename(rel)):
        raise CommitError(f"{link}: a symlink to {target}, not to a chunk directory versions share "
                          f"({SHARED}/vNNNNNN/{rel}); replace it by the directory it points to")
    return m.group(1)


def _twin_path(vdir: Path, entry: str, rel: str) -> Path:
    """Beside the store's directory `entry/rel` (never inside it: readers list it), the symlink whose
    text is the inode of the version directory that holds the same files (its twin)."""
    return vdir / SHARED / entry / (rel + TWIN)


def _record_twin(vdir: Path, entry: str, rel: str, directory: Path) -> None:
    """`directory` (a real chunk directory of a version) holds exactly the files of the store's `entry/rel`.
    Not fsynced: a record lost to a crash costs the next commit one more link per file, never a wrong twin."""
    link = _twin_path(vdir, entry, rel)
    tmp = link.with_name(link.name + ".tmp")
    if os.path.lexists(tmp):
        tmp.unlink()
    os.symlink(str(os.stat(directory).st_ino), tmp)
    os.replace(tmp, link)


def _twin_entry(vdir: Path, link: Path | None, directory: Path, rel: str) -> str | None:
    """The store entry whose files the real chunk directory `directory` at `rel` holds, found by the
    chunk symlink `link` of another version at `rel` (the one a commit exchanged it for): that entry,
    when it records `directory`'s inode as its twin (two readlinks and a few stats, no file listed); else None."""
    if link is None or not link.is_symlink():
        return None
    try:
        entry = _shared_entry(link, rel)
        recorded = os.readlink(_twin_path(vdir, entry, rel))
    except (CommitError, OSError):
        return None
    return entry if recorded == str(os.stat(directory).st_ino) and (vdir / SHARED / entry / rel).is_dir() else None


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


@dataclass
class _Sharing:
    """What a commit needs to carry the current version's closed chunks into the next one whole."""

    vdir: Path
    entry: str  # the store entry this commit fills (named after the version it makes)
    previous: Path | None  # the version before the current one: its chunk symlinks name the entries of its twins
    exchange: bool  # the filesystem has RENAME_EXCHANGE: the new version takes the current one's directories
    swaps: list[str] = field(default_factory=list)  # chunks the stage takes from the current version (`_swap`)


def _carry(parent: Path, name: str, rel_dir: str, last: str, dst: Path, skip: set[str],
           share: _Sharing | None) -> bool:
    """Carry the directory `parent/name` of the current version into the new one `dst` whole, when it
    is a chunk directory (`_shares`) nothing is staged in or dropped from, and closed (a later chunk
    beside it: appends write only in the last one, here or staged) or shared already (a symlink).
    A closed real directory gets its store entry first: the one whose twin it is (`_twin_entry`), or,
    with `share`, its files hard-linked into a new one (once); the stage gets a symlink to that entry,
    which `_swap` then exchanges with the directory itself. A symlink of the current version is the
    same symlink again where there is no RENAME_EXCHANGE; else its files in a directory of its own
    (once: a twin from then on). Whether it was carried; otherwise its files are linked one by one (a
    symlinked one: from the store, into a directory of its own)."""
    rel = name if rel_dir == "." else f"{rel_dir}/{name}"
    path = parent / name
    linked = path.is_symlink()
    if linked:
        _shared_entry(path, rel)
        if not path.is_dir():
            raise CommitError(f"{path}: links to {os.readlink(path)}, which is gone; its files are lost from this "
                              "dataset (run `teleop-flywheel doctor`)")
    touched = os.path.lexists(dst / rel) or any(s.startswith(rel + "/") for s in skip)
    if linked and touched:
        _link_tree(path.resolve(), dst / rel, {s.removeprefix(rel + "/") for s in skip})
        return True
    if linked and share is not None and share.exchange:
        _link_tree(path.resolve(), dst / rel, set())
        _record_twin(share.vdir, _shared_entry(path, rel), rel, dst / rel)
        return True
    if linked:
        os.symlink(os.readlink(path), dst / rel)
        return True
    if touched or share is None or name == last:
        return False
    entry = _twin_entry(share.vdir, share.previous and share.previous / rel, path, rel)
    if entry is None:
        entry = share.entry
        _link_tree(path, share.vdir / SHARED / entry / rel, set())  # its names reach the disk with the entry's
        _record_twin(share.vdir, entry, rel, path)
        fault(f"shared {rel}")
    os.symlink(_shared_target(rel, entry), dst / rel)
    if share.exchange:
        share.swaps.append(rel)
    return True


def _swap(a: Path, b: Path, rels: list[str], step: str = "") -> list[str]:
    """Exchange the chunk `rels` of the versions `a` and `b` (RENAME_EXCHANGE: a symlink to the store
    and the directory holding the same files trade places, the files never missing from either); the
    parents made durable; with `step`, each a write step (`fault`). The chunks swapped (all of them,
    but where the filesystem refuses)."""
    done = []
    for rel in rels:
        if not _exchange(a / rel, b / rel):
            break
        done.append(rel)
        if step:
            fault(f"{step} {rel}")
    for rel_dir in sorted({os.path.dirname(rel) for rel in done}):
        fsync_dir(a / rel_dir)
        fsync_dir(b / rel_dir)
    return done


def _previous(root: Path, version: Path) -> Path | None:
    """The version before `version` (kept as long as `version` is current: `collect`), if any."""
    n = _number(version.name)
    older = [k for k in _versions(root) if n is not None and k < n]
    return versions_path(root) / f"v{max(older):06d}" if older else None


def carried_chunks(root: Path, stage: Path) -> dict[str, Path | None]:
    """{chunk directory: the directory it will be, or resolve to, in the version `publish` makes of
    `stage` on top of `root`, None where that commit makes it}: the chunks it carries whole (`_carry`'s
    rule, the commit dropping nothing), so a commit's own record (`consistency.write_seal`) keys each
    by one stat of that directory (a name added, removed or renamed in it changes its mtime)."""
    base = current(root) if os.path.lexists(root) else None
    if base is None:
        return {}
    vdir, previous, exchange = versions_path(root), _previous(root, base), can_exchange(stage)
    out: dict[str, Path | None] = {}
    for parent in _chunk_parents(base):
        rel_dir = parent.relative_to(base).as_posix()
        names = os.listdir(parent)
        staged = os.listdir(stage / rel_dir) if (stage / rel_dir).is_dir() else []
        chunks = sorted(d for d in {*names, *staged} if _shares(rel_dir, d))
        for name in chunks:
            rel, path = f"{rel_dir}/{name}", parent / name
            if name not in names or os.path.lexists(stage / rel):
                continue
            if path.is_symlink():
                out[rel] = None if exchange else path.resolve()
            elif name != chunks[-1]:
                entry = _twin_entry(vdir, previous and previous / rel, path, rel)
                out[rel] = path if exchange else vdir / SHARED / entry / rel if entry else None
    return out


def shared_links(version: Path) -> list[str]:
    """The chunk directories of a version that are symlinks to the shared store (relative paths)."""
    out = []
    for parent in _chunk_parents(version):
        rel_dir = parent.relative_to(version).as_posix()
        out += [f"{rel_dir}/{d.name}" for d in sorted(os.scandir(parent), key=lambda d: d.name)
                if d.is_symlink() and _shares(rel_dir, d.name)]
    return out


def upload_note(root: Path) -> str | None:
    """What a copy or an upload of `root` must do when its current version carries closed chunks by
    symlink (a filesystem without RENAME_EXCHANGE, or not committed since an older teleop-flywheel;
    None: it carries none): said by `card` and `doctor`, the verbs run before an upload."""
    version = current(root)
    links = shared_links(version) if version is not None else []
    if not links:
        return None
    return (f"{len(links)} closed chunk directories ({links[0]}, ...) are symlinks into "
            f"{versions_path(root).name}/{SHARED}/ (this filesystem has no RENAME_EXCHANGE, or the dataset "
            f"was last committed by an older teleop-flywheel): huggingface-cli upload and LeRobot's push_to_hub "
            f"skip directory symlinks and would upload the dataset without them; upload a copy that follows "
            f"them (cp -rL {root} COPY)")


def _shared_in_use(root: Path) -> set[str]:
    """The store entries (`vNNNNNN`) a published version of `root` links a chunk directory to."""
    cur = current(root) if os.path.lexists(root) else None
    newest = -1 if cur is None else _number(cur.name)
    out: set[str] = set()
    for k, version in _versions(root).items():
        if newest is None or k > newest:
            continue  # never published: `recover` removes it
        for rel in shared_links(version):
            try:
                out.add(_shared_entry(version / rel, rel))
            except CommitError:
                continue  # not ours: no entry of the store is read through it
    return out


def _unshared(root: Path) -> list[Path]:
    """The store's entries no version links to (a commit killed before its version was published,
    or the versions that linked it collected)."""
    store = versions_path(root) / SHARED
    if not store.is_dir() or store.is_symlink():
        return []
    used = _shared_in_use(root)
    return sorted(p for p in store.iterdir() if p.name not in used)


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


def _upgrade(root: Path) -> None:
    """A plain-directory dataset becomes version 0 behind a pointer (module docstring)."""
    vdir = versions_path(root)
    vdir.mkdir(exist_ok=True)
    work = vdir / UPGRADE
    work.mkdir()
    _link_tree(root, work, set())
    fsync_tree(work, files=False)  # the same files, new names: only the names need to reach the disk
    fault("upgrade: files linked")
    v0 = vdir / "v000000"
    _make_lease(v0)
    os.rename(work, v0)
    fsync_dir(vdir)
    fault("upgrade: v000000 linked")
    tmp = _temp_pointer(root, _pointer_target(root, v0))
    if _exchange(tmp, root):  # tmp is now the plain directory, root the pointer
        old = tmp
    else:  # v000000 is whole on disk: from here a crash is completed forward (`_complete_upgrade`)
        tmp.unlink()
        old = vdir / PLAIN
        os.rename(root, old)
        fsync_dir(root.parent)
        fault("upgrade: directory aside")
        os.symlink(_pointer_target(root, v0), root)
    fsync_dir(root.parent)
    fault("upgrade: pointer in place")
    shutil.rmtree(old)


def _upgrade_aside(root: Path) -> Path | None:
    """The dataset's plain directory an upgrade without RENAME_EXCHANGE moved aside and was killed
    before its pointer was made (`root` gone, v000000 holding the same files); else None. Also the
    `.<name>.pointer-PID.dir` of such an upgrade by an older version of this module."""
    vdir = versions_path(root)
    if os.path.lexists(root) or vdir.is_symlink() or sorted(_versions(root)) != [0]:
        return None
    for p in [vdir / PLAIN, *sorted(root.parent.glob(f".{root.name}.pointer-*.dir"))]:
        if p.is_dir() and not p.is_symlink():
            return p
    return None


def _complete_upgrade(root: Path) -> str | None:
    """Finish an upgrade killed between moving the plain directory aside and making the pointer:
    the pointer to v000000 (its files, whole and fsynced before the directory moved) is made; the
    directory is then a leftover `recover` removes. What was done, or None."""
    aside = _upgrade_aside(root)
    if aside is None:
        return None
    os.symlink(_pointer_target(root, versions_path(root) / "v000000"), root)
    fsync_dir(root.parent)
    return f"{root}: completed an upgrade to versions interrupted before its pointer was made"


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
    """Make what `new_stage` holds the next version of `root` and point `root` to it (module
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


def _leftovers(root: Path) -> list[tuple[Path, str]]:
    """What a crash left beside `root` (never read by anyone), each with what it is."""
    aside = _upgrade_aside(root)
    if aside is not None:  # recover completes it first; then the directory is what is left
        return [(aside, "the dataset's directory, moved aside by an upgrade to versions interrupted before its "
                        "pointer was made (readers read its files in v000000): the pointer is made and this removed")]
    out: list[tuple[Path, str]] = []
    for p in sorted(root.parent.glob(f".{root.name}.pointer-*")):
        out.append((p, "a temporary pointer or upgraded directory of an interrupted commit"))
    vdir = versions_path(root)
    if not vdir.is_dir() or vdir.is_symlink():
        return out
    for name, what in ((STAGING, "the staging directory of a commit interrupted before it was published"),
                       (UPGRADE, "an upgrade to versions interrupted before it was published"),
                       (PLAIN, "the dataset's old directory, left by an upgrade to versions (its files are in "
                               "v000000)")):
        if os.path.lexists(vdir / name):
            out.append((vdir / name, what))
    have = _versions(root)
    if not os.path.lexists(root):
        # a pointer removed by hand: its versions are a dataset's, not a crash's (doctor says so)
        return out + (_stray_leases(vdir, None) if not have else [])
    cur = current(root)
    if cur is None:  # a plain directory: a version beside it is an upgrade that never swapped names
        n = -1
    else:
        n = _number(cur.name) or 0
        if n == 0 and not have:
            out.append((root, "the pointer of a new dataset's first commit, interrupted before its version was "
                              "in place (no dataset yet)"))
    out += _stray_temps(root if cur is None else cur)
    out += [(p, "chunk directories of the shared store no version links (a commit interrupted before it was "
                "published)") for p in _unshared(root)]
    for k, p in sorted(have.items()):
        if k > n:
            out.append((p, "a version made by a commit interrupted before the pointer was moved to it"))
            if os.path.lexists(lease_path(p)):
                out.append((lease_path(p), "the lease file of that version"))
    return out + _stray_leases(vdir, None if any(p == root for p, _ in out) else cur)


def _stray_temps(folder: Path) -> list[tuple[Path, str]]:
    """Temp files of `replace_atomic` a kill left in the dataset's current files (`meta/validation/record.json`,
    the card, the weights are replaced in place): no reader reads them, no commit carries them on."""
    if not folder.is_dir():
        return []
    return [(Path(d) / name, "a temporary file of a replace interrupted before its rename (never part of the "
                             "dataset)")
            for d, _dirs, names in sorted(os.walk(folder)) for name in sorted(names) if is_replace_temp(name)]


def _stray_leases(vdir: Path, pointed: Path | None) -> list[tuple[Path, str]]:
    """Lease files whose version is gone but the one the pointer names (if gone, doctor names the pointer)."""
    return [(lease, "the lease file of a version never published or already removed")
            for lease in sorted(vdir.glob(f"v*{LEASE_SUFFIX}"))
            if not os.path.lexists(version := lease.with_name(lease.name.removesuffix(LEASE_SUFFIX)))
            and version != pointed]


def _swap_back(root: Path) -> str | None:
    """A commit killed between taking chunk directories of the current version (`_swap`) and
    publishing left symlinks there (readers read the same files through them): each directory the
    unpublished stage or version holds whose twin the current version's symlink names (`_twin_entry`)
    is exchanged back. What was done, or None."""
    try:
        cur = current(root)
    except CommitError:
        return None  # refused by `_leftovers` and the writers
    n = _number(cur.name) if cur is not None and cur.is_dir() else None
    if cur is None or n is None:
        return None
    vdir = versions_path(root)
    back = []
    for u in [staging_path(root), *(p for k, p in sorted(_versions(root).items()) if k > n)]:
        if not u.is_dir() or u.is_symlink():
            continue
        for parent in _chunk_parents(u):
            rel_dir = parent.relative_to(u).as_posix()
            rels = [f"{rel_dir}/{d.name}" for d in os.scandir(parent) if _shares(rel_dir, d.name)
                    and not d.is_symlink() and d.is_dir()]
            back += _swap(u, cur, [rel for rel in sorted(rels) if _twin_entry(vdir, cur / rel, u / rel, rel)])
    if not back:
        return None
    return f"{root}: gave {len(back)} chunk directories ({back[0]}, ...) back to the current version from an " \
           "interrupted commit"


def recover(root: Path) -> str | None:
    """Remove what a crash left beside `root` (the dataset is its last published version, with the chunk
    directories a killed commit took from it given back, or an upgrade interrupted between its
    renames, completed); what was done, or None."""
    completed = _complete_upgrade(root)
    swapped = _swap_back(root)
    completed = "; ".join(m for m in (completed, swapped) if m) or None
    found = _leftovers(root)
    for path, _what in found:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    vdir = versions_path(root)
    if vdir.is_dir() and not vdir.is_symlink() and not os.path.lexists(root) and not any(vdir.iterdir()):
        vdir.rmdir()
    if not found:
        return completed
    removed = f"{root}: removed what an interrupted commit left ({', '.join(p.name for p, _ in found)}); " \
              "the dataset is its last published version"
    return f"{completed}; {removed}" if completed else removed


def related(out: Path) -> list[Path]:
    """`out` and every schema sibling `out__*` that exists, or has versions beside it."""
    roots = {out}
    if out.parent.is_dir():
        for p in out.parent.iterdir():
            name = p.name.removesuffix(VERSIONS_SUFFIX)
            if name.startswith(out.name + "__") or (name == out.name):
                roots.add(out.parent / name)
    return sorted(roots)


def recover_all(out: Path) -> list[str]:
    """`recover` for the dataset and its siblings; the lines say what was removed."""
    return [msg for root in related(out) if (msg := recover(root))]


def pending(root: Path) -> list[str]:
    """What `recover` would remove, one line each, without doing it (doctor's report)."""
    return [f"{path.name}: {what}: remove it (the dataset is its last published version)"
            for path, what in _leftovers(root)]


@contextmanager
def new_dataset(out: Path) -> Iterator[Path]:
    """Write a new dataset at `out`: under its lock, what a crash left removed, yields the staging
    directory to write it in; published as the dataset's first version when the block ends (an
    `out` that appeared meanwhile: `UsageError`, nothing published); on an error, nothing is left."""
    with locked_dataset(out):
        recover(out)
        stage = new_stage(out)
        try:
            yield stage
            if os.path.lexists(out):
                raise UsageError("output appeared while it was being written", where=str(out), fix="choose a new OUT")
            publish(out)
        finally:
            recover(out)  # a staging directory not published: removed


@contextmanager
def locked_dataset(out: Path, wait: bool = False) -> Iterator[Path]:
    """One writer at a time per dataset family (the lock file `<DATASET>.lock` beside it).
    `wait`: queue behind the holder (a background ingest) instead of refusing at once (a user's command)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with locked(out, wait=wait, what="another convert or doctor") as lock:
        yield lock
