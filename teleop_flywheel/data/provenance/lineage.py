"""`teleop-flywheel lineage`: which manifest trained which checkpoint, answered without a meeting.

A small JSON registry maps checkpoint id (the id the policy node stamps on every command and
writes into each recording's `policy_checkpoint`) to a copy of the manifest that trained it, so
the answer survives the manifest file being moved or edited.

A checkpoint trained by another stack (ACT, robomimic, an RLDS pipeline) was trained on an export:
every `teleop-flywheel export` registers itself here (`exports`: id → its format, where it was
written, the sha256 of every file it wrote and their combined fingerprint, the content ids and
source indices of its episodes, the source dataset, and the manifest it came from, copied). A
checkpoint registered against an export directory or file is found by the output's content (so
a moved or copied export still answers; an edited one does not), and `lineage which` then prints
checkpoint → export → episodes → manifest → dataset. A checkpoint given as a path (a directory or a
file such as ACT's `policy_best.ckpt`) gets the id `<name>:<sha256 of its content, 12 hex>`.
Registry location, first found:
`--registry PATH`, `$TELEOP_FLYWHEEL_LINEAGE`, `~/.local/share/teleop_flywheel/lineage.sqlite`
(XDG_DATA_HOME respected; `lineage.json` there instead if it exists, the registry of an older version).

The registry's store, and why SQLite: `lineage_store.py`.

Beside the checkpoints, the registry keeps each checkpoint's evaluations (`evaluations`: checkpoint
id → a list of result tables, appended by `teleop-flywheel eval watch`: per condition N,
successes and the Wilson interval, the comparisons with the incumbent, whether it was flagged), so
`lineage which` answers both "what trained it" and "how did it do". A checkpoint may be evaluated
before (or without) being registered.

    lineage register CHECKPOINT MANIFEST|EXPORT [--run NAME]
                                                        record that MANIFEST (or an export's output) trained
                                                        CHECKPOINT, an id or a checkpoint's path
                                                        (`teleop-flywheel train` registers its own, with
                                                        the checkpoint's path, policy type and steps)
    lineage which CHECKPOINT|BAG|DATASET|EXPORT         the manifest (or export) behind a checkpoint (or a
                                                        bag's, or the one a `manifest materialize` dataset
                                                        holds, or which export a directory or file is and
                                                        what trained on it), and the checkpoint's
                                                        evaluations' figures
    lineage which --rig RIG EPISODES...                 the same for the checkpoint the rig runs now
    lineage episodes RUN|CHECKPOINT                     the episode ids in that run
    lineage list                                        every registered checkpoint and export
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from teleop_flywheel.data.errors import LineageError
from teleop_flywheel.data.provenance.episode_sources import records_for
from teleop_flywheel.data.provenance.lineage_store import (
    Registry,
    content_files,
    content_fingerprint,
    now,
)
from teleop_flywheel.data.provenance.manifest import load_manifest
from teleop_flywheel.data.provenance.manifest_hash import manifest_sha256
from teleop_flywheel.data.provenance.materialize import PROVENANCE_KEY, provenance
from teleop_flywheel.data.provenance.reviews import admitted_by_review, admitted_lines
from teleop_flywheel.data.validate.dataset_record import RECORD_DIR, has_record
from teleop_flywheel.recording.mcap.exceptions import BagReadError
from teleop_flywheel.recording.mcap.reader import read_episode


def path_checkpoint_id(path: Path, files: dict[str, str] | None = None) -> str:
    """The id of a checkpoint given as a path (another stack's directory or file): name and content
    (`files`: its `content_files`, if already computed)."""
    return f"{path.resolve().name}:{content_fingerprint(content_files(path) if files is None else files)[:12]}"


def register_checkpoint(registry: Path, checkpoint: str, manifest: Path, run: str | None = None,
                        training: dict[str, Any] | None = None, checkpoint_path: Path | None = None) -> dict[str, Any]:
    """Register and save (one transaction under the registry's lock): two concurrent registrations
    never lose an entry, and an entry, once written, is never replaced (checkpoint ids are never reused).
    `manifest` may be an export's output instead (a directory, or a file that is not JSON)."""
    is_export = manifest.is_dir() or (manifest.is_file() and not _starts_as_json(manifest))
    reg = Registry.load(registry)
    if is_export:
        reg.register_on_export(checkpoint, manifest, run, checkpoint_path)
    else:
        reg.register(checkpoint, manifest, run, training)
    reg.save()  # checks again, in its transaction, against what another process saved meanwhile
    return Registry.load(registry).which(checkpoint)


def _starts_as_json(path: Path) -> bool:
    """A manifest is a JSON object; an export's file (HDF5, MCAP, TFRecord) is not, whatever its name."""
    with path.open("rb") as f:
        return f.read(4096).lstrip().startswith(b"{")


def register_export(registry: Path, fmt: str, out: Path, episodes: list[dict[str, Any]], source_dataset: str,
                    manifest: Path | None = None, options: dict[str, Any] | None = None,
                    files: dict[str, str] | None = None) -> dict[str, Any]:
    """Record an export's output (written, renamed into place) with the episodes each file holds
    (`episodes`: each {"episode_id", "source_episode_index"} and, for a file per episode, "file"),
    under its id `<format>:<fingerprint, 16 hex>`. The same content exported again is the same entry
    (its `out` is where it was first written). `files`: the digests of the files the exporter hashed
    as it wrote them (the others are hashed here)."""
    files = content_files(out, files)
    fingerprint = content_fingerprint(files)
    entry: dict[str, Any] = {"export": f"{fmt}:{fingerprint[:16]}", "format": fmt, "out": str(out.resolve()),
                             "fingerprint": fingerprint, "files": files, "episodes": episodes,
                             "source_dataset": source_dataset, "options": options or {}, "registered": now()}
    if manifest is not None:
        data = load_manifest(manifest)
        entry.update({"manifest_path": str(manifest.resolve()), "manifest_sha256": manifest_sha256(data),
                      "manifest": data})
    reg = Registry.load(registry)
    reg.exports.added[entry["export"]] = entry
    reg.save()  # the same content exported before: that entry stays
    return Registry.load(registry).exports[entry["export"]]


def add_evaluation(registry: Path, checkpoint: str, figures: dict[str, Any]) -> None:
    """Append one evaluation's figures to `checkpoint`'s list (one row: the registry is not rewritten)."""
    reg = Registry.load(registry)
    reg.add_evaluation(checkpoint, figures)
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


def describe_export(export: dict[str, Any]) -> str:
    """An export's line and what it holds: episodes → manifest → dataset."""
    eps = export["episodes"]
    options = ", ".join(f"{k} {v}" for k, v in sorted(export["options"].items()) if v is not None)
    ids = ", ".join(e["episode_id"][:12] for e in eps[:4]) + (", ..." if len(eps) > 4 else "")
    indices = ", ".join(str(e["source_episode_index"]) for e in eps)
    m = export.get("manifest")
    trained_from = (f"  manifest   {export['manifest_path']} (sha256 {export['manifest_sha256'][:16]}), "
                    f"filter {m['filter'] or 'none'}\n"
                    f"  dataset    {m['dataset']}  fingerprint {m['fingerprint'][:16]}") if m else (
                    "  manifest   none: the whole dataset was exported\n"
                    f"  dataset    {export['source_dataset']}")
    return (f"  export     {export['export']} ({export['format']}{', ' + options if options else ''}) "
            f"{export['out']}, {len(export['files'])} files, exported {export['registered']}\n"
            f"  episodes   {len(eps)} (source indices {indices}): {ids}\n{trained_from}")


def source_summary(entry: dict[str, Any], reg: Registry) -> str:
    """One line: what trained a registered checkpoint (an evaluation report's lineage column)."""
    if "export" in entry:
        export = reg.exports.get(entry["export"], {})
        return (f"run {entry['run']}, export {entry['export']} at {export.get('out', '?')} "
                f"({len(export.get('episodes', []))} episodes)")
    return (f"run {entry['run']}, manifest {entry['manifest_path']} (sha256 {entry['manifest_sha256'][:12]}, "
            f"{len(entry['manifest'].get('episodes', []))} episodes)")


def describe(entry: dict[str, Any], reg: Registry | None = None) -> str:
    if "export" in entry:
        path = f"\n  path       {entry['checkpoint_path']}" if entry.get("checkpoint_path") else ""
        export = (reg.exports if reg else {}).get(entry["export"])
        body = describe_export(export) if export else f"  export     {entry['export']} (not in this registry)"
        return (f"checkpoint {entry['checkpoint']}  <-  run {entry['run']}, registered {entry['registered']}"
                f"{path}\n{body}")
    m = entry["manifest"]
    t = entry.get("training")
    trained = (f"\n  trained    {t['policy']}, {t['steps']} steps, batch {t['batch_size']}, seed {t['seed']}: "
               f"{t['path']}") if t else ""
    return (f"checkpoint {entry['checkpoint']}  <-  run {entry['run']}\n"
            f"  manifest   {entry['manifest_path']} (sha256 {entry['manifest_sha256'][:16]})\n"
            f"  dataset    {m['dataset']}  fingerprint {m['fingerprint'][:16]}\n"
            f"  episodes   {m['episode_count']} ({m['frame_count']} frames), filter {m['filter'] or 'none'}\n"
            f"  created    {m['created']}, registered {entry['registered']}{trained}")


def which_dataset(reg: Registry, root: Path, as_json: bool) -> str:
    """The manifest a materialized dataset holds, and the checkpoints registered as trained on it."""
    record = provenance(root)
    admitted = admitted_by_review(root)
    if record is None and has_record(root):  # made by convert: its reviews are its lineage
        if as_json:
            return json.dumps({"dataset": str(root), "admitted_by_review": admitted}, indent=2)
        return "\n".join([f"dataset {root}  <-  convert (its verdicts in {RECORD_DIR}); "
                          f"{len(admitted)} episode(s) admitted by review", *admitted_lines(admitted)])
    if record is None:
        raise LineageError(f"{root}: a dataset, but not one `manifest materialize` or `convert` wrote (no "
                           f"{PROVENANCE_KEY} in meta/info.json, no {RECORD_DIR}): `lineage which` takes a "
                           "checkpoint id, a bag or a dataset")
    trained = reg.trained_on(manifest_sha=record["manifest_sha256"])
    if as_json:
        return json.dumps({"dataset": str(root), **record, "checkpoints": trained, "admitted_by_review": admitted},
                          indent=2)
    return "\n".join([
        f"dataset {root}  <-  manifest {record['manifest']} (sha256 {record['manifest_sha256'][:16]})",
        f"  source     {record['dataset']}  fingerprint {record['fingerprint'][:16]}",
        f"  episodes   {len(record['source_episodes'])} (source indices {record['source_episodes']}), "
        f"videos {record['videos']}",
        f"  trained    {', '.join(trained) or 'no registered checkpoint'}", *admitted_lines(admitted)])


def is_bag(path: Path) -> bool:
    return path.suffix == ".mcap" or (path.is_dir() and (any(path.glob("*.mcap"))
                                                         or (path / "metadata.yaml").is_file()))


def which_export(reg: Registry, export: dict[str, Any], as_json: bool) -> str:
    """Which export an output is, and the checkpoints registered as trained on it."""
    trained = reg.trained_on(export=export["export"])
    if as_json:
        return json.dumps({k: v for k, v in export.items() if k != "manifest"} | {"checkpoints": trained}, indent=2)
    return (describe_export(export).removeprefix("  ")
            + f"\n  trained    {', '.join(trained) or 'no registered checkpoint'}")


def checkpoint_json(reg: Registry, entry: dict[str, Any], evaluations: list[dict[str, Any]]) -> str:
    answer = {k: v for k, v in entry.items() if k != "manifest"} | {"evaluations": evaluations}
    if "export" in entry:
        export = reg.exports.get(entry["export"], {})
        answer |= {"exported": {k: v for k, v in export.items() if k != "manifest"},
                   "episode_count": len(export.get("episodes", []))}
        if "manifest" in entry:
            answer["fingerprint"] = entry["manifest"]["fingerprint"]
    else:
        answer |= {"fingerprint": entry["manifest"]["fingerprint"], "episode_count": entry["manifest"]["episode_count"]}
    return json.dumps(answer, indent=2)

