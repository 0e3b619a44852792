"""`teleop-flywheel lineage`: which manifest trained which checkpoint."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from teleop_flywheel.core.errors import FlywheelError, UsageError
from teleop_flywheel.data.provenance import ENV, default_registry
from teleop_flywheel.data.provenance.lineage import (
    Registry,
    checkpoint_json,
    checkpoint_of_bag,
    checkpoint_on_rig,
    content_files,
    content_fingerprint,
    describe,
    describe_evaluations,
    is_bag,
    path_checkpoint_id,
    register_checkpoint,
    which_dataset,
    which_export,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--registry", type=Path,
                        help=f"lineage registry, a SQLite file (default ${ENV} or {default_registry()}; a "
                             "lineage/1 JSON registry there is read, and migrated by the first write)")
    sub = parser.add_subparsers(dest="action", required=True)
    r = sub.add_parser("register", help="record that MANIFEST (or an export's output) trained CHECKPOINT")
    r.add_argument("checkpoint", help="checkpoint id, as the policy node tags its commands; or the checkpoint's "
                                      "directory or file (another stack's): id <name>:<content sha256, 12 hex>")
    r.add_argument("manifest", type=Path, help="the manifest JSON the checkpoint was trained on, or the output "
                                               "(directory or file) of the `teleop-flywheel export` it was trained on")
    r.add_argument("--run", help="run name (default: the manifest file's stem, the export's name)")
    w = sub.add_parser("which", help="the manifest or export that produced a checkpoint (or the checkpoint a bag "
                                     "recorded, the manifest a materialized dataset holds, which export an output is)")
    w.add_argument("checkpoint", nargs="+", help="checkpoint id or path, a bag directory recorded with that policy, "
                                                 "a dataset written by `manifest materialize`, or an export's output; "
                                                 "with --rig, the rig's recorded episodes (bag folders or a converted "
                                                 "dataset)")
    w.add_argument("--rig", help="the checkpoint the rig runs now (its latest policy episode in the given episodes)")
    w.add_argument("--json", action="store_true", help="print the answer as JSON")
    e = sub.add_parser("episodes", help="the episode ids in a run")
    e.add_argument("run", help="run name or checkpoint id")
    e.add_argument("--json", action="store_true", help="print the ids as a JSON list")
    sub.add_parser("list", help="every registered checkpoint and export")


def _register(reg: Registry, args: argparse.Namespace) -> None:
    path = Path(args.checkpoint)
    ckpt, ckpt_path = (path_checkpoint_id(path), path) if path.exists() else (args.checkpoint, None)
    entry = register_checkpoint(reg.path, ckpt, args.manifest, args.run, checkpoint_path=ckpt_path)
    print(f"registered in {reg.path}:\n{describe(entry, Registry.load(reg.path))}")


def _which(reg: Registry, args: argparse.Namespace) -> None:
    target = Path(args.checkpoint[0])
    if args.rig is not None:
        ckpt = checkpoint_on_rig(args.rig, [Path(p) for p in args.checkpoint])
        if not args.json:
            print(f"rig {args.rig} runs {ckpt} (its latest policy episode)")
    elif len(args.checkpoint) > 1:
        raise UsageError("which takes one checkpoint, bag, dataset or export (several paths only with --rig)")
    elif (target / "meta/info.json").is_file():
        print(which_dataset(reg, target, args.json))
        return
    elif is_bag(target):
        ckpt = checkpoint_of_bag(target)
    elif target.exists():  # an export's output, or a checkpoint given by its path
        files = content_files(target)
        fingerprint = content_fingerprint(files)
        export = reg.export_by_fingerprint(fingerprint)
        if export is not None:
            print(which_export(reg, export, args.json))
            return
        ckpt = path_checkpoint_id(target, files)
    else:
        ckpt = str(target)
    evaluations = reg.evaluations.get(ckpt, [])
    if ckpt not in reg.checkpoints and evaluations:  # evaluated, never registered: say both
        print(json.dumps({"checkpoint": ckpt, "registered": False, "evaluations": evaluations}, indent=2)
              if args.json else f"checkpoint {ckpt}  <-  NOT REGISTERED in {reg.path}: which data trained it "
              f"is unknown\n{describe_evaluations(evaluations)}")
        return
    entry = reg.which(ckpt)
    print(checkpoint_json(reg, entry, evaluations) if args.json
          else describe(entry, reg) + ("\n" + describe_evaluations(evaluations) if evaluations else ""))


def run(args: argparse.Namespace) -> int:
    try:
        reg = Registry.load(args.registry)
        if args.action == "register":
            _register(reg, args)
        elif args.action == "which":
            _which(reg, args)
        elif args.action == "episodes":
            ids = reg.episodes(args.run)
            print(json.dumps(ids) if args.json else "\n".join(ids))
        else:
            checkpoints, exports = reg.listing()
            for entry in checkpoints:
                print(f"{entry['checkpoint']:<24} run {entry['run']:<16} {entry['episodes'] or 0:>6} episodes  "
                      f"{entry['registered']}" + (f"  export {entry['export']}" if entry["export"] else ""))
            for export in exports:
                print(f"{export['export']:<24} {export['episodes']:>6} episodes  {export['registered']}  "
                      f"{export['out']}")
    except ValueError as exc:  # DatasetError/LockError pass through: one line, exit 2 (cli/)
        if isinstance(exc, FlywheelError):
            raise
        raise UsageError(str(exc)) from exc
    return 0
