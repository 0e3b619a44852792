"""Other training stacks' formats, out of and into our LeRobot v3.0 datasets (docs/formats.md).

`common/` is what every format shares (the episodes to export, one output whole or absent, the
lineage record); each format is one module or subpackage beside it (`aloha/`, `robomimic`, `rlds`,
`mcap`, `lerobot_v21`); the verbs are `cli/verbs/export.py` and `import_.py`. A format is found by
name in `EXPORTERS` or `IMPORTERS` and imported only when asked for, so its optional extra (h5py, TFDS)
costs nothing unless used. Adding a format is its module plus one line here: an exporter's module
has `run_export(args) -> int`, an importer's `run_import(args) -> common.staged_output.Imported`.
"""
from __future__ import annotations

from typing import NamedTuple


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

