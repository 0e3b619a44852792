"""`teleop-flywheel manifest create|verify`: the frozen list of content-addressed episodes a run used.

A training run consumes a manifest, never a directory scan, so "which episodes were in run 47" has
an exact answer forever. Each episode is identified twice:
- `episode_id`: the converter's content hash of the source bag (column `episode_id` of the
  episodes table), or, for datasets without one, the hash of the episode's data rows;
- `data_sha256`: SHA-256 over the episode's data rows — every non-video column except the
  positional `index`, `episode_index` and `task_index`, column by column in name order (name,
  dtype, shape, raw little-endian bytes), then its task strings. Renumbering or moving an
  episode keeps both; changing one value changes `data_sha256`.
`verify` proves a dataset (after the manifest's own filter) is exactly the manifest, naming every
added, removed and changed episode, and exits non-zero otherwise.
"""
from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import operator
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from teleop_flywheel.core.files import FileExistsRefused, create_exclusive
from teleop_flywheel.data.episode_table import EpisodeRecord, episode_records
from teleop_flywheel.data.lerobot.reader import DatasetError, LeRobotDataset, episode_spans

FORMAT = "teleop_flywheel.manifest/1"
POSITIONAL = ("index", "episode_index", "task_index")
_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "!=": operator.ne, ">=": operator.ge, "<=": operator.le, "=": operator.eq, ">": operator.gt, "<": operator.lt,
}


@dataclass(frozen=True)
class EpisodeIdentity:
    episode_index: int
    episode_id: str
    data_sha256: str
    length: int
    task: str


def content_columns(ds: LeRobotDataset) -> list[str]:
    schema = ds.data_schema()
    visual = {n for n, f in ds.features.items() if f.is_visual}
    return sorted(n for n in schema.names if n not in POSITIONAL and n not in visual)


def identities(ds: LeRobotDataset) -> list[EpisodeIdentity]:
    """Every episode's ids, in episode order (one projection read of the content columns)."""
    names = content_columns(ds)
    cols = ds.columns(["episode_index", *names])
    spans = episode_spans(cols["episode_index"], cols.get("frame_index"))
    arrays = {n: np.ascontiguousarray(spans.take(cols[n])) for n in names}
    records = {r.episode_index: r for r in episode_records(ds)}
    out = []
    for e, lo, hi in zip(spans.episode_index, spans.start, spans.stop):
        h = hashlib.sha256()
        for n in names:
            part = arrays[n][lo:hi]
            if part.dtype == object:
                payload = "\x00".join(map(str, part.tolist())).encode()
            else:
                payload = part.astype(part.dtype.newbyteorder("<"), copy=False).tobytes()
            h.update(f"{n}|{part.dtype.str}|{part.shape[1:]}|".encode())
            h.update(payload)
        rec = records.get(int(e))
        tasks = rec.tasks if rec else []
        h.update(("tasks|" + "\x00".join(tasks)).encode())
        digest = h.hexdigest()
        ep_id = (rec.episode_id if rec else None) or digest
        out.append(EpisodeIdentity(int(e), ep_id, digest, int(hi - lo), tasks[0] if tasks else ""))
    return out


def fingerprint(entries: list[EpisodeIdentity]) -> str:
    """Order-independent hash of a set of episodes (ids and contents)."""
    lines = sorted(f"{e.episode_id}:{e.data_sha256}" for e in entries)
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


# --------------------------------------------------------------------------- filters
def parse_filter(expr: str) -> tuple[str, str, str]:
    for op in _OPS:  # two-character operators are listed first
        if op in expr:
            key, value = expr.split(op, 1)
            if key.strip():
                return key.strip(), op, value.strip().strip("'\"")
    raise ValueError(f"bad filter {expr!r}: expected COLUMN(=|!=|>=|<=|>|<)VALUE, e.g. outcome=success")


def _value(rec: EpisodeRecord, row: dict[str, Any], key: str) -> Any:
    if key == "task":
        return rec.task
    if hasattr(rec, key) and key != "extra":
        return getattr(rec, key)
    if key in row:
        return row[key]
    raise ValueError(f"filter column {key!r} is neither an episode field nor an episodes-table column")


def _matches(value: Any, op: str, wanted: str) -> bool:
    """Numbers compare as numbers; everything else as strings (None as "None")."""
    if isinstance(value, (int, float, np.number)) and not isinstance(value, bool):
        try:
            return bool(_OPS[op](float(value), float(wanted)))
        except ValueError:
            pass
    return bool(_OPS[op](str(value), wanted))


def select(ds: LeRobotDataset, filters: list[str]) -> set[int]:
    """Episode indices passing every filter (all episodes when there is none)."""
    parsed = [parse_filter(f) for f in filters]
    rows = {int(r["episode_index"]): r for r in ds.episodes.to_dict("records")}
    keep = set()
    for rec in episode_records(ds):
        if all(_matches(_value(rec, rows[rec.episode_index], k), op, v) for k, op, v in parsed):
            keep.add(rec.episode_index)
    return keep


