"""The upgrade of a dataset written before versions (a plain directory) to version 0 behind a pointer."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

from teleop_flywheel.data.lerobot.commit.primitives import (
    _exchange,
    _make_lease,
    _pointer_target,
    _temp_pointer,
    _versions,
    fault,
    fsync_dir,
    fsync_tree,
    versions_path,
)
from teleop_flywheel.data.lerobot.commit.store import (
    _link_tree,
)

UPGRADE = ".upgrade"
PLAIN = ".plain"  # an upgrade's plain directory, moved aside where RENAME_EXCHANGE is missing


def _upgrade(root: Path) -> None:
    """A plain-directory dataset becomes version 0 behind a pointer (package docstring)."""
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
