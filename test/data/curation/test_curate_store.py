"""curate --store: the scores as episodes-table columns, equal to a hand computation; --drop-plan:
which episodes a filter drops and the coverage lost, equal to a brute-force computation."""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from teleop_flywheel.cli import main as cli_main
from teleop_flywheel.data.curation.coverage import CANDIDATES, halton
from teleop_flywheel.data.curation.curate import curate, drop_plan
from teleop_flywheel.data.lerobot import commit
from teleop_flywheel.data.lerobot.dataset import LeRobotDataset
from teleop_flywheel.data.lerobot.episode_table import CURATION_COLUMNS, episode_records
from teleop_flywheel.testing.dataset_files import read_episodes, read_frames, stack
from teleop_flywheel.testing.synthetic_dataset import SyntheticSpec, write

TASKS = ("pick the brick", "stack the cups")


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = write(tmp_path_factory.mktemp("store") / "ds",
                 SyntheticSpec(episodes=12, min_length=30, max_length=90, seed=5, tasks=TASKS)).root
    assert cli_main(["curate", str(root), "--store", "--no-weights"]) == 0
    return root


def _hand_scores(root: Path) -> dict[int, dict[str, float | None]]:
    """Every score from the files with pandas alone, by the rules in docs/dataset_reports.md."""
    frames = read_frames(root).sort_values(["episode_index", "frame_index"])
    eps = read_episodes(root).sort_values("episode_index").reset_index(drop=True)
    tasks = [t[0] for t in eps["tasks"]]
    jerk = {}
    for e, g in frames.groupby("episode_index"):
        a = stack(g["action"]).astype(np.float64)
        jerk[int(e)] = float((np.diff(a, n=3, axis=0) ** 2).sum() * 30**6 / 30)
    out: dict[int, dict[str, float | None]] = {}
    for task in set(tasks):
        rows = eps[[t == task for t in tasks]]
        logs = np.array([np.log10(1 + jerk[int(e)]) for e in rows["episode_index"]])
        median = float(np.median(rows["length"]))
        for k, row in enumerate(rows.itertuples()):
            out[int(row.episode_index)] = {
                "jerk": jerk[int(row.episode_index)],
                "jerk_z": float((logs[k] - logs.mean()) / logs.std()),
                "duration_ratio": row.length / median,
                "graded_success": 0.0 if row.outcome == "failure" else 1.0 / row.attempts,
            }
    return out


def test_stored_scores_equal_a_hand_computation(stored: Path) -> None:
    eps = read_episodes(stored).set_index("episode_index")
    assert set(CURATION_COLUMNS) <= set(eps.columns)
    hand = _hand_scores(stored)
    for e, want in hand.items():
        for name, value in want.items():
            assert eps.loc[e, name] == pytest.approx(value, rel=1e-9), (e, name)
    frames = read_frames(stored).sort_values(["episode_index", "frame_index"])
    first = frames.groupby("episode_index").head(1).set_index("episode_index")
    report = {s.episode_index: s for s in curate(LeRobotDataset.open(stored)).episodes}
    for e in hand:
        np.testing.assert_array_equal(np.asarray(eps.loc[e, "start_state"]),
                                      np.asarray(first.loc[e, "observation.state"], dtype=np.float64))
        assert eps.loc[e, "coverage_gain"] == report[e].coverage_gap  # what curate prints, stored
    # coverage_gain by hand: each start's distance to the nearest other, the visited box widened to 5-unit lines
    state = stack(frames["observation.state"]).astype(np.float64)
    lo, hi = np.floor(state.min(0) / 5) * 5, np.ceil(state.max(0) / 5) * 5
    starts = stack(first.sort_index()["observation.state"]).astype(np.float64) / np.maximum(hi - lo, 5)
    apart = np.linalg.norm(starts[:, None] - starts[None], axis=2) + np.diag(np.full(len(starts), np.inf))
    np.testing.assert_allclose(eps.sort_index()["coverage_gain"].to_numpy(dtype=float), apart.min(1), rtol=1e-12)
    recs = {r.episode_index: r for r in episode_records(LeRobotDataset.open(stored))}
    assert recs[3].jerk_z == pytest.approx(hand[3]["jerk_z"], rel=1e-9)  # the reader's typed fields


