"""The lineage registry's store (`lineage.py` says what it records and answers): checkpoints,
exports and evaluations, each manifest stored once.

The registry is a SQLite database (format lineage/2) in WAL mode at that path, whatever its name: a
lookup reads one indexed row and a registration writes one transaction, so neither grows with the
number of checkpoints (bench/scale.py), and several processes (trainings, `eval watch`, exports)
write at once without losing an entry. Each manifest is stored once, under its sha256, however many
checkpoints and exports it trained. Why not JSON lines or a file per entry: appending lines still
needs a full read to look one up or to refuse a reused id, and a file per entry puts thousands of
files in a directory and leaves the uniqueness check racy; SQLite gives indexed lookups and one
transaction for check-then-insert, in one file in Python's standard library. WAL needs a local disk
(not NFS). A lineage/1 JSON registry at the path (`lineage.json`, the name scripts and
`$TELEOP_FLYWHEEL_LINEAGE` give) is read as it is; the first write migrates it, whole, into a
database renamed over it, and keeps the JSON beside it as `lineage.v1.json` (`legacy_backup`):
the path a user named is their registry still, with its history.

A listing (`lineage list`) reads each entry's few listed fields in one query, each manifest's episode
count once, never the manifests' episodes. An export is found by the fingerprint of its content
(`content_files`, `content_fingerprint`): an indexed lookup.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import sqlite3
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

from teleop_flywheel.data.errors import LineageError
from teleop_flywheel.data.filelock import locked
from teleop_flywheel.data.provenance.manifest import load_manifest
from teleop_flywheel.data.provenance.manifest_hash import file_sha256, manifest_sha256

FORMAT = "teleop_flywheel.lineage/2"
LEGACY_FORMAT = "teleop_flywheel.lineage/1"
ENV = "TELEOP_FLYWHEEL_LINEAGE"
_SQLITE_MAGIC = b"SQLite format 3\x00"
_BUSY_TIMEOUT_S = 60.0
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS manifests (sha256 TEXT PRIMARY KEY, body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS checkpoints (id TEXT PRIMARY KEY, run TEXT NOT NULL, manifest_sha256 TEXT,
                                        export TEXT, entry TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS checkpoints_run ON checkpoints (run);
CREATE INDEX IF NOT EXISTS checkpoints_manifest ON checkpoints (manifest_sha256);
CREATE TABLE IF NOT EXISTS exports (id TEXT PRIMARY KEY, fingerprint TEXT NOT NULL, entry TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS exports_fingerprint ON exports (fingerprint);
CREATE TABLE IF NOT EXISTS evaluations (seq INTEGER PRIMARY KEY, checkpoint TEXT NOT NULL, figures TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS evaluations_checkpoint ON evaluations (checkpoint);
"""


# `lineage list`: the listed fields only; a manifest's episode count read once however many
# checkpoints it trained (MATERIALIZED: not once per joined row).
_LIST_CHECKPOINTS = """
WITH counts AS MATERIALIZED (
    SELECT sha256, json_extract(body, '$.episode_count') AS n FROM manifests
    WHERE sha256 IN (SELECT manifest_sha256 FROM checkpoints WHERE export IS NULL))
SELECT c.id, c.run, json_extract(c.entry, '$.registered'), c.export,
       CASE WHEN c.export IS NULL THEN counts.n ELSE json_array_length(e.entry, '$.episodes') END
FROM checkpoints c LEFT JOIN counts ON counts.sha256 = c.manifest_sha256 AND c.export IS NULL
LEFT JOIN exports e ON e.id = c.export ORDER BY c.rowid
"""
_LIST_EXPORTS = """
SELECT id, json_array_length(entry, '$.episodes'), json_extract(entry, '$.registered'), json_extract(entry, '$.out')
FROM exports ORDER BY rowid
"""


def default_registry() -> Path:
    if os.environ.get(ENV):
        return Path(os.environ[ENV])
    home = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share") / "teleop_flywheel"
    legacy = home / "lineage.json"  # where lineage/1 kept it: a user's registry stays where it is
    return legacy if legacy.exists() else home / "lineage.sqlite"


