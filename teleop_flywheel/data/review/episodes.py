"""What the review page shows: every episode of a session's output folder, and one episode in full.

The folder is what `demo` (or `validate --quarantine` + `convert`) leaves: bags anywhere below it,
rejected ones in `quarantine/<REASON>/<bag>/` with the validator's record `<bag>.json` beside
each, and optionally `validation.json` (`validate --json`) with the verdicts of the rest. A bag's
verdict is its quarantine record, else its `validation.json` entry, else none (UNVALIDATED). A bag
that cannot be read is listed with the reason it could not (never dropped, never a crash of the
page). Names read from records and bags are data: checked by `core/names.py` before they are shown.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from teleop_flywheel.core.names import text_problem
from teleop_flywheel.core.so101 import JOINT_NAMES
from teleop_flywheel.data.errors import DatasetError
from teleop_flywheel.data.lerobot.dataset import SCORES_PATH, LeRobotDataset
from teleop_flywheel.data.lerobot.episode_table import episode_records
from teleop_flywheel.data.validate.decode import decode_streams
from teleop_flywheel.data.validate.reasons import CODES
from teleop_flywheel.data.validate.validator import display, find_bags
from teleop_flywheel.recording.mcap.reader import ImageStream, find_bag, open_bag, read_episode

VALIDATION_FILE = "validation.json"
PLOT_POINTS = 1500  # per series: a plot wider than this many pixels gains nothing from more


def episode_key(rel: str) -> str:
    """The page's handle of a bag: its path below the folder, hashed (a URL never carries a path)."""
    return hashlib.sha256(rel.encode("utf-8", "surrogateescape")).hexdigest()[:16]


def _safe_text(field: str, value: Any, problems: list[str]) -> str:
    if value in (None, ""):
        return ""
    why = text_problem(value)
    if why:
        problems.append(f"{field}: {why}")
        return ""
    return str(value)


def _reasons(items: Any) -> list[dict[str, Any]]:
    out = []
    for r in items if isinstance(items, list) else []:
        if isinstance(r, dict) and isinstance(r.get("code"), str):
            out.append({"code": r["code"], "detail": str(r.get("detail", "")),
                        "numbers": r.get("numbers") if isinstance(r.get("numbers"), dict) else {}})
    return out


def _validation_entries(root: Path) -> dict[str, dict[str, Any]]:
    """validation.json's episodes by bag name (where each was, and where quarantine moved it)."""
    try:
        doc = json.loads((root / VALIDATION_FILE).read_text())
    except (OSError, ValueError):
        return {}
    out: dict[str, dict[str, Any]] = {}
    for e in doc.get("episodes", []) if isinstance(doc, dict) else []:
        if isinstance(e, dict):
            for p in (e.get("quarantined_to"), e.get("path")):
                if isinstance(p, str) and p:
                    out.setdefault(Path(p).name, e)
    return out


def _record_of(bag: Path, by_name: dict[str, dict[str, Any]]) -> tuple[dict[str, Any] | None, str | None]:
    """(the verdict record, a problem reading it): the quarantine record beside the bag first."""
    beside = bag.with_name(bag.name + ".json")
    if beside.is_file():
        try:
            record = json.loads(beside.read_text())
            if isinstance(record, dict):
                return record, None
            return None, f"{beside.name}: not a JSON object"
        except (OSError, ValueError) as exc:
            return None, f"{beside.name}: unreadable record ({exc})"
    return by_name.get(bag.name), None


def _interval(reason: dict[str, Any], duration: float | None) -> list[float] | None:
    """[start, end] s (from the follower's first stamp, as the checks measure) the reason points at."""
    n = reason.get("numbers") or {}
    at = n.get("at_s")
    if reason["code"] == "FRAME_GAP" and isinstance(at, (int, float)):
        return [float(at), float(at) + float(n.get("gap_s", 0.0))]
    if reason["code"] == "DEAD_AIR":
        seconds = float(n.get("seconds", 0.0))
        if n.get("kind") == "leading":
            return [0.0, seconds]
        if n.get("kind") == "trailing" and duration is not None:
            return [max(0.0, duration - seconds), duration]
        if isinstance(at, (int, float)):
            return [float(at), float(at) + seconds]
    if isinstance(at, (int, float)):
        return [float(at), float(at)]
    return None


