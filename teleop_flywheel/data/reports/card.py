"""`teleop-flywheel card DATASET [--validation report.json]`: a data card (README.md) beside the dataset.

How and on what hardware the data was collected, how many episodes were recorded, rejected (with
the validator's reason breakdown) and accepted, who recorded them, which tasks, how much of the
start-state space they cover, and what the data must not be used for. Every number comes from the
dataset's own metadata, the audit, or the validator's JSON report; nothing is typed in by hand.
A README.md that this command did not write is never overwritten (without --force).

The card opens with the Hugging Face front matter LeRobot's hub cards carry (license, tags with
`LeRobot`, task_categories `robotics`, the parquet data files), so `huggingface-cli upload` of the
folder gives a hub page like LeRobot's own; it names the dataset's repo id and how to load it. A
section for the operator's own words sits between two markers and is kept, as written, every time
the card is regenerated (and its license and tags, unless given again).
"""
from __future__ import annotations

import argparse
import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from teleop_flywheel.core.files import replace_atomic
from teleop_flywheel.data.lerobot.dataset import DatasetError, LeRobotDataset
from teleop_flywheel.data.lerobot.episode_table import episode_records
from teleop_flywheel.data.reports.audit import AuditReport, audit, card_lines

MARKER = "<!-- written by teleop-flywheel card; regenerate, do not edit (except the operator's notes below) -->"
NOTES_BEGIN = "<!-- operator notes: begin (yours to edit; kept when the card is regenerated) -->"
NOTES_END = "<!-- operator notes: end -->"
NOTES_TEMPLATE = ("_Write here what the numbers cannot say: the task and scene (objects, lighting, table), anything "
                  "unusual in these sessions, known problems, and who to ask about this data._")
LICENSE = "apache-2.0"  # LeRobot's push_to_hub default
# the validation record convert keeps (data/convert/refresh.py); the default report
RECORD_PATH = "meta/validation.json"


@dataclass
class ValidationSummary:
    """Counts from a validator JSON report: one entry per episode, pass/fail and reason codes."""

    source: str
    recorded: int
    accepted: int
    rejected: int
    reasons: dict[str, int] = field(default_factory=dict)


def _entries(report: Any) -> list[dict[str, Any]]:
    if isinstance(report, list):
        return report
    for key in ("episodes", "results", "bags"):
        if isinstance(report, dict) and isinstance(report.get(key), list):
            return report[key]
    raise DatasetError("validation report has no per-episode list (expected 'episodes', 'results' or 'bags')")


def _passed(entry: dict[str, Any]) -> bool:
    for key in ("passed", "ok", "pass"):
        if isinstance(entry.get(key), bool):
            return bool(entry[key])
    status = str(entry.get("status", entry.get("verdict", ""))).upper()
    if status in ("PASS", "FAIL"):
        return status == "PASS"
    raise DatasetError(f"validation entry without a pass/fail verdict: {json.dumps(entry)[:200]}")


def _codes(entry: dict[str, Any]) -> list[str]:
    raw = entry.get("reasons", entry.get("codes", []))
    codes = []
    for r in raw or []:
        codes.append(str(r.get("code")) if isinstance(r, dict) else str(r))
    return sorted(set(codes))


def read_validation(path: str | Path) -> ValidationSummary:
    path = Path(path)
    try:
        report = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise DatasetError(f"{path}: cannot read validation report: {exc}") from None
    try:
        entries = _entries(report)
        reasons: Counter[str] = Counter()
        accepted = 0
        for entry in entries:
            if _passed(entry):
                accepted += 1
            else:
                reasons.update(_codes(entry) or ["(no code)"])
    except DatasetError as exc:
        raise DatasetError(f"{path}: {exc}") from None
    return ValidationSummary(str(path), len(entries), accepted, len(entries) - accepted, dict(reasons.most_common()))


