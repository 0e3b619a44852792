"""The review log: what a person concluded about an episode, appended beside the data, never edited.

`reviews.jsonl` in the reviewed folder, one JSON object a line: reviewer, time (UTC), the
episode's content id (`episode_id`, so a renamed or moved bag keeps its reviews), the bag's path
below the folder, the reason codes it was judged on, the verdict (`confirm`: the validator was
right; `overrule`: it was wrong; `note`: a note only) and a note. The file is opened with
O_APPEND and each line is written by one `write` under an exclusive `flock`, so two tabs (or two
servers) reviewing at once interleave whole lines and lose none. The latest confirm/overrule of an
episode is its review status; earlier lines stay as history.
"""
from __future__ import annotations

import fcntl
import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from teleop_flywheel.core.errors import FlywheelError
from teleop_flywheel.core.names import check_text

LOG_FILE = "reviews.jsonl"
VERDICTS = ("confirm", "overrule", "note")
MAX_NOTE = 2000


class ReviewError(FlywheelError, ValueError):
    """A review that cannot be recorded as asked (unknown verdict, a note that is no text)."""


def _check_note(note: object) -> str:
    if not isinstance(note, str):
        raise ReviewError(f"note must be text, not {type(note).__name__}")
    if len(note) > MAX_NOTE or not note.replace("\n", " ").isprintable():
        raise ReviewError(f"note must be printable text of at most {MAX_NOTE} characters")
    return note


def append_review(root: Path, reviewer: str, episode_id: str, path: str, codes: list[str], verdict: str,
                  note: str = "") -> dict[str, Any]:
    """Append one review line (module docstring) and return it."""
    if verdict not in VERDICTS:
        raise ReviewError(f"verdict {verdict!r} is not one of {', '.join(VERDICTS)}")
    line = {"reviewer": check_text("reviewer", reviewer), "time": datetime.now(UTC).isoformat(timespec="milliseconds"),
            "episode_id": episode_id, "path": path, "codes": list(codes), "verdict": verdict,
            "note": _check_note(note)}
    data = (json.dumps(line, ensure_ascii=True) + "\n").encode()
    fd = os.open(root / LOG_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        written = os.write(fd, data)
        if written != len(data):
            raise OSError(f"{root / LOG_FILE}: short write ({written} of {len(data)} bytes); the line is incomplete")
        os.fsync(fd)
    finally:
        os.close(fd)  # closing releases the lock
    return line


def read_reviews(root: Path) -> list[dict[str, Any]]:
    """Every review line in order; a torn or foreign line is skipped (the log is never rewritten)."""
    try:
        fd = os.open(root / LOG_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return []
    with os.fdopen(fd, "rb") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_SH)
        raw = f.read()
    out = []
    for text in raw.decode("utf-8", "replace").splitlines():
        try:
            line = json.loads(text)
        except ValueError:
            continue
        if isinstance(line, dict) and line.get("verdict") in VERDICTS and isinstance(line.get("episode_id"), str):
            out.append(line)
    return out


def latest_by_episode(reviews: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """episode_id -> {"verdict": the latest confirm/overrule or None, "reviews": every line, oldest first}."""
    out: dict[str, dict[str, Any]] = {}
    for r in reviews:
        entry = out.setdefault(r["episode_id"], {"verdict": None, "reviews": []})
        entry["reviews"].append(r)
        if r["verdict"] != "note":
            entry["verdict"] = r["verdict"]
    return out
