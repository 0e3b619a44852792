"""`teleop-flywheel import --from FORMAT SRC OUT`: another stack's episodes as a LeRobot v3.0 dataset.

The dataset passes the project's v3.0 checks (`teleop-flywheel doctor`) and LeRobot's loader. One
module per format reads it, found by name in `formats.IMPORTERS` (docs/formats.md):

- `hdf5-aloha` (`data/formats/aloha/importer.py`): a directory of ALOHA/ACT `episode_N.hdf5` files of an
  SO-101 (six joints), encoded with the project's own writer (`data/lerobot/append.py`).
- `lerobot-v2.1` (`data/formats/lerobot_v21.py`): a LeRobot v2.1 dataset directory, migrated as
  LeRobot's own v2.1→v3.0 converter does (rows and stats carried, videos remuxed, not re-encoded).

Every input file is checked first; a bad one is one line naming it and what is wrong, exit 1, and
nothing is written. OUT must not exist (exit 2); it appears whole or not at all. hdf5-aloha
episodes are read and encoded in parallel (`--workers N`, default one per CPU as `convert`;
`--executor ray`) and appended in order; a lerobot-v2.1 dataset is remuxed, not re-encoded, by one
process (as fast as LeRobot's converter) and refuses `--workers`/`--executor ray`. A progress bar
shows on a terminal.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from teleop_flywheel.data.formats import IMPORTERS as FORMATS
from teleop_flywheel.data.formats import ImportRequest, importer
from teleop_flywheel.data.lerobot import v3_layout
from teleop_flywheel.data.parallel import add_arguments_to


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("source", type=Path, help="what to import (hdf5-aloha: the directory of episode files; "
                                                  "lerobot-v2.1: the dataset's root)")
    parser.add_argument("out", type=Path, help="the LeRobot v3.0 dataset to write (must not exist)")
    parser.add_argument("--from", dest="source_format", required=True, choices=sorted(FORMATS),
                        help="; ".join(f"{k}: {v}" for k, (_, v) in FORMATS.items()))
    parser.add_argument("--task", help="hdf5-aloha: the task of episodes whose files state none")
    parser.add_argument("--fps", type=int, help="hdf5-aloha: the frame rate of files that state none (default 50, "
                                                "ALOHA's control rate)")
    parser.add_argument("--codec", choices=v3_layout.CODECS,
                        help="hdf5-aloha: video codec of the dataset (default libsvtav1)")
    parser.add_argument("--robot-type", help="hdf5-aloha: info.json robot_type (default so101_follower)")
    add_arguments_to(parser)


def run(args: argparse.Namespace) -> int:
    made = importer(args.source_format)(ImportRequest(
        source=args.source, out=args.out, task=args.task, fps=args.fps, codec=args.codec, robot_type=args.robot_type,
        workers=args.workers, executor=args.executor))
    print(f"wrote {made.out}: {made.episodes} episodes, {made.frames} frames; load with "
          f"LeRobotDataset('local/{made.out.name}', root={str(made.out)!r}, video_backend='pyav')")
    return 0
