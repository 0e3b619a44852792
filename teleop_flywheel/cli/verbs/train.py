"""`teleop-flywheel train`: train a LeRobot policy on a manifest's episodes, weighted; register the checkpoint."""
from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

from teleop_flywheel.core.errors import UsageError
from teleop_flywheel.data.provenance import default_registry
from teleop_flywheel.data.provenance.manifest import load_manifest
from teleop_flywheel.training.loop import INSTALL, OWNED, POLICIES, train
from teleop_flywheel.training.training_set import training_set

PASSTHROUGH = "lerobot_args"  # cli/: the arguments after `--`, for LeRobot's config parser


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("manifest", type=Path, help="manifest JSON (`teleop-flywheel manifest create`)")
    parser.add_argument("--policy", choices=POLICIES, required=True, help="LeRobot policy type to train")
    parser.add_argument("--out", type=Path, required=True,
                        help="run directory to create (LeRobot's output_dir; never overwritten)")
    parser.add_argument("--steps", type=int, help="training steps (default: LeRobot's, 100000)")
    parser.add_argument("--batch-size", type=int, help="batch size (default: LeRobot's, 8)")
    parser.add_argument("--seed", type=int, help="seed of the model's initialisation and of the weighted "
                                                 "sampler (default: LeRobot's, 1000)")
    parser.add_argument("--dataset", type=Path,
                        help="the dataset the manifest was frozen from, if it moved (default: the manifest's)")
    parser.add_argument("--registry", type=Path, help="lineage registry (default as for `lineage`: "
                                                      f"$TELEOP_FLYWHEEL_LINEAGE or {default_registry()})")
    parser.add_argument("--run", help="run name in lineage (default: OUT's name)")
    parser.usage = ("%(prog)s MANIFEST --policy {act,diffusion} --out OUT [options] [-- LEROBOT_ARGS ...]\n"
                    "  LEROBOT_ARGS: LeRobot's config arguments (lerobot-train --help), e.g. "
                    "--policy.chunk_size=20 --num_workers=2 --save_freq=5000")


def run(args: argparse.Namespace) -> int:
    if args.out.exists() or args.out.is_symlink():
        raise UsageError("the run directory exists", where=str(args.out),
                         fix="choose a new --out: a run is never overwritten")
    for name, value in (("--steps", args.steps), ("--batch-size", args.batch_size)):
        if value is not None and value < 1:
            raise UsageError(f"{name} must be >= 1, got {value}")
    _check_lerobot_args(args.lerobot_args)
    load_manifest(args.manifest)  # a bad manifest is named whether LeRobot is installed or not
    if importlib.util.find_spec("lerobot") is None:
        raise UsageError("LeRobot is not installed, and train runs LeRobot's training", fix=INSTALL)
    with training_set(args.manifest, args.dataset) as tset:
        result = train(tset, args.policy, args.out, steps=args.steps, batch_size=args.batch_size, seed=args.seed,
                       lerobot_args=args.lerobot_args, registry=args.registry, run_name=args.run)
    print(f"trained {args.policy} on {len(tset.episodes)} episodes of {args.manifest} for {result.steps} steps "
          f"in {result.seconds:.1f} s ({result.steps / result.seconds:.2f} steps/s; per step {result.data_s:.3f} s "
          f"loading, {result.update_s:.3f} s updating), last loss {result.loss:.4f}\n"
          f"checkpoint {result.checkpoint}\n"
          f"registered as {result.checkpoint_id} in {result.registry}")
    return 0


def _check_lerobot_args(extra: list[str]) -> None:
    for arg in extra:
        if not arg.startswith("--"):
            raise UsageError(f"unexpected argument {arg!r}", where="the arguments after --",
                             fix="LeRobot's arguments are --name=value")
        name = arg.split("=", 1)[0]
        if name in OWNED:
            raise UsageError(f"{name} is set by {OWNED[name]}", where="the arguments after --",
                             fix="leave it out (the manifest decides the data; use this command's options)")
