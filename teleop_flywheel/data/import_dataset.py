"""`teleop-flywheel import --from FORMAT SRC OUT`: another stack's episodes as a LeRobot v3.0 dataset.

The dataset is written with the project's own writer (`data/lerobot/append.py`, the converter's
video encoder) and passes its v3.0 checks (`teleop-flywheel doctor`). One module per format
reads it (docs/formats.md):

- `hdf5-aloha` (`data/hdf5/aloha_import.py`): a directory of ALOHA/ACT `episode_N.hdf5` files of an
  SO-101 (six joints).

Every input file is checked first; a bad one is one line naming it and what is wrong, exit 1, and
nothing is written. OUT must not exist (exit 2); it appears whole or not at all. Episodes are read
and encoded in parallel (`--workers N`, default one per CPU as `convert`; `--executor ray`), with a
progress bar on a terminal, and appended in order.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from teleop_flywheel.data.lerobot import format as lf
from teleop_flywheel.data.parallel import add_arguments_to

FORMATS = {"hdf5-aloha": "a directory of ALOHA/ACT episode_N.hdf5 files (h5py: pip install '.[hdf5]')"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("source", type=Path, help="what to import (hdf5-aloha: the directory of episode files)")
    parser.add_argument("out", type=Path, help="the LeRobot v3.0 dataset to write (must not exist)")
    parser.add_argument("--from", dest="source_format", required=True, choices=sorted(FORMATS),
                        help="; ".join(f"{k}: {v}" for k, v in FORMATS.items()))
    parser.add_argument("--task", help="the task of episodes whose files state none")
    parser.add_argument("--fps", type=int, help="the frame rate of files that state none (hdf5-aloha: default 50, "
                                                "ALOHA's control rate)")
    parser.add_argument("--codec", choices=lf.CODECS, default="libsvtav1", help="video codec of the dataset")
    parser.add_argument("--robot-type", default="so101_follower", help="info.json robot_type")
    add_arguments_to(parser)


def run(args: argparse.Namespace) -> int:
    from teleop_flywheel.data.hdf5.aloha_import import import_aloha  # noqa: PLC0415 (only the format asked for)

    made = import_aloha(args.source, args.out, args.task, args.fps, args.codec, args.robot_type,
                        workers=args.workers, executor=args.executor)
    print(f"wrote {made.out}: {made.episodes} episodes, {made.frames} frames; load with "
          f"LeRobotDataset('local/{made.out.name}', root={str(made.out)!r}, video_backend='pyav')")
    return 0
