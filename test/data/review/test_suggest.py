"""What the reviews say about the thresholds (`review DIR --summary`), on the real session output."""
from __future__ import annotations

import json
import subprocess
import sys

from teleop_flywheel.data.provenance.reviews import append_review
from teleop_flywheel.data.review.server import ReviewSite
from teleop_flywheel.data.review.suggest import summarise_reviews
from teleop_flywheel.data.validate.reasons import ValidateConfig

from .conftest import Served


def review(served: Served, name: str, verdict: str) -> dict[str, object]:
    row = next(r for r in served.site.episodes() if r["name"] == name)
    append_review(served.root, "tester", row["episode_id"], row["path"], row["codes"], verdict)
    return row


def gap_of(row: dict[str, object]) -> float:
    return max(r["numbers"]["gap_s"] for r in row["reasons"] if r["code"] == "FRAME_GAP")  # type: ignore[index]


def test_an_overruled_gap_suggests_the_bound_that_keeps_it_and_names_what_else_it_lets_through(served: Served) -> None:
    stall = review(served, "ep_stall", "confirm")
    corrupt = review(served, "ep_corrupt", "overrule")
    assert gap_of(stall) < gap_of(corrupt)
    tallies, suggestions = summarise_reviews(served.site.episodes(), ValidateConfig.load())
    gap = next(t for t in tallies if t.code == "FRAME_GAP")
    assert (gap.rejected, gap.reviewed, gap.confirmed, gap.overruled, gap.confirm_rate) == (2, 2, 1, 1, 0.5)
    (s,) = [s for s in suggestions if s.code == "FRAME_GAP"]
    assert s.setting == "max_gap_s" and s.suggested == gap_of(corrupt)
    assert s.current == ValidateConfig.load().gap_bound_s
    assert s.kept == [corrupt["path"]] and s.confirmed_let_through == [stall["path"]]
    unset = next(t for t in tallies if t.code == "OUTCOME_UNSET")
    assert (unset.reviewed, unset.confirm_rate) == (0, None)


def test_the_summary_from_the_command_line(served: Served) -> None:
    stall = review(served, "ep_stall", "overrule")
    proc = subprocess.run([sys.executable, "-m", "teleop_flywheel.cli", "review", str(served.root), "--summary",
                           "--json"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    (s,) = [s for s in doc["suggestions"] if s["code"] == "FRAME_GAP"]
    assert s["suggested"] == gap_of(stall) and s["confirmed_let_through"] == [] and s["unreviewed_let_through"] == []
    text = subprocess.run([sys.executable, "-m", "teleop_flywheel.cli", "review", str(served.root), "--summary"],
                          capture_output=True, text=True, timeout=120).stdout
    assert "FRAME_GAP: 2 rejected, 1 reviewed, 0 confirmed, 1 overruled" in text and "max_gap_s" in text


def test_no_suggestion_without_an_overruled_measured_value(served: Served) -> None:
    review(served, "ep_unset", "overrule")
    _tallies, suggestions = summarise_reviews(ReviewSite(served.root, "t").episodes(), ValidateConfig.load())
    assert suggestions == []