def test_store_is_idempotent_and_leaves_no_staging(stored: Path) -> None:
    before = read_episodes(stored)
    assert cli_main(["curate", str(stored), "--store", "--no-weights"]) == 0
    after = read_episodes(stored)
    assert before.drop(columns=["start_state"]).equals(after.drop(columns=["start_state"]))
    assert not commit.pending(stored) and os.readlink(stored).startswith("ds.versions/v")  # a new version


def test_drop_plan_equals_a_brute_force_computation(stored: Path, capsys: pytest.CaptureFixture[str]) -> None:
    expr = "jerk_z < 0.5 and duration_ratio between 0.8 and 1.25"
    eps = read_episodes(stored).sort_values("episode_index").reset_index(drop=True)
    keep = (eps["jerk_z"] < 0.5) & (eps["duration_ratio"] >= 0.8) & (eps["duration_ratio"] <= 1.25)
    assert 0 < int(keep.sum()) < len(eps)
    frames = read_frames(stored)
    states = stack(frames["observation.state"]).astype(np.float64)
    lo, hi = states.min(axis=0), states.max(axis=0)
    width = np.where(hi - lo > 0, hi - lo, 1.0)
    starts = np.stack([np.asarray(s) for s in eps["start_state"]]) / width
    cand = lo / width + halton(CANDIDATES, starts.shape[1])

    def radius(points: np.ndarray) -> float:
        return max(min(float(np.sqrt(((c - p) ** 2).sum())) for p in points) for c in cand)

    plan = drop_plan(LeRobotDataset.open(stored), [expr])
    assert [d.episode_index for d in plan.dropped] == [int(e) for e in eps["episode_index"][~keep]]
    assert plan.radius_before == pytest.approx(radius(starts), rel=1e-12)
    assert plan.radius_after == pytest.approx(radius(starts[keep.to_numpy()]), rel=1e-12)
    assert plan.radius_after >= plan.radius_before
    assert plan.gain_lost == pytest.approx(float(eps["coverage_gain"][~keep].sum()), rel=1e-12)
    assert plan.gain_total == pytest.approx(float(eps["coverage_gain"].sum()), rel=1e-12)
    assert plan.dropped_frames == int(eps["length"][~keep].sum())
    kept, gone = starts[keep.to_numpy()], starts[~keep.to_numpy()]
    assert plan.hole == pytest.approx(max(min(float(np.linalg.norm(d - k)) for k in kept) for d in gone), rel=1e-12)
    first = plan.dropped[0]
    row = eps.set_index("episode_index").loc[first.episode_index]
    if row["jerk_z"] >= 0.5:
        assert f"jerk_z = {row['jerk_z']:.4g} (not jerk_z < 0.5)" in first.why

    assert cli_main(["curate", str(stored), "--drop-plan", "--filter", expr, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["radius_after"] == pytest.approx(plan.radius_after) and len(doc["dropped"]) == len(plan.dropped)
    assert cli_main(["curate", str(stored), "--drop-plan", "--filter", expr]) == 0
    out = capsys.readouterr().out
    assert f"would drop {len(plan.dropped)} of 12 episodes" in out and "covering radius" in out
    assert f"before {plan.radius_before:.4f}, after {plan.radius_after:.4f}" in out


def test_drop_plan_bad_filter_is_one_line(stored: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["curate", str(stored), "--drop-plan", "--filter", "jerk_z <"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "bad filter 'jerk_z <'" in err[0] and "position 9" in err[0]
    assert cli_main(["curate", str(stored), "--drop-plan"]) == 2
    assert "--drop-plan needs --filter" in capsys.readouterr().err
