"""A review acts only on what the reviewer saw (`provenance/reviews.py`)."""
from __future__ import annotations

from pathlib import Path

from teleop_flywheel.core.names import UNSAFE_NAME
from teleop_flywheel.data.provenance.reviews import (
    ReviewDecision,
    append_review,
    apply_decision,
    decisions,
    review_tally,
)
from teleop_flywheel.data.validate.reasons import Reason

GAP = Reason("FRAME_GAP", "camera front: 0.8 s gap")
LAG = Reason("CAMERA_LAG_UNKNOWN", "front: cannot tell")


def _decision(verdict: str, *codes: str) -> ReviewDecision:
    return ReviewDecision(verdict, "ana", "2026-12-06T07:00:00.000+00:00", codes)


def test_an_overrule_admits_only_the_codes_the_reviewer_saw() -> None:
    admitted = apply_decision([GAP], [LAG], _decision("overrule", "FRAME_GAP"))
    assert admitted.reasons == [] and admitted.overruled == [GAP] and admitted.warnings == [LAG]
    # A check that fired since the review (or a moved threshold) is not overruled by a review of something else.
    later = Reason("CLOCK_OFFSET", "front lags 40 ms")
    kept = apply_decision([GAP, later], [], _decision("overrule", "FRAME_GAP"))
    assert kept.reasons == [GAP, later] and not kept.overruled


def test_a_name_that_would_be_a_path_is_never_admitted() -> None:
    unsafe = Reason(UNSAFE_NAME, "camera: '../x'")
    kept = apply_decision([unsafe], [], _decision("overrule", UNSAFE_NAME))
    assert kept.reasons == [unsafe] and not kept.overruled


def test_a_confirmed_warning_becomes_a_rejection_naming_who_confirmed_it() -> None:
    out = apply_decision([], [LAG], _decision("confirm", "CAMERA_LAG_UNKNOWN"))
    assert [r.code for r in out.reasons] == ["CAMERA_LAG_UNKNOWN"] and out.warnings == [] and out.confirmed == [LAG]
    assert "confirmed by ana at 2026-12-06T07:00" in out.reasons[0].detail
    assert apply_decision([], [LAG], None).reasons == []  # never reviewed: unchanged
    # A confirmed rejection keeps its own reasons; its warnings stay warnings.
    rejected = apply_decision([GAP], [LAG], _decision("confirm", "FRAME_GAP", "CAMERA_LAG_UNKNOWN"))
    assert rejected.reasons == [GAP] and rejected.warnings == [LAG]


def test_the_latest_review_wins_and_notes_change_nothing(tmp_path: Path) -> None:
    append_review(tmp_path, "ana", "e1", "bags/e1", ["FRAME_GAP"], "confirm")
    append_review(tmp_path, "bo", "e1", "bags/e1", ["FRAME_GAP"], "overrule", "the gap is the scene's")
    append_review(tmp_path, "cy", "e1", "bags/e1", ["FRAME_GAP"], "note", "looked again")
    got = decisions([tmp_path])["e1"]
    assert (got.verdict, got.reviewer, got.codes) == ("overrule", "bo", ("FRAME_GAP",))
    assert got.note == "the gap is the scene's"


def test_the_tally_counts_reviewed_rejections_per_code() -> None:
    entries = [
        {"reasons": [{"code": "FRAME_GAP"}], "review": {"verdict": "confirm"}},
        {"reasons": [], "overruled": [{"code": "FRAME_GAP"}, {"code": "DEAD_AIR"}], "review": {"verdict": "overrule"}},
        {"reasons": [{"code": "OUTCOME_UNSET"}]},  # not reviewed
        {"reasons": [], "review": {"verdict": "confirm"}},  # a pass confirmed: no rejection reviewed
    ]
    t = review_tally(entries)
    assert (t.reviewed, t.confirmed, t.overruled) == (2, 1, 1)
    assert t.by_code == {"FRAME_GAP": [2, 1, 1], "DEAD_AIR": [1, 0, 1]}
