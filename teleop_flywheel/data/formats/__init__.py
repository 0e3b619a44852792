"""Other training stacks' formats, out of and into our LeRobot v3.0 datasets (docs/formats.md).

`common/` is what every format shares (the episodes to export, one output whole or absent, the
lineage record); each format is one module or subpackage beside it (`aloha/`, `robomimic`, `rlds`,
`mcap`, `lerobot_v21`); the verbs are `cli/verbs/export.py` and `import_.py`. A format is found by
name in `EXPORTERS` or `IMPORTERS` and imported only when asked for, so its optional extra (h5py, TFDS)
costs nothing unless used. Adding a format is its module plus one line here: an exporter's module
has `run_export(req: ExportRequest) -> int`, an importer's
`run_import(req: ImportRequest) -> common.staged_output.Imported`; the verbs build the request from
their command line once, so a format never sees one.
"""
from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from teleop_flywheel.data.formats.common.staged_output import Imported


@dataclass(frozen=True)
class ExportRequest:
    """What `export --to FORMAT` asks of a format; a field left at its default was not given."""

    source: Path  # a LeRobot v3.0 dataset directory, or a manifest JSON
    out: Path  # must not exist
    dataset: Path | None = None  # a manifest's dataset, if not where the manifest says it is
    calibration: tuple[str, ...] = ()  # ROLE=FILE
    jpeg: int | None = None  # the frames' JPEG quality, 1..100 (None: the format's default)
    registry: Path | None = None  # the lineage registry (None: lineage's default)
    workers: int | None = None  # parallel jobs (None: one per CPU)
    executor: str = "local"  # data.parallel's executor: local or ray


@dataclass(frozen=True)
class ImportRequest:
    """What `import --from FORMAT` asks of a format; a field left at its default was not given."""

    source: Path  # the other stack's files
    out: Path  # the LeRobot v3.0 dataset to write (must not exist)
    task: str | None = None  # of episodes whose files state none
    fps: int | None = None  # of files that state none
    codec: str | None = None  # the dataset's video codec (None: the format's default)
    robot_type: str | None = None  # info.json's robot_type (None: the format's default)
    workers: int | None = None
    executor: str = "local"


class Format(NamedTuple):
    """Where a format's reader or writer lives and what it is, for `--to`/`--from`'s help."""

    module: str
    summary: str


EXPORTERS: dict[str, Format] = {
    "hdf5-aloha": Format("teleop_flywheel.data.formats.aloha.exporter",
                         "ALOHA/ACT: one episode_N.hdf5 per episode (h5py: pip install '.[hdf5]')"),
    "hdf5-robomimic": Format("teleop_flywheel.data.formats.robomimic",
                             "robomimic: one OUT.hdf5, data/demo_N, mask/ filter keys from our labels (h5py)"),
    "rlds": Format("teleop_flywheel.data.formats.rlds",
                   "RLDS/Open X-Embodiment: a TFDS dataset directory (pip install '.[rlds]')"),
    "mcap": Format("teleop_flywheel.data.formats.mcap",
                   "one rosbag2 MCAP bag per episode as the recorder writes them (Foxglove, validate, convert)"),
}

IMPORTERS: dict[str, Format] = {
    "hdf5-aloha": Format("teleop_flywheel.data.formats.aloha.importer",
                         "a directory of ALOHA/ACT episode_N.hdf5 files (h5py: pip install '.[hdf5]')"),
    "lerobot-v2.1": Format("teleop_flywheel.data.formats.lerobot_v21",
                           "a LeRobot v2.1 dataset directory (meta/info.json, episodes.jsonl, per-episode parquet "
                           "and mp4)"),
}



def exporter(name: str) -> Callable[[ExportRequest], int]:
    """The `run_export` of the format `name` (a key of EXPORTERS), its module imported only now."""
    run: Callable[[ExportRequest], int] = importlib.import_module(EXPORTERS[name].module).run_export
    return run


def importer(name: str) -> Callable[[ImportRequest], Imported]:
    """The `run_import` of the format `name` (a key of IMPORTERS), its module imported only now."""
    run: Callable[[ImportRequest], Imported] = importlib.import_module(IMPORTERS[name].module).run_import
    return run