def summarise(root: Path, bag: Path, by_name: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """One list row; never raises for a bad bag or record (its problem is the row's `error`)."""
    rel = display(bag.relative_to(root))
    problems: list[str] = []
    record, record_problem = _record_of(bag, by_name)
    if record_problem:
        problems.append(record_problem)
    entry: dict[str, Any] = {"key": episode_key(rel), "name": display(bag.name), "path": rel,
                             "quarantined": "quarantine" in bag.relative_to(root).parts[:1],
                             "status": "UNVALIDATED", "codes": [], "warning_codes": [], "reasons": [],
                             "warnings": [], "episode_id": None, "duration_s": None, "outcome": "", "task": "",
                             "operator": "", "interventions": [], "triggers": []}
    if record is not None:
        status = record.get("status")
        entry["status"] = status if status in ("PASS", "WARN", "FAIL") else ("ERROR" if record.get("error") else
                                                                               "UNVALIDATED")
        entry["reasons"], entry["warnings"] = _reasons(record.get("reasons")), _reasons(record.get("warnings"))
        entry["codes"] = sorted({r["code"] for r in entry["reasons"]},
                                key=lambda c: CODES.index(c) if c in CODES else len(CODES))
        entry["warning_codes"] = sorted({r["code"] for r in entry["warnings"]})
        ident = record.get("episode_id")
        entry["episode_id"] = ident if isinstance(ident, str) and all(c in "0123456789abcdef" for c in ident) \
            else None
        if isinstance(record.get("duration_s"), (int, float)):
            entry["duration_s"] = float(record["duration_s"])
        if record.get("error"):
            problems.append(str(record["error"]))
    try:
        ep = read_episode(bag)
    except Exception as exc:  # noqa: BLE001 - a damaged bag is a row with its reason, never a dead page
        problems.append(f"metadata unreadable: {exc}")
        ep = None
    if ep is not None:
        entry["outcome"] = _safe_text("outcome", ep.outcome, problems)
        entry["task"] = _safe_text("task", ep.task, problems)
        entry["operator"] = _safe_text("operator", ep.operator, problems)
        entry["interventions"] = [
            {"id": i.id, "trigger": i.trigger or "", "start_ns": i.start_ns, "end_ns": i.end_ns}
            for i in list(ep.interventions) + list(getattr(ep, "corrections", []))]
        entry["triggers"] = sorted({i["trigger"] or "unlabelled" for i in entry["interventions"]})
    for r in entry["reasons"] + entry["warnings"]:
        r["interval"] = _interval(r, entry["duration_s"])
    entry["error"] = "; ".join(problems) or None
    if entry["status"] == "UNVALIDATED" and entry["error"]:
        entry["status"] = "ERROR"
    return entry


def _signature(root: Path, bag: Path) -> tuple[tuple[str, int, int, int], ...]:
    """What a row is made of, as (name, inode, size, mtime) of each file: the bag's, its record, validation.json."""
    files = [bag.with_name(bag.name + ".json"), root / VALIDATION_FILE]
    with contextlib.suppress(OSError):  # a bag gone or unreadable: its row says so
        files += [Path(e.path) for e in os.scandir(bag)] if bag.is_dir() else [bag]
    out = []
    for f in files:
        try:
            st = f.stat()
        except OSError:
            continue
        out.append((f.name, st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(sorted(out))


class RowCache:
    """Rows by bag, kept while none of the files a row was read from changed (a list of a thousand
    episodes is then a walk and a stat per file, not a thousand metadata reads)."""

    def __init__(self) -> None:
        self._rows: dict[Path, tuple[tuple[tuple[str, int, int, int], ...], dict[str, Any]]] = {}
        self._lock = threading.Lock()

    def scan(self, root: Path) -> list[dict[str, Any]]:
        """Every bag below `root`, one row each (unsorted: the page sorts by need of review)."""
        bags, _errors = find_bags([root])
        by_name: dict[str, dict[str, Any]] | None = None
        rows = []
        for bag in bags:
            sig = _signature(root, bag)
            with self._lock:
                hit = self._rows.get(bag)
            if hit is None or hit[0] != sig:
                by_name = _validation_entries(root) if by_name is None else by_name
                hit = (sig, summarise(root, bag, by_name))
                with self._lock:
                    self._rows[bag] = hit
            rows.append(dict(hit[1]))
        with self._lock:
            for gone in set(self._rows) - set(bags):
                del self._rows[gone]
        return rows


SCORES = ("graded_success", "jerk_z", "duration_ratio", "coverage_gain")  # shown in the list (`curate`'s scores)


def _datasets(root: Path) -> list[Path]:
    """The converted datasets in the folder: itself, or up to two levels below (demo_out/dataset)."""
    found = [p.parent.parent for pattern in ("meta/info.json", "*/meta/info.json", "*/*/meta/info.json")
             for p in root.glob(pattern) if "quarantine" not in p.relative_to(root).parts[:1]]
    return sorted(set(found))


class ScoreCache:
    """Curation scores of the episodes of the datasets in the folder, by content id; a dataset's are
    read again only when its episodes table changed."""

    def __init__(self) -> None:
        self._by_dataset: dict[Path, tuple[tuple[tuple[str, int, int], ...], dict[str, dict[str, float | None]]]] = {}
        self._lock = threading.Lock()

    @staticmethod
    def _signature(ds: Path) -> tuple[tuple[str, int, int], ...]:
        sig = []
        for p in [*sorted((ds / "meta" / "episodes").rglob("*.parquet")), ds / SCORES_PATH]:  # the scores too
            with contextlib.suppress(OSError):
                st = p.stat()
                sig.append((str(p), st.st_mtime_ns, st.st_size))
        return tuple(sig)

    def scores(self, root: Path) -> dict[str, dict[str, float | None]]:
        out: dict[str, dict[str, float | None]] = {}
        for ds in _datasets(root):
            sig = self._signature(ds)
            with self._lock:
                hit = self._by_dataset.get(ds)
            if hit is None or hit[0] != sig:
                try:
                    records = episode_records(LeRobotDataset.open(ds))
                except (DatasetError, OSError, ValueError):
                    continue  # a dataset being written or damaged: its episodes show without scores
                hit = (sig, {r.episode_id: {k: getattr(r, k) for k in SCORES} for r in records if r.episode_id})
                with self._lock:
                    self._by_dataset[ds] = hit
            out.update(hit[1])
        return out


@dataclass
class EpisodeData:
    """One episode decoded for the page: plot series and the camera frames (JPEG bytes, as recorded)."""

    detail: dict[str, Any]
    frames: dict[str, ImageStream]


def _downsample(t: np.ndarray, values: np.ndarray) -> tuple[list[float], list[list[float]]]:
    step = max(1, int(np.ceil(len(t) / PLOT_POINTS)))
    v = values[::step]
    if v.ndim == 1:
        v = v[:, None]
    return np.round(t[::step], 4).tolist(), np.round(v.astype(np.float64), 5).T.tolist()


def load_episode(bag: Path) -> EpisodeData:
    """Decode the streams the page plots; DecodeError (with its code) or BagReadError when it cannot."""
    bag_obj = open_bag(bag)
    decoded = decode_streams(bag_obj)
    t0 = int(decoded.follower.stamps_ns[0])

    def rel(stamps: np.ndarray) -> np.ndarray:
        return (stamps.astype(np.int64) - t0) / 1e9

    series: dict[str, Any] = {}
    t, v = _downsample(rel(decoded.follower.stamps_ns), decoded.follower.values)
    series["state"] = {"t": t, "values": v}
    t, v = _downsample(rel(decoded.command.stamps_ns), decoded.command.values)
    series["action"] = {"t": t, "values": v}
    if decoded.authority is not None:
        t, v = _downsample(rel(decoded.authority.stamps_ns), decoded.authority.values[:, 0])
        series["blend"] = {"t": t, "values": v}
    if decoded.effort is not None:
        t, v = _downsample(rel(decoded.effort.stamps_ns), decoded.effort.values)
        series["load"] = {"t": t, "values": v}
    # Unrounded: a reason's instant is a frame's own stamp (FRAME_GAP's at_s is the last frame before the
    # gap), and rounding it up would place the player one frame early.
    cameras = {cam: rel(im.stamps_ns).tolist() for cam, im in decoded.images.items()}
    mcap = find_bag(bag)[1]
    detail = {"episode_id": bag_obj.episode_id, "t0_ns": t0, "joints": list(JOINT_NAMES), "series": series,
              "cameras": cameras,
              "mcap": mcap.name if bag.is_dir() else None,
              "end_s": float(rel(decoded.follower.stamps_ns)[-1]),
              "interventions": [[(i.start_ns - t0) / 1e9, None if i.end_ns is None else (i.end_ns - t0) / 1e9]
                                for i in (bag_obj.episode.interventions if bag_obj.episode else [])]}
    return EpisodeData(detail, dict(decoded.images))


class EpisodeCache:
    """The last few decoded episodes (a page's frames are asked for one by one), safe across threads."""

    def __init__(self, size: int = 4) -> None:
        self._items: OrderedDict[Path, EpisodeData] = OrderedDict()
        self._lock = threading.Lock()
        self._size = size

    def get(self, bag: Path) -> EpisodeData:
        with self._lock:
            hit = self._items.get(bag)
            if hit is not None:
                self._items.move_to_end(bag)
                return hit
        data = load_episode(bag)
        with self._lock:
            self._items[bag] = data
            while len(self._items) > self._size:
                self._items.popitem(last=False)
        return data


__all__ = ["EpisodeCache", "EpisodeData", "RowCache", "VALIDATION_FILE", "episode_key", "load_episode",
           "summarise"]
