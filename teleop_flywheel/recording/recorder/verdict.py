"""The verdict at stop, beside the bag: `verdict.json`, the operator's keep or discard, and who decides.

When the recorder stops an episode it has the bag validated at once (the same checks and
thresholds as `teleop-flywheel validate`) by a `judge` running outside the recording path, and
writes what came back to `<bag>/verdict.json`. The file lives beside the bag, not inside it: it is
outside the bag's content id and the MCAP/metadata.yaml agreement, it is created exclusively (a
verdict is never overwritten by another), and only the operator's decision is added to it later
(replaced atomically, by design). `ingest` reads it: a bag is taken once it has a verdict and the
operator kept it (or a grace period passed without a discard). A discarded bag is moved — never
deleted — to `<output_dir>/discarded/<name>` and its verdict.json says so.

verdict.json (`FORMAT` 1):

    {"format": 1, "episode": "episode_20261203_124500",
     "verdict": "PASS" | "FAIL" | null,          # null: not validated (discarded while recording, or the
     "error": null | "why it could not run",     #   validator could not run: `error` says why)
     "status": "PASS" | "WARN" | "FAIL" | null,  # validate's three outcomes: WARN = passed with warnings
     "codes": ["FRAME_GAP"], "reasons": [{"code", "detail", "numbers"}], "warnings": [{"code", "detail", ...}],
     "episode_id": "…", "cameras": ["front"], "expected_cameras": ["front"], "camera_lag": {…},
     "duration_s": 60.0, "stopped_wall_ns": …,
     "validated": {"wall_ns": …, "seconds": 2.4, "config": "…", "software": "teleop_flywheel …"},
     "decision": null | {"action": "keep" | "discard", "wall_ns": …, "by": "operator"},
     "discarded_to": null | "<output_dir>/discarded/<name>"}

`VerdictKeeper` is the bookkeeping (no ROS, no data engine): a queue of stopped bags judged one at
a time in its own thread, the last episode's keep/discard (a discard before the verdict moves the
bag at once; a bag moved while it was being judged is judged again where it now is), and a short
history for a status topic.
"""
from __future__ import annotations

import json
import os
import queue
import shutil
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from teleop_flywheel import __version__
from teleop_flywheel.core.files import create_exclusive, replace_atomic

VERDICT_FILE = "verdict.json"
DISCARDED_DIR = "discarded"
FORMAT = 1
KEEP, DISCARD = "keep", "discard"
PENDING = "pending"  # what a status says while the judge is at work
HISTORY = 20  # episodes a status lists

Judge = Callable[[Path], Mapping[str, Any]]  # bag -> {"report": EpisodeReport.to_dict(), "seconds": float}
Log = Callable[[str, str], None]


def verdict_path(bag: str | os.PathLike[str]) -> Path:
    return Path(bag) / VERDICT_FILE


