"""Recovery: what a crash left beside or in a dataset, reported (`pending`) or removed (`recover`), and the
chunk directories a killed commit took from the current version given back."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

from teleop_flywheel.core.files import is_replace_temp
from teleop_flywheel.data.errors import CommitError
from teleop_flywheel.data.lerobot.commit.plain_upgrade import PLAIN, UPGRADE, _complete_upgrade, _upgrade_aside
from teleop_flywheel.data.lerobot.commit.primitives import (
    LEASE_SUFFIX,
    STAGING,
    VERSIONS_SUFFIX,
    _number,
    _versions,
    current,
    lease_path,
    staging_path,
    versions_path,
)
from teleop_flywheel.data.lerobot.commit.store import (
    _chunk_parents,
    _shares,
    _swap,
    _twin_entry,
    _unshared,
)


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
