"""manifest create --filter EXPR freezes exactly the subset the expression chooses; verify evaluates it
again and names a changed score column; old manifests migrate to expressions of the same meaning."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from teleop_flywheel.cli import main as cli_main
from teleop_flywheel.testing.dataset_files import read_episodes
from teleop_flywheel.testing.synthetic_dataset import SyntheticSpec, write

EXPR = "jerk_z < 1 and duration_ratio between 0.67 and 1.5 and outcome == success"


@pytest.fixture()
def scored(tmp_path: Path) -> Path:
    root = write(tmp_path / "ds", SyntheticSpec(episodes=14, min_length=20, max_length=60, seed=3,
                                                tasks=("pick the brick", "pick and place"))).root
    assert cli_main(["curate", str(root), "--store", "--no-weights"]) == 0
    return root


def _set_cell(root: Path, episode: int, column: str, value: object) -> None:
    path = next((root / "meta" / "episodes").rglob("*.parquet"))
    df = pq.read_table(path).to_pandas()
    df.loc[df["episode_index"] == episode, column] = value
    pq.write_table(pa.Table.from_pandas(df, preserve_index=False), path)


def _create(root: Path, out: Path, *filters: str) -> dict[str, object]:
    args = ["manifest", "create", str(root), "--out", str(out)]
    for f in filters:
        args += ["--filter", f]
    assert cli_main(args) == 0
    return json.loads(out.read_text())


def test_a_filtered_manifest_is_the_hand_computed_subset(scored: Path, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    eps = read_episodes(scored)
    want = eps[(eps["jerk_z"] < 1) & (eps["duration_ratio"] >= 0.67) & (eps["duration_ratio"] <= 1.5)
               & (eps["outcome"] == "success")]
    assert 0 < len(want) < len(eps)
    m = _create(scored, tmp_path / "m.json", EXPR)
    assert sorted(e["episode_index"] for e in m["episodes"]) == sorted(want["episode_index"].tolist())
    assert m["format"] == "teleop_flywheel.manifest/4" and m["filter"] == [EXPR]
    by_id = eps.set_index("episode_id")
    assert set(m["filter_values"]) == set(want["episode_id"])
    for ep_id, values in m["filter_values"].items():
        assert values == {"jerk_z": by_id.loc[ep_id, "jerk_z"], "duration_ratio": by_id.loc[ep_id, "duration_ratio"],
                          "outcome": by_id.loc[ep_id, "outcome"]}
    assert cli_main(["manifest", "verify", str(scored), str(tmp_path / "m.json")]) == 0
    assert "OK: dataset matches" in capsys.readouterr().out
    # two filters must both hold; simple ones as before
    m2 = _create(scored, tmp_path / "m2.json", "jerk_z < 1", "task=pick the brick")  # the shell took the quotes
    want2 = eps[(eps["jerk_z"] < 1).to_numpy() & np.array([t[0] == "pick the brick" for t in eps["tasks"]])]
    assert sorted(e["episode_index"] for e in m2["episodes"]) == sorted(want2["episode_index"].tolist())


def test_a_changed_score_column_is_named(scored: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    m = _create(scored, tmp_path / "m.json", EXPR)
    victim = m["episodes"][0]
    old = m["filter_values"][victim["episode_id"]]["jerk_z"]
    _set_cell(scored, victim["episode_index"], "jerk_z", 3.5)  # the dataset grew: its score moved past the bound
    assert cli_main(["manifest", "verify", str(scored), str(tmp_path / "m.json")]) == 1
    out = capsys.readouterr().out
    assert (f"changed episode {victim['episode_index']} id {victim['episode_id']}: filter column jerk_z: "
            f"{json.dumps(old)} -> 3.5") in out
    assert "removed" not in out and "MISMATCH" in out
    # a small move that still passes is named too: the manifest's values are what curation decided on
    _set_cell(scored, victim["episode_index"], "jerk_z", old - 0.25)
    assert cli_main(["manifest", "verify", str(scored), str(tmp_path / "m.json")]) == 1
    assert "filter column jerk_z" in capsys.readouterr().out
    # a column the filter does not read is the row hash's business: an unfiltered score is not in it
    _set_cell(scored, victim["episode_index"], "jerk_z", old)
    _set_cell(scored, victim["episode_index"], "coverage_gain", 9.0)
    assert cli_main(["manifest", "verify", str(scored), str(tmp_path / "m.json")]) == 0
    capsys.readouterr()


def test_bad_expressions_are_one_line_and_exit_2(scored: Path, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    for expr, where in (("jerk_z < 2 and colour == red", "unknown column 'colour' at position 16"),
                        ("jerk_z < 2 and (outcome == success", "expected ')', got the end at position 35")):
        assert cli_main(["manifest", "create", str(scored), "--out", str(tmp_path / "m.json"), "--filter", expr]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"bad filter {expr!r}" in err[0] and where in err[0], err
    assert not (tmp_path / "m.json").exists()


def test_foreign_dataset_without_scores_names_the_fix(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = write(tmp_path / "ds", SyntheticSpec(episodes=4, min_length=20, max_length=30)).root
    assert cli_main(["manifest", "create", str(root), "--out", str(tmp_path / "m.json"), "--filter", "jerk_z < 2"]) == 2
    assert "curate --store" in capsys.readouterr().err


def test_a_v3_manifest_migrates_to_expressions_of_the_same_meaning(scored: Path, tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    m = _create(scored, tmp_path / "now.json", "task == 'pick and place'", "operator != ana")
    v3 = {k: v for k, v in m.items() if k != "filter_values"} | {
        "format": "teleop_flywheel.manifest/3", "filter": ["task=pick and place", "operator!=ana"]}
    old = tmp_path / "v3.json"
    old.write_text(json.dumps(v3))
    assert cli_main(["manifest", "verify", str(scored), str(old)]) == 2
    assert "manifest format v3 is older than this reader" in capsys.readouterr().err
    assert cli_main(["migrate", str(old)]) == 0
    out = capsys.readouterr().out
    assert "manifest: v3 -> v4" in out and "task == 'pick and place'; operator != ana" in out
    new = json.loads((tmp_path / "v3.migrated.json").read_text())
    assert new["filter"] == ["task == 'pick and place'", "operator != ana"]
    assert new["episodes"] == m["episodes"] and new["filter_values"] == m["filter_values"]
    assert new["fingerprint"] == m["fingerprint"]
    assert cli_main(["manifest", "verify", str(scored), str(tmp_path / "v3.migrated.json")]) == 0
