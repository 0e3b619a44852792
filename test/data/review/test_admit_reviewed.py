"""What a person decided on the review page reaches the data: `convert --admit-reviewed` admits exactly
the overruled rejection, the dataset's record, `review` column, card, `curate`, `manifest --filter` and
`lineage` say so; without the flag the reviews are only recorded."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from support.cli import run_cli

from teleop_flywheel.data.lerobot.dataset import LeRobotDataset
from teleop_flywheel.data.lerobot.episode_table import episode_records
from teleop_flywheel.data.provenance.reviews import append_review
from teleop_flywheel.data.review.episodes import RowCache
from teleop_flywheel.data.review.server import ReviewSite
from teleop_flywheel.data.validate.dataset_record import read_verdicts


@pytest.fixture()
def reviewed(session_out: Path, tmp_path: Path) -> Path:
    """A copy of the session output where `tester` overruled ep_stall's FRAME_GAP and confirmed ep_unset's
    OUTCOME_UNSET, as the page records them (the row's content id and codes)."""
    out = tmp_path / "out"
    shutil.copytree(session_out, out, ignore=shutil.ignore_patterns("reviews.jsonl"))
    rows = {r["name"]: r for r in RowCache().scan(out)}
    for name, verdict in (("ep_stall", "overrule"), ("ep_unset", "confirm")):
        row = rows[name]
        append_review(out, "tester", row["episode_id"], row["path"], row["codes"] + row["warning_codes"], verdict,
                      "the gap is the scene's, not the camera's" if verdict == "overrule" else "")
    return out


def _record(ds: Path) -> dict[str, dict]:
    return {e["name"]: e for e in read_verdicts(ds)}


def test_convert_admits_exactly_the_overruled_rejection_and_says_so_everywhere(
        reviewed: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ds = tmp_path / "ds"
    code, out, err = run_cli(capsys, "convert", str(reviewed), "--dataset", str(ds), "--codec", "h264",
                             "--workers", "1", "--admit-reviewed")
    assert code == 1, err  # the corrupt bag and the garbage are errors, as without the flag
    assert "admitted by review: ep_stall: FRAME_GAP overruled by tester" in out
    records = episode_records(LeRobotDataset.open(ds))
    assert len(records) == 2
    assert {r.review for r in records} == {None, "overrule"}  # ep_clean never reviewed, ep_stall admitted
    record = _record(ds)
    stall, unset = record["ep_stall"], record["ep_unset"]
    assert stall["passed"] and [r["code"] for r in stall["overruled"]] == ["FRAME_GAP"]
    assert stall["review"]["reviewer"] == "tester" and stall["review"]["verdict"] == "overrule"
    assert not unset["passed"] and unset["review"]["verdict"] == "confirm"  # confirmed: stays out

    card = (ds / "README.md").read_text()
    assert "2 rejections reviewed by eye, 1 confirmed, 1 overruled" in card
    assert "- FRAME_GAP: 1 reviewed, 0 confirmed, 1 overruled" in card
    code, out, err = run_cli(capsys, "curate", str(ds))
    assert code == 0, err
    assert "2 rejections reviewed by eye, 1 confirmed, 1 overruled" in out

    manifest = tmp_path / "admitted.json"
    code, out, err = run_cli(capsys, "manifest", "create", str(ds), "--filter", "review == overrule",
                             "--out", str(manifest))
    assert code == 0, err
    assert json.loads(manifest.read_text())["episode_count"] == 1
    code, out, err = run_cli(capsys, "lineage", "which", str(ds))
    assert code == 0, err
    assert "1 episode(s) admitted by review" in out and "FRAME_GAP overruled by tester" in out
    assert "the gap is the scene's" in out


def test_without_the_flag_reviews_are_recorded_not_acted_on(reviewed: Path, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    ds = tmp_path / "ds"
    code, out, err = run_cli(capsys, "convert", str(reviewed), "--dataset", str(ds), "--codec", "h264",
                             "--workers", "1")
    assert code == 1, err
    assert "admitted by review" not in out
    assert len(episode_records(LeRobotDataset.open(ds))) == 1
    stall = _record(ds)["ep_stall"]
    assert not stall["passed"] and stall["review"]["verdict"] == "overrule" and not stall["overruled"]


def test_asking_to_admit_without_a_review_log_is_one_line(session_out: Path, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    bags = tmp_path / "bags"
    shutil.copytree(session_out / "bags", bags)
    code, out, err = run_cli(capsys, "convert", str(bags), "--dataset", str(tmp_path / "ds"), "--admit-reviewed")
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and "no review log (reviews.jsonl)" in err and str(bags) in err
    assert not (tmp_path / "ds").exists()


def test_the_list_shows_the_curation_scores_of_converted_episodes(reviewed: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """The demo's layout: the dataset inside the reviewed folder; its episodes carry `curate`'s scores
    in the list (by content id), the rejected ones none, and the page's filter can tell them apart."""
    code, _out, err = run_cli(capsys, "convert", str(reviewed), "--dataset", str(reviewed / "dataset"),
                              "--codec", "h264", "--workers", "1")
    assert code == 1, err
    rows = {r["name"]: r for r in ReviewSite(reviewed, "tester").episodes()}
    clean = rows["ep_clean"]["scores"]
    assert clean is not None and clean["duration_ratio"] == pytest.approx(1.0) and clean["jerk_z"] is not None
    assert rows["ep_unset"]["scores"] is None and rows["ep_stall"]["scores"] is None
    json.dumps(list(rows.values()), allow_nan=False)  # what the page parses: no NaN
