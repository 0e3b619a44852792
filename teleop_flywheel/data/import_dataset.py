"""`teleop-flywheel import --from FORMAT SRC OUT`: another stack's episodes as a LeRobot v3.0 dataset.

The dataset passes the project's v3.0 checks (`teleop-flywheel doctor`) and LeRobot's loader. One
module per format reads it (docs/formats.md):

- `hdf5-aloha` (`data/hdf5/aloha_import.py`): a directory of ALOHA/ACT `episode_N.hdf5` files of an
  SO-101 (six joints), encoded with the project's own writer (`data/lerobot/append.py`).
- `lerobot-v2.1` (`data/lerobot_v21/v21_import.py`): a LeRobot v2.1 dataset directory, migrated as
  LeRobot's own v2.1→v3.0 converter does (rows and stats carried, videos remuxed, not re-encoded).

Every input file is checked first; a bad one is one line naming it and what is wrong, exit 1, and
nothing is written. OUT must not exist (exit 2); it appears whole or not at all. hdf5-aloha
episodes are read and encoded in parallel (`--workers N`, default one per CPU as `convert`;
`--executor ray`) and appended in order; a lerobot-v2.1 dataset is remuxed, not re-encoded, by one
process (as fast as LeRobot's converter) and refuses `--workers`/`--executor ray`. A progress bar
shows on a terminal.
"""
from __future__ import annotations

# format -> (the module whose run_import(args) -> staged_output.Imported writes it, what SRC is)
FORMATS = {
    "hdf5-aloha": ("teleop_flywheel.data.hdf5.aloha_import",
                   "a directory of ALOHA/ACT episode_N.hdf5 files (h5py: pip install '.[hdf5]')"),
    "lerobot-v2.1": ("teleop_flywheel.data.lerobot_v21.v21_import",
                     "a LeRobot v2.1 dataset directory (meta/info.json, episodes.jsonl, per-episode parquet and mp4)"),
}