# --------------------------------------------------------------------------- create / verify
def create(ds: LeRobotDataset, filters: list[str] | None = None) -> dict[str, Any]:
    filters = list(filters or [])
    chosen = select(ds, filters)
    entries = [e for e in identities(ds) if e.episode_index in chosen]
    return {
        "format": FORMAT,
        "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "dataset": str(ds.root.resolve()),
        "repo_id": ds.repo_id,
        "filter": filters,
        "fingerprint": fingerprint(entries),
        "episode_count": len(entries),
        "frame_count": sum(e.length for e in entries),
        "episodes": [asdict(e) for e in entries],
    }


def load_manifest(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise DatasetError(f"{path}: cannot read manifest: {exc}") from None
    if data.get("format") != FORMAT or "episodes" not in data:
        raise DatasetError(f"{path}: not a {FORMAT} manifest")
    return data


@dataclass
class Verification:
    matched: int
    added: list[EpisodeIdentity]
    removed: list[dict[str, Any]]
    changed: list[tuple[dict[str, Any], EpisodeIdentity]]
    fingerprint: str

    @property
    def ok(self) -> bool:
        return not (self.added or self.removed or self.changed)

    def lines(self) -> list[str]:
        out = [f"added   episode {e.episode_index} id {e.episode_id} ({e.length} frames)" for e in self.added]
        out += [f"removed episode {m['episode_index']} id {m['episode_id']} ({m['length']} frames)" for m in self.removed]
        out += [f"changed episode {m['episode_index']} id {m['episode_id']}: content {m['data_sha256'][:12]}"
                f" -> {e.data_sha256[:12]} (now episode {e.episode_index}, {e.length} frames)" for m, e in self.changed]
        return out


def verify(ds: LeRobotDataset, manifest: dict[str, Any], subset: bool = False) -> Verification:
    """Compare the dataset (after the manifest's filter) with the manifest; subset=True ignores additions."""
    chosen = select(ds, manifest.get("filter", []))
    now = [e for e in identities(ds) if e.episode_index in chosen]
    by_id = {e.episode_id: e for e in now}
    frozen = {m["episode_id"]: m for m in manifest["episodes"]}
    changed = [(m, by_id[i]) for i, m in frozen.items() if i in by_id and by_id[i].data_sha256 != m["data_sha256"]]
    removed = [m for i, m in frozen.items() if i not in by_id]
    added = [] if subset else [e for i, e in by_id.items() if i not in frozen]
    # Datasets without converter ids are addressed by content: an edit shows as removed + added at
    # the same episode_index; report it as the change it is.
    added_at = {e.episode_index: e for e in added}
    for m in list(removed):
        e = added_at.get(m["episode_index"])
        if e is not None and m["episode_id"] == m["data_sha256"] and e.episode_id == e.data_sha256:
            changed.append((m, e))
            removed.remove(m)
            added.remove(e)
    matched = len(frozen) - len(removed) - len(changed)
    return Verification(matched, added, removed, changed, fingerprint(now))


# --------------------------------------------------------------------------- CLI
def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True)
    c = sub.add_parser("create", help="freeze the dataset's episodes into a manifest")
    c.add_argument("dataset", type=Path)
    c.add_argument("--out", type=Path, required=True, help="manifest JSON to write (never overwritten)")
    c.add_argument("--filter", action="append", default=[], metavar="EXPR",
                   help="keep episodes where EXPR holds, e.g. outcome=success, operator!=ben, length>=200, "
                        "task='pick the brick' (repeatable; all must hold)")
    v = sub.add_parser("verify", help="prove a dataset is exactly a manifest")
    v.add_argument("dataset", type=Path)
    v.add_argument("manifest", type=Path)
    v.add_argument("--subset", action="store_true", help="only require the manifest's episodes (ignore additions)")
    v.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    try:
        ds = LeRobotDataset.open(args.dataset)
        if args.action == "create":
            if args.out.exists() or args.out.is_symlink():
                raise DatasetError(f"{args.out}: already exists; manifests are frozen and never overwritten, "
                                   "choose a new name")
            manifest = create(ds, args.filter)
            args.out.parent.mkdir(parents=True, exist_ok=True)
            try:
                create_exclusive(args.out, json.dumps(manifest, indent=1) + "\n")
            except FileExistsRefused as exc:
                raise DatasetError(str(exc)) from None
            print(f"wrote {args.out}: {manifest['episode_count']} episodes, {manifest['frame_count']} frames, "
                  f"fingerprint {manifest['fingerprint'][:16]}")
            return 0
        manifest = load_manifest(args.manifest)
        result = verify(ds, manifest, args.subset)
    except (DatasetError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps({"ok": result.ok, "matched": result.matched, "differences": result.lines(),
                          "fingerprint": result.fingerprint, "manifest_fingerprint": manifest["fingerprint"]}, indent=2))
    else:
        for line in result.lines():
            print(line)
        verdict = "OK: dataset matches" if result.ok else "MISMATCH: dataset differs from"
        print(f"{verdict} manifest {args.manifest} ({result.matched} of {len(manifest['episodes'])} episodes "
              f"identical{', subset check' if args.subset else ''})")
    return 0 if result.ok else 1
