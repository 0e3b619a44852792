"""After every append (convert, ingest): the dataset's own validation record, its data card and its
sample weights are current — never stale from the append before.

- `meta/validation.json`: every verdict the converter reached on a bag meant for this dataset
  (`validate --json`'s shape: `{"episodes": [...], "summary": {...}}`; one entry per episode id,
  the latest verdict wins; rejected bags stay in it, with where they were quarantined to), so the
  card tells the rejection story of the whole dataset, not of the last batch;
- `README.md`: the data card (`data/reports/card.py`) from that record — unless a README.md the card did
  not write is there (kept; the caller is told);
- `meta/sample_weights.parquet`: `data/curation/weights.py`'s rule with the parameters the file was last
  written with (defaults for a new one), every episode weighed again (normalised weights and ages
  depend on the whole dataset).

They are replaced in the dataset's current version, each through a temporary file and `os.replace`
(a reader sees the old or the new one; the version's other files, and older versions, which share
files by hard links, are untouched), not by a commit (`data/lerobot/commit.py`): they are derived
from the episodes table, and LeRobot reads none of them.
"""
from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from teleop_flywheel.core.files import replace_atomic
from teleop_flywheel.data.curation.curate import curate
from teleop_flywheel.data.curation.weights import WEIGHTS_PATH, WeightRule, read_weights, write_weights
from teleop_flywheel.data.errors import DatasetError
from teleop_flywheel.data.lerobot.commit import fault
from teleop_flywheel.data.lerobot.dataset import LeRobotDataset
from teleop_flywheel.data.reports.card import RECORD_PATH, write_card
from teleop_flywheel.data.validate.reasons import Reason
from teleop_flywheel.data.validate.validator import EpisodeReport, summary

FORMAT = "teleop_flywheel.validation/1"


def _key(entry: dict[str, Any]) -> str:
    return str(entry.get("episode_id") or entry.get("name") or entry.get("path"))


def read_record(root: Path) -> list[dict[str, Any]]:
    path = root / RECORD_PATH
    if not path.is_file():
        return []
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise DatasetError(f"{path}: unreadable validation record: {exc}") from None
    return [e for e in doc.get("episodes", []) if isinstance(e, dict)]


def recorded_ids(root: Path) -> set[str]:
    """Episode ids whose verdict the dataset's record holds (an unreadable record: none)."""
    try:
        return {str(e["episode_id"]) for e in read_record(root) if e.get("episode_id")}
    except DatasetError:
        return set()


def stale(root: Path) -> bool:
    """The dataset has episodes but its validation record, card or weights are missing or behind them
    (a crash between an append and its refresh)."""
    info_path = root / "meta" / "info.json"
    if not info_path.is_file():
        return False
    try:
        total = int(json.loads(info_path.read_text())["total_episodes"])
        weights, _ = read_weights(root)
    except (DatasetError, OSError, ValueError, KeyError):
        return True
    return len(weights) != total or not (root / RECORD_PATH).is_file() or not (root / "README.md").is_file()


def update_record(root: Path, reports: Iterable[EpisodeReport | dict[str, Any]]) -> Path:
    """Merge verdicts (reports or their dicts) into the dataset's record; the summary is recomputed."""
    entries = {_key(e): e for e in read_record(root)}
    for r in reports:
        d = r.to_dict() if isinstance(r, EpisodeReport) else dict(r)
        entries[_key(d)] = d
    merged = list(entries.values())
    doc = {"format": FORMAT, "episodes": merged, "summary": _summary(merged)}
    path = root / RECORD_PATH
    path.parent.mkdir(parents=True, exist_ok=True)
    replace_atomic(path, json.dumps(doc, indent=1), written=lambda: fault(f"temp {RECORD_PATH}"))
    return path


def _summary(entries: list[dict[str, Any]]) -> dict[str, Any]:
    reports = []
    for e in entries:
        r = EpisodeReport(str(e.get("path", "")), str(e.get("name", "")), e.get("episode_id"),
                          [Reason(x["code"], x.get("detail", "")) for x in e.get("reasons", [])],
                          error=e.get("error"), warnings=[Reason(x["code"], x.get("detail", ""))
                                                          for x in e.get("warnings", [])])
        reports.append(r)
    return summary(reports)


def refresh(root: Path, reports: Iterable[EpisodeReport | dict[str, Any]] = ()) -> list[str]:
    """Update the record with `reports`, then the card and the weights; what was done, one line each."""
    done = [f"validation record {update_record(root, reports)}"]
    fault(f"refresh {RECORD_PATH}")
    try:
        done.append(f"data card {write_card(root, root / RECORD_PATH)}")
        fault("refresh README.md")
    except DatasetError as exc:
        done.append(f"data card not written: {exc}")
    ds = LeRobotDataset.open(root)
    rule = WeightRule()
    if (root / WEIGHTS_PATH).is_file():
        try:
            _, old = read_weights(root)
            rule = WeightRule(float(old.get("intervention_weight", rule.intervention_weight)),
                              float(old.get("half_life_days", rule.half_life_days)))
        except (DatasetError, OSError, ValueError):
            pass  # unreadable: written again with the defaults
    report = curate(ds, rule)
    write_weights(ds, report.episodes, report.rule)
    fault(f"refresh {WEIGHTS_PATH}")
    done.append(f"sample weights {root / WEIGHTS_PATH}")
    return done