def read_verdict(bag: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The bag's verdict.json, or None when it has none yet; ValueError when it is unreadable."""
    path = verdict_path(bag)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ValueError(f"{path}: {exc}") from exc
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not JSON: {exc}") from exc
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ValueError(f"{path}: not a verdict of format {FORMAT}")
    return doc


def decision(doc: Mapping[str, Any] | None) -> str | None:
    """`keep`, `discard` or None (the operator has not said)."""
    d = (doc or {}).get("decision")
    return d.get("action") if isinstance(d, dict) else None


def _one_line(reason: Mapping[str, Any]) -> dict[str, Any]:
    out = {"code": str(reason.get("code", "?")), "detail": " ".join(str(reason.get("detail", "")).split())}
    if reason.get("numbers"):
        out["numbers"] = reason["numbers"]
    return out


def verdict_doc(
    name: str,
    result: Mapping[str, Any] | None,
    *,
    error: str | None = None,
    expected_cameras: list[str] | None = None,
    stopped_wall_ns: int = 0,
    config: str = "",
) -> dict[str, Any]:
    """verdict.json's content from a judge's result (`{"report": EpisodeReport.to_dict(), "seconds"}`),
    or a doc without a verdict when `error` says why there is none."""
    report = dict((result or {}).get("report") or {})
    if report.get("error") and not error:
        error = f"not a bag: {report['error']}"
    reasons = [_one_line(r) for r in report.get("reasons") or []]
    warnings = [_one_line(w) if isinstance(w, Mapping) else {"code": "WARNING", "detail": str(w)}
                for w in report.get("warnings") or []]
    lag: Any = next((report[k] for k in ("camera_lag", "camera_lags", "camera_lag_ms") if report.get(k)), {})
    verdict = None if error else ("FAIL" if reasons else "PASS")
    status = None if verdict is None else ("WARN" if verdict == "PASS" and warnings else verdict)
    return {
        "format": FORMAT, "episode": name, "verdict": verdict, "status": status, "error": error,
        "codes": list(dict.fromkeys(r["code"] for r in reasons)), "reasons": reasons, "warnings": warnings,
        "episode_id": report.get("episode_id"), "cameras": report.get("cameras") or [],
        "expected_cameras": list(expected_cameras or []), "camera_lag": lag, "duration_s": report.get("duration_s"),
        "camera_pool": report.get("camera_pool") or {},
        "stopped_wall_ns": stopped_wall_ns,
        "validated": {"wall_ns": time.time_ns(), "seconds": (result or {}).get("seconds"), "config": config,
                      "software": f"teleop_flywheel {__version__}"},
        "decision": None, "discarded_to": None,
    }


def write_verdict(bag: str | os.PathLike[str], doc: Mapping[str, Any]) -> Path:
    """Create `<bag>/verdict.json` exclusively (FileExistsRefused if there is one)."""
    return create_exclusive(verdict_path(bag), json.dumps(doc, indent=2) + "\n")


def mark_decision(bag: str | os.PathLike[str], action: str, discarded_to: str | None = None) -> dict[str, Any]:
    """Add the operator's keep/discard to an existing verdict.json (replaced atomically)."""
    doc = read_verdict(bag)
    if doc is None:
        raise FileNotFoundError(f"{verdict_path(bag)}: no verdict to mark")
    doc["decision"] = {"action": action, "wall_ns": time.time_ns(), "by": "operator"}
    if discarded_to is not None:
        doc["discarded_to"] = discarded_to
    replace_atomic(verdict_path(bag), json.dumps(doc, indent=2) + "\n")
    return doc


def move_to_discarded(bag: str | os.PathLike[str], output_dir: str | os.PathLike[str]) -> Path:
    """Move a bag directory to `<output_dir>/discarded/<name>` (`_2`, `_3`, … if taken); never deletes."""
    src = Path(bag)
    dest_dir = Path(output_dir).expanduser() / DISCARDED_DIR
    dest_dir.mkdir(parents=True, exist_ok=True)
    dest, n = dest_dir / src.name, 1
    while os.path.lexists(dest):
        n += 1
        dest = dest_dir / f"{src.name}_{n}"
    shutil.move(str(src), str(dest))  # a rename on the same file system
    return dest


@dataclass
class _Episode:
    name: str
    path: Path
    stopped_wall_ns: int
    state: str = PENDING  # pending | running | done
    doc: dict[str, Any] | None = None
    decision: str | None = None
    stopped_mono: float = field(default_factory=time.monotonic)
    verdict_after_s: float | None = None  # stop -> verdict written


class VerdictKeeper:
    """Judges every stopped bag in its own thread and keeps the last episode's keep/discard.

    Thread-safe. `judge` runs outside the lock (it blocks on a worker process); `on_change` is
    called (outside the lock) whenever a verdict or a decision changes what `status()` says.
    """

    def __init__(self, output_dir: Path, judge: Judge | None, expected_cameras: list[str] | None = None,
                 config: str = "", log: Log | None = None, on_change: Callable[[], None] | None = None) -> None:
        self.output_dir = Path(output_dir).expanduser()
        self.expected_cameras = list(expected_cameras or [])
        self.config = config
        self._judge = judge
        self._log = log or (lambda _level, _message: None)
        self._on_change = on_change or (lambda: None)
        self._lock = threading.Lock()
        self._episodes: list[_Episode] = []
        self._jobs: queue.Queue[_Episode | None] = queue.Queue()
        self._idle = threading.Condition(self._lock)
        self._busy = 0
        self._thread = threading.Thread(target=self._run, name="verdicts", daemon=True)
        self._thread.start()

    # -- episodes in --------------------------------------------------------------------------
    def submit(self, bag: str | os.PathLike[str], stopped_wall_ns: int | None = None) -> None:
        """A bag the recorder just closed: judge it (or, without a judge, just track it)."""
        ep = _Episode(Path(bag).name, Path(bag), stopped_wall_ns or time.time_ns())
        with self._lock:
            self._episodes = (self._episodes + [ep])[-HISTORY:]
            if self._judge is None:
                ep.state = "done"
            else:
                self._busy += 1
                self._jobs.put(ep)
        self._on_change()

    def discarded_while_recording(self, bag: str | os.PathLike[str], doc: Mapping[str, Any]) -> None:
        """An episode discarded before its stop (already moved, its verdict.json written): it is the
        last episode now, so a second discard cannot reach the one before."""
        ep = _Episode(Path(bag).name, Path(bag), int(doc.get("stopped_wall_ns") or time.time_ns()), "done",
                      dict(doc), DISCARD)
        with self._lock:
            self._episodes = (self._episodes + [ep])[-HISTORY:]
        self._on_change()

    # -- the operator's decision --------------------------------------------------------------
    def keep(self) -> str:
        return self._decide(KEEP)

    def discard(self) -> str:
        return self._decide(DISCARD)

    def _decide(self, action: str) -> str:
        with self._lock:
            if not self._episodes:
                raise ValueError("no episode has been stopped yet: nothing to " + action)
            ep = self._episodes[-1]
            if ep.decision == action:
                return f"{ep.name} already {'kept' if action == KEEP else 'discarded'}"
            if ep.decision is not None:
                raise ValueError(f"{ep.name} was already {'kept' if ep.decision == KEEP else 'discarded'}")
            ep.decision = action
            moved: Path | None = None
            if action == DISCARD:
                moved = move_to_discarded(ep.path, self.output_dir)
                ep.path = moved
            if ep.doc is not None:  # the verdict is written: mark it now (else it is written with it)
                ep.doc = mark_decision(ep.path, action, str(moved) if moved else None)
        self._log("info", f"{ep.name}: {'kept' if action == KEEP else f'discarded (moved to {moved})'}")
        self._on_change()
        return f"kept {ep.path}" if action == KEEP else f"discarded {ep.name}: moved to {moved}"

    # -- the judge's thread -------------------------------------------------------------------
    def _run(self) -> None:
        while (ep := self._jobs.get()) is not None:
            with self._lock:
                ep.state, path = "running", ep.path
            try:
                result, error = self._judge(path) if self._judge else None, None  # type: ignore[misc]
            except Exception as exc:  # noqa: BLE001 - a verdict that says why, never a dead thread
                result, error = None, f"the validator could not run: {type(exc).__name__}: {exc}"
            with self._lock:
                if ep.path != path:  # discarded (moved) while it was being read: judge it where it is now
                    ep.state = PENDING
                    self._jobs.put(ep)
                    continue
                doc = verdict_doc(ep.name, result, error=error, expected_cameras=self.expected_cameras,
                                  stopped_wall_ns=ep.stopped_wall_ns, config=self.config)
                if ep.decision is not None:
                    doc["decision"] = {"action": ep.decision, "wall_ns": time.time_ns(), "by": "operator"}
                    if ep.decision == DISCARD:
                        doc["discarded_to"] = str(ep.path)
                try:
                    write_verdict(ep.path, doc)
                except OSError as exc:
                    doc["error"] = f"verdict.json not written: {exc}"
                ep.doc, ep.state = doc, "done"
                ep.verdict_after_s = round(time.monotonic() - ep.stopped_mono, 3)
                self._busy -= 1
                self._idle.notify_all()
            self._log("error" if doc["error"] else "info", f"verdict {ep.name}: {line(doc)}")
            self._on_change()

    def wait_idle(self, timeout_s: float) -> bool:
        """Until every submitted bag has its verdict (True), or the timeout (False)."""
        with self._idle:
            return self._idle.wait_for(lambda: self._busy == 0, timeout_s)

    def close(self, timeout_s: float = 5.0) -> bool:
        """Let the judge finish what is queued (up to `timeout_s`), then stop the thread."""
        done = self.wait_idle(timeout_s)
        self._jobs.put(None)
        if self._thread is not threading.current_thread():
            self._thread.join(0.5 if not done else 5.0)
        return done

    def join(self, timeout_s: float) -> None:
        """Wait for the judge's thread to end after `close` (its judge closed, it ends at once)."""
        if self._thread is not threading.current_thread():
            self._thread.join(timeout_s)

    # -- status -------------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        """`verdict`: the last episode's, in full; `verdicts`: the recent ones, briefly (oldest first)."""
        with self._lock:
            episodes = list(self._episodes)
            last = summary(episodes[-1]) if episodes else {}
            if episodes and episodes[-1].doc is not None:
                doc = episodes[-1].doc
                last.update(reasons=doc["reasons"][:8], warnings=doc["warnings"][:8], error=doc["error"],
                            camera_lag=doc.get("camera_lag") or {})
            return {"verdict": last, "verdicts": [summary(e) for e in episodes]}


def summary(ep: _Episode) -> dict[str, Any]:
    doc = ep.doc or {}
    # Done without a doc: a recorder with no judge (`verdict` off) will never judge it; not pending.
    waiting = PENDING if ep.state != "done" else None
    return {"episode": ep.name, "bag": str(ep.path), "verdict": doc.get("verdict") if ep.doc else waiting,
            "status": doc.get("status") if ep.doc else waiting, "codes": doc.get("codes", []),
            "warnings": len(doc.get("warnings") or []), "decision": ep.decision, "seconds": ep.verdict_after_s}


def line(doc: Mapping[str, Any]) -> str:
    """`PASS`, `FAIL CODE(detail) …` or `NOT VALIDATED (why)`, plus warnings: one line for logs and screens."""
    if doc.get("verdict") is None:
        return f"NOT VALIDATED ({doc.get('error') or 'no verdict'})"
    text = doc["verdict"] + "".join(f" {r['code']}({r['detail']})" for r in doc.get("reasons") or [])
    warnings = doc.get("warnings") or []
    return text + (f"; {len(warnings)} warning(s): " + ", ".join(w["code"] for w in warnings) if warnings else "")
