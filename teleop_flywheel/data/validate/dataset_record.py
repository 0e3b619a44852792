"""A dataset's validation record: every verdict the converter reached on a bag meant for it (one per
episode id, the latest wins; rejected bags too), and their summary (`validator.summary`'s counts).

Its one reader (`Record`) and writer (`write_record`). An append adds a verdict or two to a record
of thousands, so the record is kept in pieces an append adds to, not one file rewritten whole:

    meta/validation/record.json               the index: the open verdicts (fewer than PIECE_LINES),
                                              the closed pieces (file, keys), the summary
    meta/validation/verdicts-000000-<sha>.jsonl  a closed piece: PIECE_LINES verdicts, one per line

A verdict is one line of compact JSON (`EpisodeReport.to_dict`'s, `path`, `name` and `episode_id`
first), kept as the text it was written as: a line read back and written again is the same text, so
only the verdicts added or replaced are encoded. The open verdicts fill a closed piece once there are
PIECE_LINES of them; closed pieces are never rewritten, but for a verdict replaced in one (a bag
converted again: rare) — then under a new name (its content's hash). An append therefore reads and
writes the index (the keys of every verdict, ~70 bytes each, and at most PIECE_LINES verdicts) and at
most one new piece, whatever the record holds.

The index is the record's one commit point: pieces are written first, each through a temporary file
under a name no index names yet, then the index replaced (`replace_atomic`), then the files it no
longer names removed. A kill at any step leaves the old index (and files no index names, removed by
the next write) or the new one: never half a record.

A record of one file (`meta/validation.json`, `validate --json`'s shape, as datasets converted before
the pieces hold) is read whole; the first write lays it out in pieces and removes it.
"""
from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from teleop_flywheel.core.files import replace_atomic
from teleop_flywheel.data.errors import DatasetError
from teleop_flywheel.data.validate.reasons import CODES, Reason
from teleop_flywheel.data.validate.validator import EpisodeReport, summary

RECORD_DIR = "meta/validation"
INDEX_PATH = f"{RECORD_DIR}/record.json"
LEGACY_PATH = "meta/validation.json"  # one file, written whole: datasets converted before the pieces
FORMAT = "teleop_flywheel.validation/2"
PIECE_LINES = 256  # the open verdicts an append rewrites, at most: about as many as a dataset of 100 holds
_PIECE = re.compile(r"verdicts-\d{6}-[0-9a-f]{16}\.jsonl")

_HEAD = f'{{"format": {json.dumps(FORMAT)}, "episodes": [\n'
_LEGACY_HEAD = '{"format": "teleop_flywheel.validation/1", "episodes": [\n'
_TAIL = "\n],\n"  # a verdict's line holds no newline (compact JSON escapes it): this ends the verdicts
# The start of a verdict's line as written here (EpisodeReport.to_dict's first fields: a JSON string cannot
# hold an unescaped quote, so this reads the three values exactly)
_STRING = r'"(?:[^"\\\n]|\\.)*"'
_LINE = re.compile(rf'\n\{{"path": ({_STRING}|null), "name": ({_STRING}|null), "episode_id": ({_STRING}|null)[,}}]')


def key(entry: dict[str, Any]) -> str:
    """What identifies a verdict in the record: its episode id, else its bag's name, else its path."""
    return str(entry.get("episode_id") or entry.get("name") or entry.get("path"))


def has_record(root: Path) -> bool:
    """The dataset at `root` holds a validation record (either layout)."""
    return (root / INDEX_PATH).is_file() or (root / LEGACY_PATH).is_file()


@dataclass
class Piece:
    """A closed piece: its file (in RECORD_DIR) and its verdicts' keys, in order; `no_id`: the positions
    of the verdicts without an episode id (a bag rejected before it had one)."""

    file: str
    keys: list[str]
    no_id: list[int] = field(default_factory=list)

    def ids(self) -> list[str | None]:
        gone = set(self.no_id)
        return [None if i in gone else k for i, k in enumerate(self.keys)]