def content_files(path: Path, known: dict[str, str] | None = None) -> dict[str, str]:
    """sha256 of every file of an output: relative POSIX path → hex digest (a single file: under ''),
    hidden names skipped (a file manager's droppings are not the export). `known`: digests the
    writer already took, by the same names; every other file is read and hashed here."""
    known = known or {}
    if path.is_file():
        return {"": known.get("") or file_sha256(path)}
    if not path.is_dir():
        raise LineageError(f"{path}: no such file or directory")
    rels = [p.relative_to(path) for p in sorted(path.rglob("*")) if p.is_file()]
    return {r.as_posix(): known.get(r.as_posix()) or file_sha256(path / r) for r in rels
            if not any(part.startswith(".") for part in r.parts)}


def content_fingerprint(files: dict[str, str]) -> str:
    """One sha256 over an output's file names and contents: where the output lies does not change it."""
    return hashlib.sha256(json.dumps(sorted(files.items())).encode()).hexdigest()



def now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def _connect(path: Path) -> sqlite3.Connection:
    """A connection in autocommit mode (transactions are explicit), waiting for another writer
    rather than failing; FULL sync: a commit that returned is on disk, as the JSON's fsync was.
    SQLite opens its side files (`-wal`, `-shm`, `-journal`) following symlinks: one planted there
    is refused, so the registry's writes never land in another file."""
    for side in ("-wal", "-shm", "-journal"):
        if path.with_name(path.name + side).is_symlink():
            raise LineageError(f"{path}{side}: a symlink beside the lineage registry; refused (remove it)")
    conn = sqlite3.connect(path, timeout=_BUSY_TIMEOUT_S, isolation_level=None)
    conn.execute("PRAGMA synchronous=FULL")
    return conn


@contextmanager
def _db(path: Path) -> Iterator[sqlite3.Connection]:
    """A connection, closed after the block; SQLite's errors (a full disk, a damaged file) as one
    line naming the registry."""
    try:
        with closing(_connect(path)) as conn:
            yield conn
    except sqlite3.Error as exc:
        raise LineageError(f"{path}: lineage registry: {exc}") from None


