"""The shared store of closed chunks: each linked once into `DATASET.versions/.shared/`, its twin directory
carried from version to version by RENAME_EXCHANGE, or a symlink to it where there is none."""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from teleop_flywheel.core.files import is_replace_temp
from teleop_flywheel.data.errors import CommitError
from teleop_flywheel.data.lerobot.commit.primitives import (
    _exchange,
    _number,
    _previous,
    _versions,
    can_exchange,
    current,
    fault,
    fsync_dir,
    versions_path,
)

_CHUNK = re.compile(r"^chunk-\d{3,}$")
SHARED = ".shared"  # closed chunk directories, each linked once and carried by every later version whole
TWIN = ".twin"  # beside a store entry: the inode of the version directory holding its files (`_record_twin`)


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
