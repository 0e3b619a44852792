"""An export's or import's output: written under a hidden temporary name beside OUT, renamed to OUT
at the end, so OUT is whole or absent. An OUT that exists is refused before anything is read
(exit 2); an error (or Ctrl-C) removes the temporary; a kill -9 leaves only a hidden
`.OUT.*.partial` beside it, never a half OUT."""
from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from teleop_flywheel.core.errors import UsageError
from teleop_flywheel.data.lerobot.commit import fsync_dir, fsync_tree


@dataclass
class Imported:
    """What an import wrote (cli/verbs/import_.py prints it): the dataset, its episodes and frames."""

    out: Path
    episodes: int
    frames: int


def refuse_existing(out: Path) -> Path:
    """`out` made absolute; a UsageError (exit 2) if anything is there already."""
    out = Path(os.path.abspath(out))
    if os.path.lexists(out):
        raise UsageError("output already exists", where=str(out),
                         fix="choose a new OUT: an output is written whole, never over anything")
    return out


@contextmanager
def staged_output(out: Path, directory: bool = True) -> Iterator[Path]:
    """Yield a temporary path beside `out` (a directory, or a file's path) and rename it to `out` on success."""
    out = refuse_existing(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".partial", dir=out.parent))
    umask = os.umask(0)
    os.umask(umask)
    stage.chmod(0o777 & ~umask)  # mkdtemp's 0700 is for the temporary name, not for OUT
    target = stage if directory else stage / out.name
    try:
        yield target
        if directory:
            fsync_tree(stage)
        else:
            with open(target, "rb") as f:
                os.fsync(f.fileno())
        if os.path.lexists(out):
            raise UsageError("output appeared while it was being written", where=str(out), fix="choose a new OUT")
        os.rename(target, out)
        fsync_dir(out.parent)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