def _inspect(path: Path) -> tuple[str, dict[str, dict[str, Any]]]:
    """(kind, legacy): 'sqlite', 'json' (a lineage/1 registry, read as it is: its tables; migrated by
    the first write) or 'none'. One open file serves both the look and the read: a writer migrating
    the JSON renames a database over it, and a reader that looked, then opened the path again,
    parsed the database as JSON (four writers at once, at load: one exited on "unreadable")."""
    try:
        with path.open("rb") as f:
            head = f.read(len(_SQLITE_MAGIC))
            if head == _SQLITE_MAGIC:
                return "sqlite", {}
            if not head.lstrip().startswith(b"{"):
                raise LineageError(f"{path}: not a lineage registry (neither {FORMAT} SQLite nor {LEGACY_FORMAT} "
                                   "JSON)")
            raw = head + f.read()
    except FileNotFoundError:
        return "none", {}
    except OSError as exc:
        raise LineageError(f"{path}: unreadable lineage registry: {exc.strerror or exc}") from None
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise LineageError(f"{path}: unreadable lineage registry: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != LEGACY_FORMAT:
        raise LineageError(f"{path}: not a {LEGACY_FORMAT} registry")
    return "json", {k: dict(data.get(k, {})) for k in ("checkpoints", "evaluations", "exports")}


def legacy_backup(path: Path) -> Path:
    """Where the first write keeps a lineage/1 JSON registry it migrated: lineage.json → lineage.v1.json."""
    return path.with_name(f"{path.stem}.v1{path.suffix or '.json'}")


class _Table(Mapping[str, Any]):
    """One of the registry's tables: the entries added in this process (not yet saved), then the
    lineage/1 JSON read as legacy, then the SQLite store, one indexed row per lookup (a lookup's
    cost does not grow with the registry)."""

    def __init__(self, registry: Registry, name: str, added: dict[str, Any] | None = None) -> None:
        self._registry, self._name = registry, name
        self.added: dict[str, Any] = dict(added or {})

    def _legacy(self) -> dict[str, Any]:
        return self._registry._legacy.get(self._name, {})

    def __getitem__(self, key: str) -> Any:
        if self._name == "evaluations":  # a list: what is stored, then what was appended here
            found = self._legacy().get(key, []) + self._registry._stored_evaluations(key) + self.added.get(key, [])
            if not found:
                raise KeyError(key)
            return found
        for source in (self.added, self._legacy()):
            if key in source:
                return source[key]
        entry = self._registry._stored(self._name, key)
        if entry is None:
            raise KeyError(key)
        return entry

    def __contains__(self, key: object) -> bool:
        try:
            self[str(key)]
        except KeyError:
            return False
        return True

    def __iter__(self) -> Iterator[str]:
        return iter(dict.fromkeys([*self.added, *self._legacy(), *self._registry._stored_keys(self._name)]))

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def items(self) -> list[tuple[str, Any]]:  # type: ignore[override]  # one query, not one per key
        if self._name == "evaluations":
            return [(k, self[k]) for k in self]
        stored = self._registry._stored_all(self._name)
        merged = {**stored, **self._legacy(), **self.added}
        return list(merged.items())

    def values(self) -> list[Any]:  # type: ignore[override]
        return [v for _, v in self.items()]


class Registry:
    """The lineage registry at `path`: a SQLite database (format lineage/2, WAL mode) of checkpoints,
    exports and evaluations, each manifest stored once under its sha256. Lookups read one row;
    `save()` writes what was added in one transaction, under the registry's lock. A lineage/1 JSON
    registry at `path` is read as it is; the first save migrates it (the JSON is kept as
    `legacy_backup(path)`). Built from dicts (`Registry(path, {id: entry})`), those are its entries
    added, written by `save()`."""

    def __init__(self, path: str | Path, checkpoints: dict[str, dict[str, Any]] | None = None,
                 evaluations: dict[str, list[dict[str, Any]]] | None = None,
                 exports: dict[str, dict[str, Any]] | None = None) -> None:
        self.path = Path(path)
        self._legacy: dict[str, dict[str, Any]] = {}
        self._sqlite = False
        self._manifests: dict[str, dict[str, Any]] = {}
        self.checkpoints = _Table(self, "checkpoints", checkpoints)
        self.evaluations = _Table(self, "evaluations", evaluations)
        self.exports = _Table(self, "exports", exports)

    @classmethod
    def load(cls, path: str | Path | None = None) -> Registry:
        reg = cls(Path(path) if path else default_registry())
        kind, legacy = _inspect(reg.path)
        if kind == "json":
            reg._legacy = legacy
        elif kind == "sqlite":
            reg._sqlite = True
            with _db(reg.path) as conn:
                _check_format(reg.path, conn)
        return reg

    def _query(self, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        if not self._sqlite:
            return []
        with _db(self.path) as conn:
            return conn.execute(sql, args).fetchall()

    def _manifest(self, sha: str) -> dict[str, Any]:
        if sha not in self._manifests:
            rows = self._query("SELECT body FROM manifests WHERE sha256 = ?", (sha,))
            if not rows:
                raise LineageError(f"{self.path}: manifest {sha[:16]} is referenced but not stored")
            self._manifests[sha] = json.loads(rows[0][0])
        return self._manifests[sha]

    def _entry(self, text: str) -> dict[str, Any]:
        entry: dict[str, Any] = json.loads(text)
        if "manifest_sha256" in entry:
            entry["manifest"] = self._manifest(entry["manifest_sha256"])
        return entry

    def _stored(self, table: str, key: str) -> dict[str, Any] | None:
        rows = self._query(f"SELECT entry FROM {table} WHERE id = ?", (key,))  # noqa: S608 (a table name of ours)
        return self._entry(rows[0][0]) if rows else None

    def _stored_keys(self, table: str) -> list[str]:
        column = "DISTINCT checkpoint" if table == "evaluations" else "id"
        return [r[0] for r in self._query(f"SELECT {column} FROM {table} ORDER BY rowid")]  # noqa: S608

    def _stored_all(self, table: str) -> dict[str, dict[str, Any]]:
        return {k: self._entry(e) for k, e in self._query(f"SELECT id, entry FROM {table} ORDER BY rowid")}  # noqa: S608

    def _stored_evaluations(self, checkpoint: str) -> list[dict[str, Any]]:
        return [json.loads(f) for (f,) in self._query(
            "SELECT figures FROM evaluations WHERE checkpoint = ? ORDER BY seq", (checkpoint,))]

    def listing(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """(checkpoints, exports), each oldest first, with only what `lineage list` prints: id, run,
        registered, export, episode count (checkpoints); id, episode count, registered, out (exports).
        One query per table: each manifest's episode count is read once, by SQLite (no manifest's
        episodes are parsed here), and no row is fetched twice."""
        checkpoints = [{"checkpoint": c, "run": run, "registered": when, "export": export, "episodes": n}
                       for c, run, when, export, n in self._query(_LIST_CHECKPOINTS)]
        exports = [{"export": e, "episodes": n, "registered": when, "out": out}
                   for e, n, when, out in self._query(_LIST_EXPORTS)]
        pending_exports = {**self._legacy.get("exports", {}), **self.exports.added}
        exports += [{"export": k, "episodes": len(e["episodes"]), "registered": e["registered"], "out": e["out"]}
                    for k, e in pending_exports.items()]
        counts = {e["export"]: e["episodes"] for e in exports}
        for k, e in {**self._legacy.get("checkpoints", {}), **self.checkpoints.added}.items():
            n = counts.get(e["export"]) if "export" in e else e["manifest"]["episode_count"]
            checkpoints.append({"checkpoint": k, "run": e["run"], "registered": e["registered"],
                                "export": e.get("export"), "episodes": n})
        return (sorted(checkpoints, key=lambda x: x["registered"]), sorted(exports, key=lambda x: x["registered"]))

    def save(self) -> None:
        """Write what was added, in one transaction under the registry's lock (an entry another
        process saved meanwhile is checked as `_add` checks: the same source is a no-op, another an
        error). A lineage/1 JSON registry is migrated first, whole, into a new database renamed over
        it; the JSON is kept as `legacy_backup(path)`."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with locked(self.path, what="lineage"):
            kind, legacy = _inspect(self.path)
            if kind == "sqlite":
                with _db(self.path) as conn:
                    _check_format(self.path, conn)
                    self._write(conn, {})
            else:
                fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".new", dir=self.path.parent)
                os.close(fd)
                try:
                    with _db(Path(tmp)) as conn:
                        conn.execute("PRAGMA journal_mode=WAL")
                        conn.executescript(_SCHEMA)
                        conn.execute("INSERT INTO meta VALUES ('format', ?)", (FORMAT,))
                        self._write(conn, legacy)
                    if kind == "json":
                        _keep(self.path, legacy_backup(self.path))
                    os.replace(tmp, self.path)
                finally:
                    Path(tmp).unlink(missing_ok=True)
            for table in (self.checkpoints, self.evaluations, self.exports):
                table.added.clear()
            self._legacy, self._sqlite = {}, True

    def _write(self, conn: sqlite3.Connection, legacy: dict[str, dict[str, Any]]) -> None:
        conn.execute("BEGIN IMMEDIATE")
        try:
            for ckpt, entry in [*legacy.get("checkpoints", {}).items(), *self.checkpoints.added.items()]:
                _put_checkpoint(conn, ckpt, entry)
            for eid, entry in [*legacy.get("exports", {}).items(), *self.exports.added.items()]:
                _put_manifest(conn, entry)
                conn.execute("INSERT OR IGNORE INTO exports VALUES (?, ?, ?)",
                             (eid, entry["fingerprint"], _entry_text(entry)))
            for source in (legacy.get("evaluations", {}), self.evaluations.added):
                for ckpt, figures in source.items():
                    conn.executemany("INSERT INTO evaluations (checkpoint, figures) VALUES (?, ?)",
                                     [(ckpt, json.dumps(f)) for f in figures])
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def _add(self, checkpoint: str, entry: dict[str, Any]) -> dict[str, Any]:
        """Record `entry` under `checkpoint`: the same source again is a no-op, another an error."""
        if not checkpoint:
            raise LineageError("checkpoint id must not be empty")
        old = self.checkpoints.get(checkpoint)
        if old is not None:
            _same_source(checkpoint, old, entry)
            return old
        self.checkpoints.added[checkpoint] = entry
        return entry

    def register(self, checkpoint: str, manifest_path: str | Path, run: str | None = None,
                 training: dict[str, Any] | None = None) -> dict[str, Any]:
        """Record checkpoint → manifest (and, from `train`, how it was trained: `training`, e.g. its
        path, policy type and steps). Re-registering the same pair is a no-op; a different one an error."""
        manifest = load_manifest(manifest_path)
        entry = {"checkpoint": checkpoint, "run": run or Path(manifest_path).stem,
                 "manifest_path": str(Path(manifest_path).resolve()), "manifest_sha256": manifest_sha256(manifest),
                 "registered": now(), "manifest": manifest}
        if training is not None:
            entry["training"] = training
        return self._add(checkpoint, entry)

    def register_on_export(self, checkpoint: str, export_path: Path, run: str | None = None,
                           checkpoint_path: Path | None = None) -> dict[str, Any]:
        """Record checkpoint → the export whose output `export_path` is (found by its content); the
        export's manifest, if it came from one, is the checkpoint's too."""
        export = self.find_export(export_path)
        entry: dict[str, Any] = {"checkpoint": checkpoint, "run": run or Path(export_path).name,
                                 "export": export["export"], "registered": now()}
        if checkpoint_path is not None:
            entry["checkpoint_path"] = str(checkpoint_path.resolve())
        if "manifest" in export:
            entry.update({k: export[k] for k in ("manifest_path", "manifest_sha256", "manifest")})
        return self._add(checkpoint, entry)

    def export_by_fingerprint(self, fingerprint: str) -> dict[str, Any] | None:
        """The registered export with that content fingerprint, or None (an indexed lookup)."""
        for source in (self.exports.added, self._legacy.get("exports", {})):
            found = next((e for e in source.values() if e["fingerprint"] == fingerprint), None)
            if found is not None:
                return found
        rows = self._query("SELECT entry FROM exports WHERE fingerprint = ? ORDER BY rowid LIMIT 1", (fingerprint,))
        return self._entry(rows[0][0]) if rows else None

    def find_export(self, path: Path, files: dict[str, str] | None = None) -> dict[str, Any]:
        """The registered export whose output has exactly `path`'s content (`files`: its
        `content_files`, if already computed)."""
        found = self.export_by_fingerprint(content_fingerprint(content_files(path) if files is None else files))
        if found is not None:
            return found
        raise LineageError(f"{path}: not the output of an export registered in {self.path} (its content matches "
                           f"none of the {len(self.exports)} registered; an edited export is another dataset; an "
                           "export made on another machine is in that machine's registry: give it with --registry)")

    def which(self, checkpoint: str) -> dict[str, Any]:
        try:
            return dict(self.checkpoints[checkpoint])
        except KeyError:
            known = ", ".join(sorted(self.checkpoints)) or "none"
            raise LineageError(f"checkpoint {checkpoint!r} is not in {self.path} (registered: {known})") from None

    def run_entry(self, run_or_checkpoint: str) -> dict[str, Any]:
        if run_or_checkpoint in self.checkpoints:
            return dict(self.checkpoints[run_or_checkpoint])
        for source in (self.checkpoints.added, self._legacy.get("checkpoints", {})):
            hits = [e for e in source.values() if e.get("run") == run_or_checkpoint]
            if hits:
                return dict(hits[0])
        rows = self._query("SELECT entry FROM checkpoints WHERE run = ? ORDER BY rowid LIMIT 1", (run_or_checkpoint,))
        if not rows:
            raise LineageError(f"no run or checkpoint {run_or_checkpoint!r} in {self.path}")
        return self._entry(rows[0][0])

    def trained_on(self, manifest_sha: str | None = None, export: str | None = None) -> list[str]:
        """The checkpoints registered as trained on that manifest (by sha256) or export (by id), sorted."""
        column, value = ("export", export) if export is not None else ("manifest_sha256", manifest_sha)
        found = {c for source in (self.checkpoints.added, self._legacy.get("checkpoints", {}))
                 for c, e in source.items() if e.get(column) == value}
        found.update(r[0] for r in self._query(f"SELECT id FROM checkpoints WHERE {column} = ?", (value,)))  # noqa: S608
        return sorted(found)

    def episodes(self, run_or_checkpoint: str) -> list[str]:
        entry = self.run_entry(run_or_checkpoint)
        if "export" in entry:
            return [e["episode_id"] for e in self.exports[entry["export"]]["episodes"]]
        return [e["episode_id"] for e in entry["manifest"]["episodes"]]

    def add_evaluation(self, checkpoint: str, figures: dict[str, Any]) -> None:
        """Append one evaluation's figures to `checkpoint`'s list (written by `save()`)."""
        self.evaluations.added.setdefault(checkpoint, []).append(figures)


def _check_format(path: Path, conn: sqlite3.Connection) -> None:
    try:
        row = conn.execute("SELECT value FROM meta WHERE key = 'format'").fetchone()
    except sqlite3.DatabaseError as exc:
        raise LineageError(f"{path}: unreadable lineage registry: {exc}") from None
    if row is None or row[0] != FORMAT:
        raise LineageError(f"{path}: not a {FORMAT} registry (format {row[0] if row else 'none'})")


def _keep(original: Path, backup: Path) -> None:
    """Keep the migrated JSON under `backup` (a hard link: the bytes stay where they were until the
    rename over `original`). A backup already there is kept if it holds the same bytes (an earlier
    migration that died before its rename), refused otherwise."""
    try:
        os.link(original, backup)
    except FileExistsError:
        if backup.read_bytes() != original.read_bytes():
            raise LineageError(f"{original}: cannot migrate the {LEGACY_FORMAT} registry: {backup} exists and "
                               "differs (move it away)") from None


def _entry_text(entry: dict[str, Any]) -> str:
    """An entry without its manifest: the manifest is stored once, under its sha256."""
    return json.dumps({k: v for k, v in entry.items() if k != "manifest"})


def _put_manifest(conn: sqlite3.Connection, entry: dict[str, Any]) -> None:
    if "manifest" in entry and conn.execute("SELECT 1 FROM manifests WHERE sha256 = ?",
                                            (entry["manifest_sha256"],)).fetchone() is None:
        conn.execute("INSERT INTO manifests VALUES (?, ?)", (entry["manifest_sha256"], json.dumps(entry["manifest"])))


def _put_checkpoint(conn: sqlite3.Connection, checkpoint: str, entry: dict[str, Any]) -> None:
    """Insert, or check against the entry another process saved first (never replaced)."""
    row = conn.execute("SELECT entry FROM checkpoints WHERE id = ?", (checkpoint,)).fetchone()
    if row is not None:
        _same_source(checkpoint, json.loads(row[0]), entry)
        return
    _put_manifest(conn, entry)
    conn.execute("INSERT INTO checkpoints VALUES (?, ?, ?, ?, ?)", (
        checkpoint, entry.get("run", ""), entry.get("manifest_sha256"), entry.get("export"), _entry_text(entry)))


def _same_source(checkpoint: str, old: dict[str, Any], entry: dict[str, Any]) -> None:
    if _trained_on(old) != _trained_on(entry):
        raise LineageError(f"checkpoint {checkpoint!r} is already registered to {_source_text(old)} "
                           f"(run {old['run']!r}); checkpoint ids are never reused")


def _trained_on(entry: dict[str, Any]) -> str:
    """What trained a checkpoint, by content: an export's id or a manifest's sha256."""
    return f"export {entry['export']}" if "export" in entry else f"manifest {entry['manifest_sha256']}"


def _source_text(entry: dict[str, Any]) -> str:
    return f"export {entry['export']}" if "export" in entry else f"manifest {entry['manifest_path']}"
