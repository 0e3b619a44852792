"""`teleop-flywheel lineage`: which manifest trained which checkpoint, answered without a meeting.

A small JSON registry maps checkpoint id (the id the policy node stamps on every command and
writes into each recording's `policy_checkpoint`) to a copy of the manifest that trained it, so
the answer survives the manifest file being moved or edited. Registry location, first found:
`--registry PATH`, `$TELEOP_FLYWHEEL_LINEAGE`, `~/.local/share/teleop_flywheel/lineage.json`
(XDG_DATA_HOME respected).

Beside the checkpoints, the registry keeps each checkpoint's evaluations (`evaluations`: checkpoint
id → a list of result tables, appended by `teleop-flywheel eval watch`: per condition N,
successes and the Wilson interval, the comparisons with the incumbent, whether it was flagged), so
`lineage which` answers both "what trained it" and "how did it do". A checkpoint may be evaluated
before (or without) being registered.

    lineage register CHECKPOINT MANIFEST [--run NAME]   record that MANIFEST trained CHECKPOINT
                                                        (`teleop-flywheel train` registers its own, with
                                                        the checkpoint's path, policy type and steps)
    lineage which CHECKPOINT|BAG|DATASET                the manifest behind a checkpoint (or a bag's, or the
                                                        one a `manifest materialize` dataset holds), and
                                                        the checkpoint's evaluations' figures
    lineage which --rig RIG EPISODES...                 the same for the checkpoint the rig runs now
    lineage episodes RUN|CHECKPOINT                     the episode ids in that run
    lineage list                                        every registered checkpoint
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from teleop_flywheel.core.errors import FlywheelError, UsageError
from teleop_flywheel.core.files import replace_atomic
from teleop_flywheel.data.filelock import locked
from teleop_flywheel.data.lerobot.dataset import DatasetError
from teleop_flywheel.data.provenance.episode_sources import records_for
from teleop_flywheel.data.provenance.manifest import load_manifest
from teleop_flywheel.data.provenance.manifest_hash import manifest_sha256
from teleop_flywheel.data.provenance.materialize import PROVENANCE_KEY, provenance
from teleop_flywheel.recording.mcap.exceptions import BagReadError
from teleop_flywheel.recording.mcap.reader import read_episode

FORMAT = "teleop_flywheel.lineage/1"
ENV = "TELEOP_FLYWHEEL_LINEAGE"


def default_registry() -> Path:
    if os.environ.get(ENV):
        return Path(os.environ[ENV])
    base = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return base / "teleop_flywheel" / "lineage.json"


class LineageError(DatasetError):
    pass


@dataclass
class Registry:
    path: Path
    checkpoints: dict[str, dict[str, Any]] = field(default_factory=dict)
    evaluations: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    @classmethod
    def load(cls, path: str | Path | None = None) -> Registry:
        path = Path(path) if path else default_registry()
        if not path.exists():
            return cls(path)
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise LineageError(f"{path}: unreadable lineage registry: {exc}") from None
        if data.get("format") != FORMAT:
            raise LineageError(f"{path}: not a {FORMAT} registry")
        return cls(path, dict(data.get("checkpoints", {})), dict(data.get("evaluations", {})))

    def save(self) -> None:
        """Replace the registry file atomically (unique temp name + rename; `register_checkpoint`
        holds the registry's lock around load, register and save)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data: dict[str, Any] = {"format": FORMAT, "checkpoints": self.checkpoints}
        if self.evaluations:
            data["evaluations"] = self.evaluations
        replace_atomic(self.path, json.dumps(data, indent=1) + "\n")

    def register(self, checkpoint: str, manifest_path: str | Path, run: str | None = None,
                 training: dict[str, Any] | None = None) -> dict[str, Any]:
        """Record checkpoint → manifest (and, from `train`, how it was trained: `training`, e.g. its
        path, policy type and steps). Re-registering the same pair is a no-op; a different one an error."""
        if not checkpoint:
            raise LineageError("checkpoint id must not be empty")
        manifest = load_manifest(manifest_path)
        digest = manifest_sha256(manifest)
        old = self.checkpoints.get(checkpoint)
        if old is not None:
            if old["manifest_sha256"] == digest:
                return old
            raise LineageError(f"checkpoint {checkpoint!r} is already registered to manifest "
                               f"{old['manifest_path']} (run {old['run']!r}); checkpoint ids are never reused")
        run = run or Path(manifest_path).stem
        entry = {"checkpoint": checkpoint, "run": run, "manifest_path": str(Path(manifest_path).resolve()),
                 "manifest_sha256": digest, "registered": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                 "manifest": manifest}
        if training is not None:
            entry["training"] = training
        self.checkpoints[checkpoint] = entry
        return entry

    def which(self, checkpoint: str) -> dict[str, Any]:
        try:
            return self.checkpoints[checkpoint]
        except KeyError:
            known = ", ".join(sorted(self.checkpoints)) or "none"
            raise LineageError(f"checkpoint {checkpoint!r} is not in {self.path} (registered: {known})") from None

    def run_entry(self, run_or_checkpoint: str) -> dict[str, Any]:
        if run_or_checkpoint in self.checkpoints:
            return self.checkpoints[run_or_checkpoint]
        hits = [e for e in self.checkpoints.values() if e["run"] == run_or_checkpoint]
        if not hits:
            raise LineageError(f"no run or checkpoint {run_or_checkpoint!r} in {self.path}")
        return hits[0]

    def episodes(self, run_or_checkpoint: str) -> list[str]:
        return [e["episode_id"] for e in self.run_entry(run_or_checkpoint)["manifest"]["episodes"]]


def register_checkpoint(registry: Path, checkpoint: str, manifest: Path, run: str | None = None,
                        training: dict[str, Any] | None = None) -> dict[str, Any]:
    """Load, register and save under the registry's lock: two concurrent registrations never lose
    an entry, and an entry, once written, is never replaced (checkpoint ids are never reused)."""
    with locked(registry, what="lineage register"):
        reg = Registry.load(registry)
        entry = reg.register(checkpoint, manifest, run, training)
        reg.save()
    return entry


def add_evaluation(registry: Path, checkpoint: str, figures: dict[str, Any]) -> None:
    """Append one evaluation's figures to `checkpoint`'s list, under the registry's lock."""
    with locked(registry, what="lineage evaluation"):
        reg = Registry.load(registry)
        reg.evaluations.setdefault(checkpoint, []).append(figures)
        reg.save()


def describe_evaluations(evaluations: list[dict[str, Any]]) -> str:
    """The figures `eval watch` appended, one block per evaluation."""
    lines = []
    for e in evaluations:
        flag = "  ** FLAGGED: worse than the incumbent **" if e["flagged"] else ""
        lines.append(f"  evaluated  {e['when']}: protocol {e['protocol']} (hash {e['protocol_hash']}), "
                     f"incumbent {e['incumbent'] or 'none'}{flag}")
        for c in e["cells"]:
            lo, hi = c["ci95"]
            rate = "-" if c["rate"] is None else f"{c['rate']:.0%}"
            lines.append(f"    {c['checkpoint']:<28} {c['condition']:<12} N={c['n']:<3} {c['successes']:>3} ok  "
                         f"{rate:>4} [{lo:.2f}, {hi:.2f}]")
        lines += [f"    {c['sentence']}" for c in e["comparisons"]]
        if e.get("report"):
            lines.append(f"    report {e['report']}")
    return "\n".join(lines)


def checkpoint_on_rig(rig: str, episodes: list[Path]) -> str:
    """The checkpoint of the rig's most recently recorded policy episode: every session records the
    checkpoint it runs and the rig's id, so the latest one says what is on the robot now."""
    recs = [r for r in records_for(episodes) if (r.rig_id or "") == rig and r.checkpoint]
    if not recs:
        raise LineageError(f"{', '.join(map(str, episodes))}: no policy episode recorded on rig {rig!r}")
    return str(max(recs, key=lambda r: r.recorded_wall_ns or 0).checkpoint)


def checkpoint_of_bag(bag: Path) -> str:
    """The policy checkpoint a bag recorded, from its MCAP episode record (a metadata.yaml that
    disagrees with it is refused: it is not trusted over the MCAP)."""
    try:
        meta = read_episode(bag)
    except BagReadError as exc:
        raise LineageError(f"{bag}: cannot read its episode metadata: {exc}") from None
    ckpt = meta.policy_checkpoint if meta is not None else ""
    if not ckpt:
        raise LineageError(f"{bag}: no policy_checkpoint in its metadata (a teleop-only recording?)")
    return str(ckpt)


def describe(entry: dict[str, Any]) -> str:
    m = entry["manifest"]
    t = entry.get("training")
    trained = (f"\n  trained    {t['policy']}, {t['steps']} steps, batch {t['batch_size']}, seed {t['seed']}: "
               f"{t['path']}") if t else ""
    return (f"checkpoint {entry['checkpoint']}  <-  run {entry['run']}\n"
            f"  manifest   {entry['manifest_path']} (sha256 {entry['manifest_sha256'][:16]})\n"
            f"  dataset    {m['dataset']}  fingerprint {m['fingerprint'][:16]}\n"
            f"  episodes   {m['episode_count']} ({m['frame_count']} frames), filter {m['filter'] or 'none'}\n"
            f"  created    {m['created']}, registered {entry['registered']}{trained}")


def _which_dataset(reg: Registry, root: Path, as_json: bool) -> str:
    """The manifest a materialized dataset holds, and the checkpoints registered as trained on it."""
    record = provenance(root)
    if record is None:
        raise LineageError(f"{root}: a dataset, but not one `manifest materialize` wrote (no {PROVENANCE_KEY} "
                           "in meta/info.json): `lineage which` takes a checkpoint id, a bag or a materialized dataset")
    trained = sorted(c for c, e in reg.checkpoints.items() if e["manifest_sha256"] == record["manifest_sha256"])
    if as_json:
        return json.dumps({"dataset": str(root), **record, "checkpoints": trained}, indent=2)
    return (f"dataset {root}  <-  manifest {record['manifest']} (sha256 {record['manifest_sha256'][:16]})\n"
            f"  source     {record['dataset']}  fingerprint {record['fingerprint'][:16]}\n"
            f"  episodes   {len(record['source_episodes'])} (source indices {record['source_episodes']}), "
            f"videos {record['videos']}\n"
            f"  trained    {', '.join(trained) or 'no registered checkpoint'}")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--registry", type=Path, help=f"registry JSON (default ${ENV} or {default_registry()})")
    sub = parser.add_subparsers(dest="action", required=True)
    r = sub.add_parser("register", help="record that MANIFEST trained CHECKPOINT")
    r.add_argument("checkpoint", help="checkpoint id, as the policy node tags its commands")
    r.add_argument("manifest", type=Path, help="the manifest JSON the checkpoint was trained on")
    r.add_argument("--run", help="run name (default: the manifest file's stem)")
    w = sub.add_parser("which", help="the manifest that produced a checkpoint (or the checkpoint a bag recorded, "
                                     "or the manifest a materialized dataset holds)")
    w.add_argument("checkpoint", nargs="+", help="checkpoint id, a bag directory recorded with that policy, or a "
                                                 "dataset written by `manifest materialize`; with --rig, the rig's "
                                                 "recorded episodes (bag folders or a converted dataset)")
    w.add_argument("--rig", help="the checkpoint the rig runs now (its latest policy episode in the given episodes)")
    w.add_argument("--json", action="store_true", help="print the answer as JSON")
    e = sub.add_parser("episodes", help="the episode ids in a run")
    e.add_argument("run", help="run name or checkpoint id")
    e.add_argument("--json", action="store_true", help="print the ids as a JSON list")
    sub.add_parser("list", help="every registered checkpoint")


def run(args: argparse.Namespace) -> int:
    try:
        reg = Registry.load(args.registry)
        if args.action == "register":
            entry = register_checkpoint(reg.path, args.checkpoint, args.manifest, args.run)
            print(f"registered in {reg.path}:\n{describe(entry)}")
        elif args.action == "which" and args.rig is None and len(args.checkpoint) > 1:
            raise UsageError("which takes one checkpoint, bag or dataset (several paths only with --rig)")
        elif args.action == "which" and args.rig is None and (Path(args.checkpoint[0]) / "meta/info.json").is_file():
            print(_which_dataset(reg, Path(args.checkpoint[0]), args.json))
        elif args.action == "which":
            target = Path(args.checkpoint[0])
            if args.rig is not None:
                ckpt = checkpoint_on_rig(args.rig, [Path(p) for p in args.checkpoint])
                if not args.json:
                    print(f"rig {args.rig} runs {ckpt} (its latest policy episode)")
            else:
                ckpt = checkpoint_of_bag(target) if target.is_dir() or target.suffix == ".mcap" else str(target)
            evaluations = reg.evaluations.get(ckpt, [])
            if ckpt not in reg.checkpoints and evaluations:  # evaluated, never registered: say both
                print(json.dumps({"checkpoint": ckpt, "registered": False, "evaluations": evaluations}, indent=2)
                      if args.json else f"checkpoint {ckpt}  <-  NOT REGISTERED in {reg.path}: which data trained it "
                      f"is unknown\n{describe_evaluations(evaluations)}")
                return 0
            entry = reg.which(ckpt)
            print(json.dumps({k: v for k, v in entry.items() if k != "manifest"} | {
                "fingerprint": entry["manifest"]["fingerprint"], "episode_count": entry["manifest"]["episode_count"],
                "evaluations": evaluations}, indent=2) if args.json
                else describe(entry) + ("\n" + describe_evaluations(evaluations) if evaluations else ""))
        elif args.action == "episodes":
            ids = reg.episodes(args.run)
            print(json.dumps(ids) if args.json else "\n".join(ids))
        else:
            for entry in sorted(reg.checkpoints.values(), key=lambda x: x["registered"]):
                m = entry["manifest"]
                print(f"{entry['checkpoint']:<24} run {entry['run']:<16} {m['episode_count']:>6} episodes  "
                      f"{entry['registered']}")
    except ValueError as exc:  # DatasetError/LockError pass through: one line, exit 2 (cli.py)
        if isinstance(exc, FlywheelError):
            raise
        raise UsageError(str(exc)) from exc
    return 0
