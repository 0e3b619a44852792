"""card: counts equal the validator report's and the dataset's; foreign READMEs are kept."""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from support.mashing_data import pressed

from teleop_flywheel.cli import main as cli_main
from teleop_flywheel.data.reports.card import MARKER, read_validation
from teleop_flywheel.testing.dataset_files import read_episodes
from teleop_flywheel.testing.synthetic_dataset import SyntheticSpec, write

REPORT = {
    "episodes": [
        {"id": "e0", "status": "PASS", "reasons": []},
        {"id": "e1", "status": "FAIL", "reasons": [{"code": "FRAME_GAP", "detail": "4.1 s"},
                                                   {"code": "DEAD_AIR", "detail": "40 s"}]},
        {"id": "e2", "status": "FAIL", "reasons": [{"code": "DEAD_AIR"}]},
        {"id": "e3", "status": "FAIL", "reasons": [{"code": "OUTCOME_UNSET"}]},
        {"id": "e4", "status": "PASS", "reasons": []},
    ],
}


def test_card_counts_equal_the_validators(tmp_path: Path) -> None:
    root = write(tmp_path / "ds", SyntheticSpec(episodes=12, min_length=20, max_length=30, seed=9)).root
    entries = REPORT["episodes"] * 3
    (tmp_path / "val.json").write_text(json.dumps({"episodes": entries}))
    assert cli_main(["card", str(root), "--validation", str(tmp_path / "val.json")]) == 0
    card = (root / "README.md").read_text()
    failed = [e for e in entries if e["status"] == "FAIL"]
    reasons = Counter(r["code"] for e in failed for r in e["reasons"])
    assert f"| {len(entries)} | {len(failed)} | {len(entries) - len(failed)} | 12 |" in card
    for code, n in reasons.items():
        assert f"| {code} | {n} |" in card
    assert f"Rejection rate {100 * len(failed) / len(entries):.1f} %" in card
    eps = read_episodes(root)
    for op, n in eps["operator"].value_counts().items():
        assert f"| {op} | {n} |" in card
    assert "| pick the brick | 12 |" in card
    assert "must not be used for" in card
    summary = read_validation(tmp_path / "val.json")
    assert (summary.recorded, summary.rejected, summary.reasons) == (15, 9, dict(reasons))


def test_no_rejections_is_said_loudly(tmp_path: Path) -> None:
    root = write(tmp_path / "ds", SyntheticSpec(episodes=3, min_length=20, max_length=30)).root
    (tmp_path / "val.json").write_text(json.dumps([{"id": "x", "passed": True}] * 3))
    assert cli_main(["card", str(root), "--validation", str(tmp_path / "val.json")]) == 0
    assert "the checks are not checking" in (root / "README.md").read_text()