def _table(header: tuple[str, ...], rows: list[tuple[Any, ...]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return out


def front_matter(license_id: str, tags: list[str]) -> list[str]:
    """The Hugging Face dataset-card metadata LeRobot's hub cards carry."""
    meta = {"license": license_id, "task_categories": ["robotics"], "tags": tags,
            "configs": [{"config_name": "default", "data_files": "data/*/*.parquet"}]}
    return ["---", *yaml.safe_dump(meta, sort_keys=False).rstrip("\n").splitlines(), "---"]


def previous(text: str) -> tuple[dict[str, Any], str]:
    """(front matter, operator notes) of a card written before; ({}, "") when it has none."""
    meta: dict[str, Any] = {}
    if text.startswith("---\n") and "\n---\n" in text[4:]:
        try:
            loaded = yaml.safe_load(text[4:text.index("\n---\n", 4)])
            meta = loaded if isinstance(loaded, dict) else {}
        except yaml.YAMLError:
            meta = {}
    notes = ""
    if NOTES_BEGIN in text and NOTES_END in text.split(NOTES_BEGIN, 1)[1]:
        notes = text.split(NOTES_BEGIN, 1)[1].split(NOTES_END, 1)[0].strip("\n")
    return meta, notes


def render(ds: LeRobotDataset, a: AuditReport, validation: ValidationSummary | None,
           license_id: str = LICENSE, tags: list[str] | None = None, notes: str = "") -> str:
    recs = episode_records(ds)
    name = ds.repo_id or ds.root.name
    tags = list(dict.fromkeys(["LeRobot", *(tags or []), *([ds.robot_type] if ds.robot_type else []),
                               "teleoperation", "teleop_flywheel"]))
    cameras = [n.removeprefix("observation.images.") for n, f in ds.features.items() if f.is_visual]
    rigs = sorted({r.rig_id for r in recs if r.rig_id})
    kinds = Counter(r.session_kind or "unknown" for r in recs)
    ckpts = sorted({r.checkpoint for r in recs if r.checkpoint})
    operators = Counter(r.operator or "unknown" for r in recs)
    tasks = Counter(r.task or "(no task)" for r in recs)
    interventions = sum(r.num_interventions or 0 for r in recs)
    repo = ds.repo_id or f"local/{ds.root.name}"
    lines = [*front_matter(license_id, tags), MARKER, f"# Data card: {name}", "",
             f"Repo id `{repo}`"
             + ("" if ds.repo_id else " (none was given to `teleop-flywheel convert --repo-id`: a local name)")
             + f"; LeRobot v3.0, license {license_id}. Load it with "
             f"`LeRobotDataset({repo!r}, root=<this folder>, video_backend='pyav')`.", "",
             "## Operator's notes", "", NOTES_BEGIN, notes or NOTES_TEMPLATE, NOTES_END, "",
             "## How it was collected", "",
             f"- Robot: `{ds.robot_type or 'unknown'}`; rigs: {', '.join(rigs) or 'not recorded'}; "
             f"cameras: {', '.join(cameras) or 'none'}; {a.fps:g} fps.",
             "- Sessions: " + (", ".join(f"{k} {v}" for k, v in kinds.items()) if set(kinds) != {"unknown"}
                                else f"{a.episodes} episodes, session kind not recorded")
             + (f"; policy checkpoints deployed: {', '.join(ckpts)}; {interventions} human interventions recorded"
                if ckpts else "") + ".",
             "- Recorded as raw MCAP bags (one clock, stamped at the source), validated, then converted to "
             "LeRobot v3.0; the action is the command actually sent to the follower."
             if any(r.episode_id for r in recs) else "- Collection method not recorded in the metadata.",
             "", "## Episodes", ""]
    if validation:
        lines += _table(("recorded", "rejected", "accepted", "in this dataset"),
                        [(validation.recorded, validation.rejected, validation.accepted, a.episodes)])
        lines += ["", f"Rejection rate {100 * validation.rejected / max(1, validation.recorded):.1f} % "
                  f"(validator report `{Path(validation.source).name}`). Reasons (an episode can have several):", ""]
        lines += _table(("reason", "episodes"), list(validation.reasons.items())) if validation.reasons else \
            ["No episode was rejected: on a real recording session this means the checks are not checking."]
        if validation.accepted != a.episodes:
            lines += ["", f"Note: the validator accepted {validation.accepted} episodes but the dataset holds "
                      f"{a.episodes} (converted with --include-failed, or from several validation runs)."]
    else:
        lines += [f"{a.episodes} episodes in the dataset; no validator report was given, so recorded and "
                  "rejected counts are unknown."]
    lines += ["", f"{a.frames} frames ({a.seconds / 60:.1f} min); episode length {a.length_seconds['min']:.1f}–"
              f"{a.length_seconds['max']:.1f} s (median {a.length_seconds['median']:.1f} s); "
              f"dead air {100 * a.dead_share:.1f} % of frames."] + card_lines(a.content, a.episode_index)
    lines += ["", "## Operators", ""]
    lines += _table(("operator", "episodes"), sorted(operators.items()))
    lines += ["", "## Tasks", ""] + _table(("task", "episodes"), sorted(tasks.items()))
    lines += ["", "## Start-state coverage", "",
              "Range each joint visited against what is available, and how far start states spread:", ""]
    lines += _table(
        ("joint", "visited", "available", "share", "start-state span", "start-state std"),
        [
            (
                j.joint,
                f"{j.visited_min:.1f} … {j.visited_max:.1f}",
                "?" if j.available is None else f"{j.available_min:g} … {j.available_max:g} ({j.available_source})",
                "?" if j.share is None else f"{100 * j.share:.0f} %",
                f"{s.span:.2f}",
                f"{s.std:.2f}",
            )
            for j, s in zip(a.joint_ranges, a.start_spread, strict=True)
        ],
    )
    narrow = [s.joint for s in a.start_spread if s.span < 1.0]
    lines += ["", f"Episodes starting unusually far from the mean start: {a.outliers or 'none'}."]
    lines += ["", "## What it must not be used for", "",
              "Do not use it to train or evaluate a policy that must start outside the start-state ranges above"
              + (f" (every episode starts with {', '.join(narrow)} within one unit)" if narrow else "")
              + f", on a robot other than `{ds.robot_type or 'the one recorded'}` or with another calibration, or as "
              "evidence of a success rate: outcomes are operator labels and rejected episodes were removed."]
    return "\n".join(lines) + "\n"


def write_card(root: str | Path, validation: str | Path | None = None, force: bool = False,
               license_id: str | None = None, tags: list[str] | None = None) -> Path:
    """Write (or regenerate) the card; the operator's notes, license and tags of a card written
    before are kept unless `license_id`/`tags` are given."""
    ds = LeRobotDataset.open(root)
    out = ds.root / "README.md"
    old = out.read_text(errors="replace") if out.exists() else ""
    ours = "<!-- written by teleop-flywheel card;" in old
    if out.exists() and not ours and not force:
        error = DatasetError(f"{out}: exists and was not written by `teleop-flywheel card`")
        error.fix = "--force replaces it; or move it aside first"
        raise error
    meta, notes = previous(old) if ours else ({}, "")
    old_tags = [str(t) for t in meta.get("tags") or [] if isinstance(t, (str, int, float))]
    if validation is None and (ds.root / RECORD_PATH).is_file():
        validation = ds.root / RECORD_PATH  # the verdicts convert/ingest recorded for this dataset
    text = render(ds, audit(ds), read_validation(validation) if validation else None,
                  license_id or str(meta.get("license") or LICENSE), [*old_tags, *(tags or [])], notes)
    replace_atomic(out, text)
    return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dataset", type=Path, help="LeRobot v3.0 dataset directory; the card is its README.md")
    parser.add_argument("--validation", type=Path, metavar="REPORT",
                        help="the validator's JSON report (teleop-flywheel validate ... --json > report.json)")
    parser.add_argument("--force", action="store_true", help="overwrite a README.md this command did not write")
    parser.add_argument("--license", default=None, metavar="ID",
                        help=f"license in the card's front matter (default: the card's own, else {LICENSE}, "
                             "as LeRobot's push_to_hub)")
    parser.add_argument("--tag", action="append", default=[], metavar="TAG",
                        help="an extra tag for the hub (repeatable; LeRobot, the robot type, teleoperation are "
                             "always there)")


def run(args: argparse.Namespace) -> int:
    out = write_card(args.dataset, args.validation, args.force, args.license, args.tag)  # DatasetError: exit 2
    print(f"wrote {out}")
    return 0
