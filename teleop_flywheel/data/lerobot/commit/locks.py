"""The dataset's lock (one writer at a time per dataset family), and a new dataset written under it."""
from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from teleop_flywheel.core.errors import UsageError
from teleop_flywheel.data.filelock import locked
from teleop_flywheel.data.lerobot.commit.recovery import (
    recover,
)
from teleop_flywheel.data.lerobot.commit.versions import (
    new_stage,
    publish,
)


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
