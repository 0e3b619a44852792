"""`teleop-flywheel manifest`: freeze, verify or materialize a manifest of content-addressed episodes."""
from __future__ import annotations

import argparse
import json
import os
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from teleop_flywheel.core.errors import FileExistsRefused, FlywheelError, UsageError
from teleop_flywheel.core.files import create_exclusive
from teleop_flywheel.data.lerobot import v3_layout
from teleop_flywheel.data.lerobot.dataset import LeRobotDataset
from teleop_flywheel.data.provenance.manifest import ID_VERSION, create, load_manifest, verify
from teleop_flywheel.data.provenance.materialize import lerobot_argument, located, materialize, parse_resolution


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True)
    c = sub.add_parser("create", help="freeze the dataset's episodes into a manifest")
    c.add_argument("dataset", type=Path, help="LeRobot v3.0 dataset directory")
    c.add_argument("--out", type=Path, required=True, help="manifest JSON to write (never overwritten)")
    c.add_argument("--filter", action="append", default=[], metavar="EXPR",
                   help="keep episodes where EXPR holds (repeatable; all must hold), e.g. outcome=success, "
                        "\"jerk_z < 2 and duration_ratio between 0.67 and 1.5 and outcome == success\", "
                        "\"operator in (ana, ben)\"; grammar: docs/dataset_reports.md")
    v = sub.add_parser("verify", help="prove a dataset is exactly a manifest")
    v.add_argument("dataset", type=Path, help="LeRobot v3.0 dataset directory")
    v.add_argument("manifest", type=Path, help="manifest JSON written by manifest create")
    v.add_argument("--subset", action="store_true", help="only require the manifest's episodes (ignore additions)")
    v.add_argument("--json", action="store_true", help="print the result as JSON")
    _add_materialize(sub)


def run(args: argparse.Namespace) -> int:
    if args.action in ("episodes", "materialize"):
        return _materialize(args)
    try:
        ds = LeRobotDataset.open(args.dataset)
        if args.action == "create":
            if args.out.exists() or args.out.is_symlink():
                raise UsageError("manifest already exists", where=str(args.out),
                                 fix="choose a new name: manifests are frozen and never overwritten")
            manifest = create(ds, args.filter)
            args.out.parent.mkdir(parents=True, exist_ok=True)
            try:
                create_exclusive(args.out, json.dumps(manifest, indent=1) + "\n")
            except FileExistsRefused:
                raise UsageError("manifest already exists", where=str(args.out),
                                 fix="choose a new name: manifests are frozen and never overwritten") from None
            print(f"wrote {args.out}: {manifest['episode_count']} episodes, {manifest['frame_count']} frames, "
                  f"fingerprint {manifest['fingerprint'][:16]}")
            return 0
        manifest = load_manifest(args.manifest)
        result = verify(ds, manifest, args.subset)
    except ValueError as exc:  # a DatasetError as it is (one line, exit 2: cli/); a bad --filter as usage
        if isinstance(exc, FlywheelError):
            raise
        raise UsageError(str(exc)) from exc
    if args.json:
        print(
            json.dumps(
                {
                    "ok": result.ok,
                    "matched": result.matched,
                    "differences": result.lines(),
                    "id_version": ID_VERSION,
                    "fingerprint": result.fingerprint,
                    "manifest_fingerprint": manifest["fingerprint"],
                },
                indent=2,
            )
        )
    else:
        for line in result.lines():
            print(line)
        verdict = "OK: dataset matches" if result.ok else "MISMATCH: dataset differs from"
        print(f"{verdict} manifest {args.manifest} ({result.matched} of {len(manifest['episodes'])} episodes "
              f"identical{', subset check' if args.subset else ''}; ids v{ID_VERSION})")
    return 0 if result.ok else 1


def _add_materialize(sub: Any) -> None:
    """`manifest episodes` and `manifest materialize`: a manifest's episodes found by id in its dataset."""
    e = sub.add_parser("episodes", help="the dataset's current episode indices of a manifest's episodes, "
                                        "as LeRobot's --dataset.episodes")
    e.add_argument("manifest", type=Path, help="manifest JSON written by manifest create")
    e.add_argument("--dataset", type=Path, help="the manifest's dataset, if not where the manifest says it is")
    e.add_argument("--json", action="store_true", help="print the indices (and each episode id's) as JSON")
    m = sub.add_parser("materialize", help="a standalone LeRobot v3.0 dataset of exactly a manifest's episodes")
    m.add_argument("manifest", type=Path, help="manifest JSON written by manifest create")
    m.add_argument("out", type=Path, help="the dataset to write (must not exist)")
    m.add_argument("--resolution", metavar="WxH",
                   help="re-encode the videos once at this size, e.g. 224x224 (default: packets copied, no re-encode)")
    m.add_argument("--codec", choices=v3_layout.CODECS, default="libsvtav1",
                   help="codec of the re-encode (--resolution)")
    m.add_argument("--dataset", type=Path, help="the manifest's dataset, if not where the manifest says it is")


def _materialize(args: argparse.Namespace) -> int:
    resolution = parse_resolution(args.resolution) if getattr(args, "resolution", None) else None
    if args.action == "materialize" and os.path.lexists(args.out):
        raise UsageError("output already exists", where=str(args.out),
                         fix="choose a new OUT: a materialized dataset is written whole, never over anything")
    with ExitStack() as pin:  # the dataset's version leased while it is read
        try:
            loc = pin.enter_context(located(args.manifest, args.dataset))
        except ValueError as exc:
            if isinstance(exc, FlywheelError):
                raise
            raise UsageError(str(exc)) from exc
        if args.action == "episodes":
            if args.json:
                print(json.dumps({"dataset": str(loc.ds.root), "manifest": str(args.manifest),
                                  "episodes": loc.episodes, "episode_index": loc.current}, indent=2))
            else:
                print(lerobot_argument(loc.episodes))
            return 0
        made = materialize(loc, args.out, resolution, args.codec, show_progress=True)
    repo = loc.ds.repo_id or f"local/{made.root.name}"
    print(f"wrote {made.root}: {made.episodes} episodes, {made.frames} frames, videos {made.videos}; load with "
          f"LeRobotDataset({repo!r}, root={str(made.root)!r}, video_backend='pyav')")
    return 0
