"""`teleop-flywheel export`: a dataset or manifest's episodes in another stack's format (--to hdf5-aloha)."""
from __future__ import annotations

import argparse
import importlib
from pathlib import Path

from teleop_flywheel.data.export import FORMATS
from teleop_flywheel.data.parallel import add_arguments_to
from teleop_flywheel.data.provenance.lineage import ENV as LINEAGE_ENV


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("source", type=Path, help="a LeRobot v3.0 dataset directory, or a manifest JSON")
    parser.add_argument("out", type=Path, help="where to write (must not exist)")
    parser.add_argument("--to", required=True, choices=sorted(FORMATS),
                        help="; ".join(f"{k}: {v}" for k, (_, v) in FORMATS.items()))
    parser.add_argument("--dataset", type=Path, help="a manifest's dataset, if not where the manifest says it is")
    parser.add_argument("--calibration", action="append", default=[], metavar="ROLE=FILE",
                        help="mcap: the leader's or follower's calibration YAML, for radians of that arm in the bags "
                             "(repeatable; default a nominal one: the dataset keeps none)")
    parser.add_argument("--jpeg", type=int, metavar="QUALITY",
                        help="JPEG quality of the frames, 1..100. hdf5-aloha: compress them (ALOHA uses 50), "
                             "with the `compress` attribute ALOHA's loaders read; rlds: the frames' quality "
                             "(default 95); mcap: the CompressedImage quality (default 90)")
    parser.add_argument("--registry", type=Path, help=f"the lineage registry to record the export in (default "
                                                      f"${LINEAGE_ENV} or lineage's default)")
    add_arguments_to(parser)


def run(args: argparse.Namespace) -> int:
    writer = importlib.import_module(FORMATS[args.to][0])  # only the format asked for: its extras may be absent
    result: int = writer.run_export(args)
    return result