@dataclass
class Record:
    """The record as read: its closed pieces, its open verdicts' lines (every verdict's, for a record of
    one file) with their keys and ids, and its summary (None: missing or malformed)."""

    root: Path
    pieces: list[Piece]
    lines: list[str]
    open_keys: list[str]
    open_ids: list[str | None]
    summary: dict[str, Any] | None

    @property
    def keys(self) -> list[str]:
        return [k for p in self.pieces for k in p.keys] + self.open_keys

    @property
    def ids(self) -> list[str | None]:
        return [i for p in self.pieces for i in p.ids()] + self.open_ids

    @classmethod
    def read(cls, root: Path) -> Record:
        """The record at `root` (empty when it has none). Of the verdicts, only the open ones' lines are
        read, and of each only its first fields (`_LINE`); the closed pieces' keys are in the index."""
        for rel, head in ((INDEX_PATH, _HEAD), (LEGACY_PATH, _LEGACY_HEAD)):
            path = root / rel
            try:
                text = path.read_text(encoding="utf-8")
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise DatasetError(f"{path}: unreadable validation record: {exc}") from None
            return cls._from_lines(root, text, head) or cls._parsed(root, path, text)
        return cls(root, [], [], [], [], None)

    @classmethod
    def _from_lines(cls, root: Path, text: str, head: str) -> Record | None:
        end = text.rfind(_TAIL)
        if not text.startswith(head) or end < len(head) - 1:
            return None
        body = text[len(head):end]
        lines = [line.removesuffix(",") for line in body.split("\n")] if body else []
        # one match per line start (none crosses a line; a literal start is searched fast): each line its own
        starts = _LINE.findall(text, len(head) - 1, end + 1)
        if len(starts) != len(lines) or not all(line.endswith("}") for line in lines):
            return None
        ids = [_string(episode_id) for _, _, episode_id in starts]
        keys = [i or _string(name) or str(_string(path)) for i, (path, name, _) in zip(ids, starts, strict=True)]
        try:
            tail = json.loads("{" + text[end + len(_TAIL):])
        except ValueError:
            return None
        summ = tail.get("summary") if isinstance(tail, dict) else None
        return cls(root, _pieces(root, tail), lines, keys, ids, summ if isinstance(summ, dict) else None)

    @classmethod
    def _parsed(cls, root: Path, path: Path, text: str) -> Record:
        """A record in another layout (edited by hand, or by another writer): parsed whole."""
        try:
            doc = json.loads(text)
        except ValueError as exc:
            raise DatasetError(f"{path}: unreadable validation record: {exc}") from None
        doc = doc if isinstance(doc, dict) else {}
        entries = [e for e in doc.get("episodes", []) if isinstance(e, dict)]
        summ = doc.get("summary")
        return cls(root, _pieces(root, doc), [json.dumps(e) for e in entries], [key(e) for e in entries],
                   [str(e["episode_id"]) if e.get("episode_id") else None for e in entries],
                   summ if isinstance(summ, dict) else None)

    def piece_lines(self, piece: Piece) -> list[str]:
        path = self.root / RECORD_DIR / piece.file
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            raise DatasetError(f"{path}: unreadable validation record piece: {exc}") from None
        if len(lines) != len(piece.keys):
            raise DatasetError(f"{path}: {len(lines)} verdicts, its index {INDEX_PATH} says {len(piece.keys)}")
        return lines

    def verdicts(self) -> list[dict[str, Any]]:
        """Every verdict, parsed (one per key, in the record's order: the latest verdict in its first place)."""
        lines = [line for p in self.pieces for line in self.piece_lines(p)] + self.lines
        latest: dict[str, dict[str, Any]] = {}
        for k, line in zip(self.keys, lines, strict=True):
            try:
                entry = json.loads(line)
            except ValueError as exc:
                raise DatasetError(f"{self.root / RECORD_DIR}: unreadable verdict: {exc}") from None
            latest[k] = entry
        return list(latest.values())


def _pieces(root: Path, doc: Any) -> list[Piece]:
    """The closed pieces an index names (its file names checked: data, never a path)."""
    try:
        pieces = [Piece(str(p["file"]), [str(k) for k in p["keys"]], [int(i) for i in p.get("no_id", [])])
                  for p in (doc.get("pieces", []) if isinstance(doc, dict) else [])]
    except (TypeError, KeyError, AttributeError, ValueError) as exc:
        raise DatasetError(f"{root / INDEX_PATH}: unreadable validation record: its pieces: {exc}") from None
    for p in pieces:
        if not _PIECE.fullmatch(p.file):
            raise DatasetError(f"{root / INDEX_PATH}: unreadable validation record: a piece named {p.file[:80]!r}")
    return pieces


def read_verdicts(root: Path) -> list[dict[str, Any]]:
    """Every verdict of the record at `root` ([] when it has none)."""
    return Record.read(root).verdicts()


def _string(token: str) -> str | None:
    """A JSON string or null matched by `_LINE`: decoded only when it holds an escape."""
    if token == "null":
        return None
    return token[1:-1] if "\\" not in token else str(json.loads(token))