def test_foreign_readme_is_not_overwritten(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = write(tmp_path / "ds", SyntheticSpec(episodes=3, min_length=20, max_length=30, episode_metadata=False)).root
    (root / "README.md").write_text("# somebody's card\n")
    assert cli_main(["card", str(root)]) == 2
    assert "was not written by" in capsys.readouterr().err
    assert cli_main(["card", str(root), "--force"]) == 0
    text = (root / "README.md").read_text()
    assert text.startswith("---\n") and MARKER in text and "recorded and rejected counts are unknown" in text
    assert "Collection method not recorded" in text
    assert cli_main(["card", str(root)]) == 0  # our own card is regenerated


def test_bad_report_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = write(tmp_path / "ds", SyntheticSpec(episodes=3, min_length=20, max_length=30)).root
    (tmp_path / "val.json").write_text(json.dumps({"summary": {}}))
    assert cli_main(["card", str(root), "--validation", str(tmp_path / "val.json")]) == 2
    assert "no per-episode list" in capsys.readouterr().err


def test_card_counts_equal_the_real_validators(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Bags from the simulator with seed faults -> `validate --json` -> card: same counts."""
    from teleop_flywheel.testing.synthetic_session import SessionSpec, write_session
    bags = tmp_path / "bags"
    specs = {"clean": SessionSpec(duration_s=2.0), "unset": SessionSpec(duration_s=2.0, outcome="unset"),
             "still": SessionSpec(duration_s=4.0, dead_air=(0.5, 3.0)), "clean2": SessionSpec(duration_s=2.0, seed=1)}
    for name, spec in specs.items():
        write_session(bags / name, spec)
    assert cli_main(["validate", str(bags), "--json", "--workers", "1"]) == 0
    report = json.loads(capsys.readouterr().out)
    (tmp_path / "val.json").write_text(json.dumps(report))
    s = report["summary"]
    assert s["rejected"] >= 2  # the faults are caught, so the comparison below means something
    root = write(tmp_path / "ds", SyntheticSpec(episodes=s["passed"], min_length=20, max_length=30)).root
    assert cli_main(["card", str(root), "--validation", str(tmp_path / "val.json")]) == 0
    card = (root / "README.md").read_text()
    assert f"| {s['episodes']} | {s['rejected']} | {s['passed']} | {s['passed']} |" in card
    for code, n in s["reasons"].items():
        assert f"| {code} | {n} |" in card
    assert f"Rejection rate {100 * s['rejection_rate']:.1f} %" in card


def test_card_has_hub_front_matter_repo_id_and_keeps_the_operators_notes(tmp_path: Path) -> None:
    import yaml

    from teleop_flywheel.data.reports.card import NOTES_BEGIN, NOTES_END, NOTES_TEMPLATE

    root = write(tmp_path / "ds", SyntheticSpec(episodes=3, min_length=20, max_length=30,
                                                extra_info={"repo_id": "lab/so101_bricks"})).root
    assert cli_main(["card", str(root), "--tag", "pick-place"]) == 0
    text = (root / "README.md").read_text()
    meta = yaml.safe_load(text.split("---\n")[1])  # what the hub reads, as on LeRobot's own cards
    assert meta["license"] == "apache-2.0" and meta["task_categories"] == ["robotics"]
    assert meta["tags"][0] == "LeRobot" and "pick-place" in meta["tags"]
    assert meta["configs"] == [{"config_name": "default", "data_files": "data/*/*.parquet"}]
    assert "# Data card: lab/so101_bricks" in text and "LeRobotDataset('lab/so101_bricks'" in text
    assert NOTES_TEMPLATE in text
    notes = "The brick starts left of the tape.\n\n- camera re-mounted on day 2"
    (root / "README.md").write_text(text.replace(NOTES_TEMPLATE, notes))
    assert cli_main(["card", str(root), "--license", "cc-by-4.0"]) == 0  # regenerated
    again = (root / "README.md").read_text()
    assert again.split(NOTES_BEGIN)[1].split(NOTES_END)[0].strip("\n") == notes
    meta = yaml.safe_load(again.split("---\n")[1])
    assert meta["license"] == "cc-by-4.0" and "pick-place" in meta["tags"]  # tags kept, license changed
    assert cli_main(["card", str(root)]) == 0
    assert yaml.safe_load((root / "README.md").read_text().split("---\n")[1])["license"] == "cc-by-4.0"


def _with_spec_columns(root: Path, checks: dict[int, bool]) -> None:
    """Episodes recorded under a task spec: its id and the predicate's verdict at stop, as convert writes them."""
    path = next((root / "meta/episodes").rglob("*.parquet"))
    df = pq.read_table(path).to_pandas()
    df["task_spec_id"] = [("spec-a" if e in checks else None) for e in df["episode_index"]]
    df["outcome_check"] = [json.dumps({"passed": checks[e], "detail": ""}) if e in checks else None
                           for e in df["episode_index"]]
    pq.write_table(pa.Table.from_pandas(df, preserve_index=False), path)


def test_card_shows_the_outcome_mix_with_mismatches(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = write(tmp_path / "ds", SyntheticSpec(episodes=10, min_length=20, max_length=30, seed=9)).root
    eps = read_episodes(root)
    outcome = dict(zip(eps["episode_index"], eps["outcome"], strict=True))
    # the predicate agrees with the operator on episodes 0-5 except 1 and 4; 6-9 were recorded without a spec
    checks = {e: (outcome[e] == "success") != (e in (1, 4)) for e in range(6)}
    _with_spec_columns(root, checks)
    entries = [{"id": f"r{i}", "status": "FAIL", "reasons": [{"code": "OUTCOME_MISMATCH"}]} for i in range(3)]
    entries += [{"id": f"k{i}", "status": "PASS"} for i in range(10)]
    (tmp_path / "val.json").write_text(json.dumps({"episodes": entries}))
    assert cli_main(["card", str(root), "--validation", str(tmp_path / "val.json")]) == 0
    card = (root / "README.md").read_text()
    n_success = int((eps["outcome"] == "success").sum())
    assert f"| success | {n_success} | {100 * n_success / 10:.0f} % |" in card
    assert f"| failure | {10 - n_success} | {100 * (10 - n_success) / 10:.0f} % |" in card
    assert "| mismatch, kept (operator's flag vs the spec's predicate; --trust-operator) | 2 | 33 % of 6 judged |" \
        in card
    assert "| mismatch, rejected (OUTCOME_MISMATCH) | 3 | not in the dataset |" in card
    assert "judged 6 of 10 episodes" in card
    assert "Task spec content ids: `(none)` (4), `spec-a` (6)." in card

    manifest = tmp_path / "run.json"
    expr = "outcome == success and episode_index < 6"
    assert cli_main(["manifest", "create", str(root), "--out", str(manifest), "--filter", expr]) == 0
    assert cli_main(["card", str(root), "--manifest", str(manifest)]) == 0
    assert f"wrote {tmp_path / 'run.card.md'}" in capsys.readouterr().out
    mcard = (tmp_path / "run.card.md").read_text()
    chosen = [e for e in range(6) if outcome[e] == "success"]
    assert f"{len(chosen)} of 10 episodes of this dataset" in mcard and f"chosen by `{expr}`" in mcard
    assert f"| success | {len(chosen)} | 100 % |" in mcard
    kept_mismatch = sum(e in (1, 4) for e in chosen)
    assert f"| mismatch, kept (operator's flag vs the spec's predicate; --trust-operator) | {kept_mismatch} |" in mcard
    assert (root / "README.md").read_text() == card  # the dataset's own card is not touched


def test_card_says_how_hard_the_operators_pressed(tmp_path: Path) -> None:
    ds_root, _bags = pressed(tmp_path)
    assert cli_main(["card", str(ds_root)]) == 0
    text = (ds_root / "README.md").read_text()
    section = text.split("## How hard the operators pressed", 1)[1].split("\n## ", 1)[0]
    rows = {line.split(" | ")[0].strip("| "): line for line in section.splitlines() if line.startswith("| ")}
    assert "contact felt" in rows["operator"]
    assert rows["bo"].startswith("| bo | 2 | 0.0 s (0.0 %) |") and "0 times in 0 episodes | 100 % |" in rows["bo"]
    assert "| ana | 1 | 4." in rows["ana"] and "| 0 (" in rows["ana"] and "in 1 episodes" in rows["ana"]
    assert "grip limit 0.2" in section
    old = write(tmp_path / "old", SyntheticSpec(episodes=3, seed=3)).root
    assert cli_main(["card", str(old)]) == 0
    assert "Not measured: the dataset has no `observation.effort`" in (old / "README.md").read_text()
