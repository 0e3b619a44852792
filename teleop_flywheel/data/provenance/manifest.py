"""`teleop-flywheel manifest create|verify`: the frozen list of content-addressed episodes a run used.

A training run consumes a manifest, never a directory scan, so "which episodes were in run 47" has
an exact answer forever. Each episode is identified twice:
- `episode_id`: the converter's content id of the source bag (column `episode_id` of the episodes
  table: id v2, over the messages and the episode metadata), or, for datasets without one, the
  hash of the episode's data rows;
- `data_sha256`: SHA-256 over the episode's data rows — every non-video column except the
  positional `index`, `episode_index` and `task_index`, column by column in name order (name,
  dtype, shape, raw little-endian bytes), then its task strings. Renumbering or moving an
  episode keeps both; changing one value changes `data_sha256`.
A manifest (format 4) also hashes everything else training reads, per episode (`manifest_hash.py`:
its episodes-table row, its task texts, its packets in each video) and the files holding the
episodes whole, so a flipped video byte, re-ordered episodes in a video, a flipped outcome or an
edited task text is a named change. A manifest of an older format is refused with the command
that upgrades it (`teleop-flywheel migrate`, `data/migrate.py`).

`--filter EXPR` (repeatable, all must hold) is an expression over the episodes table's columns,
scores included (`data/provenance/filter_expr.py`): the curation's decision, written down. The manifest
keeps the expressions (`filter`) and, per episode, the values of the columns they read
(`filter_values`, by episode id): `verify` evaluates the expressions again and names every manifest
episode whose value of such a column changed (a score the dataset's growth moved, an outcome
flipped), with the column, the old and the new value.
`verify` proves a dataset (after the manifest's own filter) is exactly the manifest, naming every
added, removed and changed episode and file, and exits non-zero otherwise.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from teleop_flywheel.data.errors import DatasetError
from teleop_flywheel.data.lerobot.dataset import LeRobotDataset, episode_spans
from teleop_flywheel.data.lerobot.episode_table import episode_records
from teleop_flywheel.data.provenance.filter_expr import Filter, episode_values
from teleop_flywheel.data.provenance.manifest_hash import compare_parts, episode_parts, file_sha256, info_sha256, plain

FORMAT_PREFIX = "teleop_flywheel.manifest/"
FORMAT_VERSION = 4
FORMAT = f"{FORMAT_PREFIX}{FORMAT_VERSION}"
ID_VERSION = 2
POSITIONAL = ("index", "episode_index", "task_index")


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


def converter_ids(ds: LeRobotDataset) -> dict[int, str]:
    """{episode: the converter's content id (`episode_id`)}, for the episodes that have one."""
    out: dict[int, str] = {}
    for row in ds.episodes.to_dict("records"):
        if _present(row.get("episode_id")):
            out[int(row["episode_index"])] = str(row["episode_id"])
    return out


def _present(value: Any) -> bool:
    return value is not None and not (isinstance(value, float) and np.isnan(value)) and value != ""


def identities(ds: LeRobotDataset) -> list[EpisodeIdentity]:
    """Every episode's ids, in episode order (one projection read of the content columns)."""
    names = content_columns(ds)
    cols = ds.columns(["episode_index", *names])
    spans = episode_spans(cols["episode_index"], cols.get("frame_index"))
    arrays = {n: np.ascontiguousarray(spans.take(cols[n])) for n in names}
    records = {r.episode_index: r for r in episode_records(ds)}
    ids = converter_ids(ds)
    out = []
    for e, lo, hi in zip(spans.episode_index, spans.start, spans.stop, strict=True):
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
        ep_id = ids.get(int(e)) or digest
        out.append(EpisodeIdentity(int(e), ep_id, digest, int(hi - lo), tasks[0] if tasks else ""))
    return out


def fingerprint(entries: list[EpisodeIdentity]) -> str:
    """Order-independent hash of a set of episodes (ids and contents)."""
    lines = sorted(f"{e.episode_id}:{e.data_sha256}" for e in entries)
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


# --------------------------------------------------------------------------- filters
@dataclass
class Selection:
    """The episodes a manifest's filters keep, and what the filters read of every episode."""

    filter: Filter
    chosen: set[int]
    values: dict[int, dict[str, Any]]  # episode -> {column the filter reads: its value, as stored}


def selection(ds: LeRobotDataset, filters: list[str]) -> Selection:
    """Parse the filters against the dataset's columns (FilterError: one line naming the expression
    and position) and evaluate them on every episode."""
    known, values = episode_values(ds)
    flt = Filter.compile(filters, known)
    chosen = {e for e, v in values.items() if flt.keeps(v)}
    used = {e: {c: plain(v.get(c)) for c in flt.columns} for e, v in values.items()}
    return Selection(flt, chosen, used)


def select(ds: LeRobotDataset, filters: list[str]) -> set[int]:
    """Episode indices passing every filter (all episodes when there is none)."""
    return selection(ds, filters).chosen


# --------------------------------------------------------------------------- create / verify
def task_indices(ds: LeRobotDataset) -> dict[int, list[int]]:
    """{episode: the task_index values of its data rows}."""
    if not ds.has_column("task_index"):
        return {}
    cols = ds.columns(["episode_index", "task_index"])
    # the distinct (episode, task) pairs, sorted: one pass over the frames (a mask per episode was
    # episodes x frames: 4.6 s of a 9 s manifest at 10,000 episodes of 100 frames)
    pairs = np.unique(np.stack([np.asarray(cols["episode_index"], dtype=np.int64),
                                np.asarray(cols["task_index"], dtype=np.int64)], axis=1), axis=0)
    out: dict[int, list[int]] = {}
    for e, t in pairs.tolist():
        out.setdefault(e, []).append(t)
    return out


def _entries(ds: LeRobotDataset, chosen: set[int]) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """Manifest episode entries (ids, data hash, per-episode parts) and the whole-file hashes."""
    entries = [asdict(e) for e in identities(ds) if e.episode_index in chosen]
    parts, files = episode_parts(ds, [e["episode_index"] for e in entries], task_indices(ds))
    for e in entries:
        e.update(parts[e["episode_index"]])
    return entries, files


def fingerprint_parts(entries: list[dict[str, Any]], files: dict[str, str]) -> str:
    lines = sorted(json.dumps({k: v for k, v in e.items() if k not in ("episode_index",)}, sort_keys=True)
                   for e in entries)
    return hashlib.sha256(("\n".join(lines) + json.dumps(files, sort_keys=True)).encode()).hexdigest()


def create(ds: LeRobotDataset, filters: list[str] | None = None) -> dict[str, Any]:
    filters = list(filters or [])
    return freeze(ds, select(ds, filters), filters, dt.datetime.now(dt.UTC).isoformat(timespec="seconds"))


def freeze(ds: LeRobotDataset, chosen: set[int], filters: list[str], created: str) -> dict[str, Any]:
    """The manifest of the `chosen` episodes (what `filters` selected when it was `created`), with
    the values of the columns the filters read, per episode id."""
    entries, files = _entries(ds, chosen)
    used = selection(ds, filters).values
    return {
        "format": FORMAT,
        "id_version": ID_VERSION,
        "created": created,
        "dataset": os.path.abspath(ds.root),
        "repo_id": ds.repo_id,
        "filter": filters,
        "filter_values": {e["episode_id"]: used[e["episode_index"]] for e in entries} if filters else {},
        "fingerprint": fingerprint_parts(entries, files),
        "episode_count": len(entries),
        "frame_count": sum(e["length"] for e in entries),
        "info_sha256": info_sha256(ds.info),
        "files": files,
        "episodes": entries,
    }


def load_manifest(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DatasetError(f"{path}: cannot read manifest: {exc}") from None
    version = format_version(data)
    if version is not None and version < FORMAT_VERSION:
        raise DatasetError(f"{path}: manifest format v{version} is older than this reader; "
                           f"run `teleop-flywheel migrate {path}`")
    if version != FORMAT_VERSION or "episodes" not in data:
        raise DatasetError(f"{path}: not a {FORMAT} manifest")
    return data


def format_version(data: Any) -> int | None:
    """N of a `teleop_flywheel.manifest/N` document; None if it is none."""
    fmt = data.get("format") if isinstance(data, dict) else None
    if not isinstance(fmt, str) or not fmt.startswith(FORMAT_PREFIX) or not fmt[len(FORMAT_PREFIX):].isdigit():
        return None
    return int(fmt[len(FORMAT_PREFIX):])


@dataclass
class Verification:
    matched: int
    added: list[EpisodeIdentity]
    removed: list[dict[str, Any]]
    changed: list[tuple[dict[str, Any], EpisodeIdentity, list[str]]]
    fingerprint: str
    files: list[str] = field(default_factory=list)  # changed or missing files, with the episodes in them

    @property
    def ok(self) -> bool:
        return not (self.added or self.removed or self.changed or self.files)

    def lines(self) -> list[str]:
        out = [f"added   episode {e.episode_index} id {e.episode_id} ({e.length} frames)" for e in self.added]
        out += [
            f"removed episode {m['episode_index']} id {m['episode_id']} ({m['length']} frames)" for m in self.removed
        ]
        for m, e, parts in self.changed:
            what = "; ".join(parts) or f"content {m['data_sha256'][:12]} -> {e.data_sha256[:12]}"
            out.append(f"changed episode {m['episode_index']} id {m['episode_id']}: {what} "
                       f"(now episode {e.episode_index}, {e.length} frames)")
        out += self.files
        return out


def _file_changes(ds: LeRobotDataset, manifest: dict[str, Any]) -> list[str]:
    holders: dict[str, list[int]] = {}
    for m in manifest["episodes"]:
        for rel in [m.get("data_file")] + [v.get("file") for v in (m.get("videos") or {}).values()]:
            if rel:
                holders.setdefault(rel, []).append(int(m["episode_index"]))
    out = []
    for rel, digest in sorted((manifest.get("files") or {}).items()):
        path = ds.files / rel
        now = file_sha256(path) if path.is_file() else None
        if now != digest:
            what = "missing" if now is None else f"sha256 {digest[:12]} -> {now[:12]}"
            out.append(f"changed file {rel}: {what} (holds manifest episode(s) {holders.get(rel, [])})")
    if manifest.get("info_sha256") and manifest["info_sha256"] != info_sha256(ds.info):
        out.append("changed file meta/info.json: fps, features or layout differ from the manifest's")
    return out


def filter_changes(frozen: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """The filter columns whose value changed since the manifest froze them, with both values (the
    columns the filter being verified reads: `now`'s)."""
    return [f"filter column {c}: {json.dumps(frozen.get(c))} -> {json.dumps(v)}"
            for c, v in sorted(now.items()) if c in frozen and frozen[c] != v]


def verify(ds: LeRobotDataset, manifest: dict[str, Any], subset: bool = False) -> Verification:
    """Compare the dataset (after the manifest's filter) with the manifest; subset=True ignores additions.
    A manifest episode whose filter columns changed is a change naming them, whether or not it still
    passes the filter."""
    sel = selection(ds, manifest.get("filter", []))
    every = identities(ds)
    frozen = {m["episode_id"]: m for m in manifest["episodes"]}
    stored = manifest.get("filter_values") or {}
    moved = {e.episode_id: what for e in every if e.episode_id in stored
             and (what := filter_changes(stored[e.episode_id], sel.values.get(e.episode_index, {})))}
    now = [e for e in every if e.episode_index in sel.chosen or e.episode_id in moved]
    by_id = {e.episode_id: e for e in now}
    changed = [(m, by_id[i], (["data rows"] if by_id[i].data_sha256 != m["data_sha256"] else [])
                + moved.get(i, []))
               for i, m in frozen.items() if i in by_id]
    removed = [m for i, m in frozen.items() if i not in by_id]
    added = [] if subset else [e for i, e in by_id.items() if i not in frozen]
    # Datasets without converter ids are addressed by content: an edit shows as removed + added at
    # the same episode_index; report it as the change it is.
    added_at = {e.episode_index: e for e in added}
    for m in list(removed):
        e = added_at.get(m["episode_index"])
        if e is not None and m["episode_id"] == m["data_sha256"] and e.episode_id == e.data_sha256:
            changed.append((m, e, ["data rows"]))
            removed.remove(m)
            added.remove(e)
    result = Verification(0, added, removed, [], fingerprint([e for e in now if e.episode_index in sel.chosen]))
    parts, _ = episode_parts(ds, [e.episode_index for _, e, _ in changed], task_indices(ds))
    for m, e, what in changed:
        what += compare_parts(m, parts.get(e.episode_index, {}))
    result.files = _file_changes(ds, manifest)
    result.changed = [c for c in changed if c[2]]
    result.matched = len(frozen) - len(removed) - len(result.changed)
    return result