def write_record(root: Path, reports: Iterable[EpisodeReport | dict[str, Any]], record: Record | None = None,
                 step: Callable[[str], None] | None = None) -> Path:
    """Merge verdicts (reports or their dicts) into the record at `root` and write it (laid out in pieces);
    the index's path. The summary's counts are sums over the verdicts, so the record's own summary is
    brought up to date by the verdicts replaced and added (recounted from every verdict when it has none
    or a malformed one): equal to `summary` of the merged record. `record`: the record as the caller read
    it already; `step`: called after each file is written (the kill tests' fault hook)."""
    rec = Record.read(root) if record is None else record
    step = step or (lambda _name: None)
    opened = dict(zip(rec.open_keys, rec.lines, strict=True))  # a key twice: its first place, its last verdict
    closed = {k: n for n, p in enumerate(rec.pieces) for k in p.keys}
    rewritten: dict[int, dict[str, str]] = {}  # closed pieces a verdict is replaced in: key -> line
    base = rec.summary
    if not isinstance(base, dict) or not all(isinstance(base.get(k), int) for k in _COUNTS) or \
            not all(isinstance(base.get(k), dict) for k in _TALLIES):
        base = _summary(rec.verdicts())
    added, removed = [], []
    for r in reports:
        d = r.to_dict() if isinstance(r, EpisodeReport) else dict(r)
        k, line = key(d), json.dumps(d)
        if k in closed:
            n = closed[k]
            if n not in rewritten:
                rewritten[n] = dict(zip(rec.pieces[n].keys, rec.piece_lines(rec.pieces[n]), strict=True))
            removed.append(json.loads(rewritten[n][k]))
            rewritten[n][k] = line
        else:
            if k in opened:
                removed.append(json.loads(opened[k]))
            opened[k] = line
        added.append(d)
    totals = _combined(base, _summary(removed), _summary(added))
    folder = root / RECORD_DIR
    folder.mkdir(parents=True, exist_ok=True)
    pieces = list(rec.pieces)
    for n, replaced in sorted(rewritten.items()):
        pieces[n] = _write_piece(folder, n, replaced, step)
    keys, lines = list(opened), list(opened.values())
    while len(lines) >= PIECE_LINES:  # the open verdicts fill a piece: it is closed
        pieces.append(_write_piece(folder, len(pieces), dict(zip(keys[:PIECE_LINES], lines[:PIECE_LINES],
                                                                 strict=True)), step))
        keys, lines = keys[PIECE_LINES:], lines[PIECE_LINES:]
    index = json.dumps([{"file": p.file, "keys": p.keys, **({"no_id": p.no_id} if p.no_id else {})}
                        for p in pieces])
    body = ",\n".join(lines)
    text = f'{_HEAD}{body}{_TAIL}"pieces": {index},\n"summary": {json.dumps(totals, indent=1)}}}\n'
    path = replace_atomic(root / INDEX_PATH, text, written=lambda: step(f"temp {INDEX_PATH}"))
    named = {p.file for p in pieces}
    for stray in sorted(folder.iterdir()):  # pieces no index names now (replaced, or a kill's)
        if _PIECE.fullmatch(stray.name) and stray.name not in named:
            stray.unlink()
    (root / LEGACY_PATH).unlink(missing_ok=True)  # laid out in pieces now
    return path


def _write_piece(folder: Path, n: int, lines: dict[str, str], step: Callable[[str], None]) -> Piece:
    text = "".join(f"{line}\n" for line in lines.values())
    name = f"verdicts-{n:06d}-{hashlib.sha256(text.encode()).hexdigest()[:16]}.jsonl"
    if not (folder / name).is_file():  # the same name: the same verdicts, written by a run a kill cut
        replace_atomic(folder / name, text, written=lambda: step(f"temp {RECORD_DIR}/{name[:16]}"))
    keys = list(lines)
    no_id = [i for i, line in enumerate(lines.values()) if _no_id(line)]
    return Piece(name, keys, no_id)


def _no_id(line: str) -> bool:
    match = _LINE.match("\n" + line)
    return not (_string(match.group(3)) if match is not None else json.loads(line).get("episode_id"))


_COUNTS = ("episodes", "passed", "rejected", "warned", "errors")  # `validator.summary`'s counts and tallies
_TALLIES = ("reasons", "warnings")


def _combined(base: dict[str, Any], minus: dict[str, Any], plus: dict[str, Any]) -> dict[str, Any]:
    """`base` less the verdicts of `minus` plus those of `plus`, in `validator.summary`'s shape and order."""
    out = summary([])
    for k in _COUNTS:
        out[k] = int(base[k]) - minus[k] + plus[k]
    out["rejection_rate"] = out["rejected"] / out["episodes"] if out["episodes"] else 0.0
    for k in _TALLIES:
        tally = Counter({c: int(n) for c, n in base[k].items()})
        tally.subtract(minus[k])
        tally.update(plus[k])
        order = list(CODES) if k == "reasons" else sorted(tally)
        out[k] = {c: tally[c] for c in order if tally[c] > 0}
    return out


def _summary(entries: list[dict[str, Any]]) -> dict[str, Any]:
    reports = []
    for e in entries:
        r = EpisodeReport(str(e.get("path", "")), str(e.get("name", "")), e.get("episode_id"),
                          [Reason(x["code"], x.get("detail", "")) for x in e.get("reasons", [])],
                          error=e.get("error"), warnings=[Reason(x["code"], x.get("detail", ""))
                                                          for x in e.get("warnings", [])])
        reports.append(r)
    return summary(reports)


__all__ = ["FORMAT", "INDEX_PATH", "LEGACY_PATH", "PIECE_LINES", "RECORD_DIR", "Piece", "Record", "has_record",
           "key", "read_verdicts", "write_record"]
