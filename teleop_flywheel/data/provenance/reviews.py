"""The review log: what a person concluded about an episode, appended beside the data, never edited.

`reviews.jsonl` in the reviewed folder, one JSON object a line: reviewer, time (UTC), the
episode's content id (`episode_id`, so a renamed or moved bag keeps its reviews), the bag's path
below the folder, the reason codes it was judged on, the verdict (`confirm`: the validator was
right; `overrule`: it was wrong; `note`: a note only) and a note. The file is opened with
O_APPEND and each line is written by one `write` under an exclusive `flock`, so two tabs (or two
servers) reviewing at once interleave whole lines and lose none. The latest confirm/overrule of an
episode is its review status; earlier lines stay as history.

What the data engine does with them (`decisions`, `apply_decision`): `convert`/`ingest` record every
converted or rejected episode's latest review in the dataset's validation record and its `review`
column; with `--admit-reviewed` an overruled rejection is admitted (its reasons kept as `overruled`)
and a confirmed warning becomes a rejection. `review_tally` counts them for `curate` and the card.
"""
from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from teleop_flywheel.core.names import UNSAFE_NAME, check_text
from teleop_flywheel.data.errors import DatasetError, ReviewError
from teleop_flywheel.data.validate.dataset_record import read_verdicts
from teleop_flywheel.data.validate.reasons import Reason

LOG_FILE = "reviews.jsonl"
VERDICTS = ("confirm", "overrule", "note")
MAX_NOTE = 2000


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


@dataclass(frozen=True)
class ReviewDecision:
    """An episode's latest confirm/overrule: what `convert --admit-reviewed` acts on, kept in lineage."""

    verdict: str  # confirm | overrule
    reviewer: str
    time: str
    codes: tuple[str, ...]  # the reason and warning codes the reviewer judged
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "reviewer": self.reviewer, "time": self.time, "codes": list(self.codes),
                "note": self.note}


def decisions(folders: Iterable[Path]) -> dict[str, ReviewDecision]:
    """episode_id -> its latest confirm/overrule over the review logs of `folders` (the latest line by
    time wins where two folders reviewed the same episode)."""
    lines = sorted((r for folder in folders for r in read_reviews(folder) if r["verdict"] != "note"),
                   key=lambda r: str(r.get("time", "")))
    out = {}
    for r in lines:
        codes = r.get("codes")
        out[r["episode_id"]] = ReviewDecision(r["verdict"], str(r.get("reviewer", "")), str(r.get("time", "")),
                                              tuple(str(c) for c in codes) if isinstance(codes, list) else (),
                                              str(r.get("note", "")))
    return out


def review_folders(paths: Iterable[Path]) -> list[Path]:
    """The folders named on a command line that hold a review log (`review DIR` writes it in DIR)."""
    return [p for p in paths if p.is_dir() and (p / LOG_FILE).is_file()]


@dataclass
class Reviewed:
    """A verdict after a person's review: `reasons` reject, `overruled` were rejections a reviewer
    overruled (the episode admitted; kept on record), `confirmed` are warnings a reviewer confirmed
    (now among `reasons`)."""

    reasons: list[Reason]
    warnings: list[Reason]
    overruled: list[Reason] = field(default_factory=list)
    confirmed: list[Reason] = field(default_factory=list)


def apply_decision(reasons: list[Reason], warnings: list[Reason], decision: ReviewDecision | None) -> Reviewed:
    """What `--admit-reviewed` makes of a verdict. An overrule admits a rejection only when the reviewer
    saw every code it now carries (a check added or a threshold moved since is not overruled by a
    review of something else), and never an UNSAFE_NAME (a name that would be a path). A confirm of an
    episode that passed with warnings turns the warnings the reviewer saw into rejections, each saying
    who confirmed it."""
    if decision is None:
        return Reviewed(list(reasons), list(warnings))
    seen = set(decision.codes)
    if decision.verdict == "overrule" and reasons and {r.code for r in reasons} <= seen \
            and not any(r.code == UNSAFE_NAME for r in reasons):
        return Reviewed([], list(warnings), overruled=list(reasons))
    if decision.verdict == "confirm" and not reasons:  # a rejected episode stays rejected for its own reasons
        confirmed = [w for w in warnings if w.code in seen]
        if confirmed:
            made = [Reason(w.code, f"{w.detail} (a warning confirmed by {decision.reviewer} at {decision.time})",
                           dict(w.numbers)) for w in confirmed]
            return Reviewed(list(reasons) + made, [w for w in warnings if w.code not in seen], confirmed=confirmed)
    return Reviewed(list(reasons), list(warnings))


@dataclass
class ReviewTally:
    """Of the rejections on record (and warnings turned rejections), how many a person reviewed, per code."""

    reviewed: int = 0
    confirmed: int = 0
    overruled: int = 0
    by_code: dict[str, list[int]] = field(default_factory=dict)  # code -> [reviewed, confirmed, overruled]


def review_tally(entries: Iterable[dict[str, Any]]) -> ReviewTally:
    """Count the reviewed rejections among validation-record entries (`validate --json`'s shape, with
    the `review` and `overruled` that convert records)."""
    tally = ReviewTally()
    for e in entries:
        review = e.get("review") if isinstance(e.get("review"), dict) else None
        codes = {str(r.get("code")) for key in ("reasons", "overruled") for r in e.get(key) or []
                 if isinstance(r, dict)}
        if review is None or not codes or review.get("verdict") not in ("confirm", "overrule"):
            continue
        confirmed = review["verdict"] == "confirm"
        tally.reviewed += 1
        tally.confirmed += confirmed
        tally.overruled += not confirmed
        for code in codes:
            row = tally.by_code.setdefault(code, [0, 0, 0])
            row[0] += 1
            row[1 if confirmed else 2] += 1
    return tally


def tally_lines(tally: ReviewTally) -> list[str]:
    """'N rejections reviewed by eye, M confirmed, K overruled', then one line per reason code."""
    if not tally.reviewed:
        return ["No rejection was reviewed by eye (`teleop-flywheel review DIR`)."]
    return [f"{tally.reviewed} rejections reviewed by eye, {tally.confirmed} confirmed, {tally.overruled} overruled"
            " (an overruled one was admitted by `convert --admit-reviewed`)."] + [
        f"- {code}: {n} reviewed, {c} confirmed, {o} overruled" for code, (n, c, o) in sorted(tally.by_code.items())]


def admitted_by_review(root: Path) -> list[dict[str, Any]]:
    """The episodes of dataset `root` that a review admitted: {episode_id, name, overruled codes,
    review}, from its validation record (none when it has no readable record)."""
    try:
        verdicts = read_verdicts(root)
    except DatasetError:
        return []
    out = []
    for e in verdicts:
        if isinstance(e, dict) and e.get("overruled") and isinstance(e.get("review"), dict):
            out.append({"episode_id": e.get("episode_id"), "name": e.get("name"),
                        "overruled": sorted({str(r.get("code")) for r in e["overruled"] if isinstance(r, dict)}),
                        "review": e["review"]})
    return out


def admitted_lines(admitted: list[dict[str, Any]]) -> list[str]:
    """One line per episode a review admitted: who overruled which codes, when, and why."""
    return [f"  admitted   {str(a['episode_id'] or a['name'])[:16]}: {', '.join(a['overruled'])} overruled by "
            f"{a['review'].get('reviewer', '?')} at {a['review'].get('time', '?')}"
            + (f" ({a['review']['note']})" if a["review"].get("note") else "") for a in admitted]
