"""`teleop-flywheel export DATASET|MANIFEST --to FORMAT OUT`: our episodes in another training stack's format.

The source is a LeRobot v3.0 dataset directory, or a manifest (JSON): then exactly its episodes,
verified unchanged and found by id as `manifest materialize` finds them, and every file written
records the manifest it came from. One module per format writes it, found by name in
`formats.EXPORTERS` (docs/formats.md):

- `hdf5-aloha` (`data/formats/aloha/exporter.py`): one `episode_N.hdf5` per episode in the layout
  ACT's and ALOHA's loaders read; `--jpeg QUALITY` compresses the frames as ALOHA's recorder does;
- `hdf5-robomimic` (`data/formats/robomimic.py`): one HDF5 file of `data/demo_N` groups that
  robomimic's `SequenceDataset` reads, with `mask/` filter keys (success, intervention, validated,
  splits) to train on a subset;
- `rlds` (`data/formats/rlds.py`): a TFDS dataset directory of RLDS episodes, as Open
  X-Embodiment's, that `tfds.builder_from_directory(OUT)` reads; frames JPEG at `--jpeg` (95);
- `mcap` (`data/formats/mcap.py`): one rosbag2 MCAP bag per episode, as the recorder writes
  them (the frames as JPEG `CompressedImage`, `--jpeg` quality): Foxglove, `validate` and `convert` read them.

OUT must not exist (exit 2, nothing written); it appears whole or not at all. The formats of a
file per episode (hdf5-aloha, mcap) are written in parallel (`--workers N` processes, default one
per CPU, as `convert`; `--executor ray` on a cluster); hdf5-robomimic and rlds, one file or record
stream in episode order, are written by one process and refuse `--workers`/`--executor ray`
(docs/formats.md says what that costs). A progress bar shows on a terminal. Every export is
recorded in the lineage registry (`--registry`, default as `lineage`'s): a checkpoint trained on it
is registered with `lineage register CHECKPOINT OUT` and `lineage which CHECKPOINT` names the
export, its episodes, their manifest and dataset.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from teleop_flywheel.data.formats import EXPORTERS as FORMATS
from teleop_flywheel.data.formats import ExportRequest, exporter
from teleop_flywheel.data.parallel import add_arguments_to
from teleop_flywheel.data.provenance import ENV as LINEAGE_ENV


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
    return exporter(args.to)(ExportRequest(
        source=args.source, out=args.out, dataset=args.dataset, calibration=tuple(args.calibration), jpeg=args.jpeg,
        registry=args.registry, workers=args.workers, executor=args.executor))
