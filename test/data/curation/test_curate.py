"""curate: farthest-point order, jerk, duration tails, target poses and sample weights."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from support.mashing_data import pressed

from teleop_flywheel.cli import main as cli_main
from teleop_flywheel.data.curation.coverage import (
    farthest_point_order,
    halton,
    nearest_other,
    nearest_other_added,
    target_start_poses,
)
from teleop_flywheel.data.curation.curate import (
    JERK_BLOCK_ROWS,
    curate,
    duration_ratios,
    format_text,
    integrated_squared_jerk,
)
from teleop_flywheel.data.curation.weights import NS_PER_DAY, WeightRule, frame_weights, read_weights, sample_weights
from teleop_flywheel.data.lerobot.dataset import LeRobotDataset
from teleop_flywheel.testing.dataset_files import read_episodes, read_frames, rewrite_column, stack
from teleop_flywheel.testing.synthetic_dataset import SyntheticSpec, write


def test_farthest_point_order_on_a_hand_made_set() -> None:
    # mean is (2, 2); (10, 10) is farthest from it; then (0, 0) is farthest from (10, 10);
    # then (0, 1) vs (1, 0) vs (1, 1): distances to {(10,10),(0,0)} are 1, 1, sqrt(2) -> (1, 1);
    # then (0, 1) and (1, 0) are both 1 away -> lowest index first.
    pts = np.array([[0, 0], [1, 0], [0, 1], [1, 1], [10, 10], [0, 0]], dtype=float)
    order, gaps = farthest_point_order(pts)
    assert order.tolist() == [4, 0, 3, 1, 2, 5]
    np.testing.assert_allclose(gaps, [np.hypot(8, 8), np.hypot(10, 10), np.sqrt(2), 1, 1, 0])
    # Starting from (1, 0): (10, 10) is farthest; then (0, 1) at sqrt(2); then (0, 0), (1, 1) and
    # the duplicate (0, 0) are all 1 away -> lowest index (0); then (1, 1); the duplicate adds 0.
    order, gaps = farthest_point_order(pts, first=1)
    assert order.tolist() == [1, 4, 2, 0, 3, 5]
    np.testing.assert_allclose(gaps, [np.hypot(1, 2), np.hypot(9, 10), np.sqrt(2), 1, 1, 0])


def test_farthest_point_order_matches_brute_force() -> None:
    rng = np.random.default_rng(4)
    pts = rng.normal(size=(40, 3))
    order, gaps = farthest_point_order(pts)
    chosen = [int(np.argmax(np.linalg.norm(pts - pts.mean(0), axis=1)))]
    for _ in range(len(pts) - 1):
        best, best_d = None, -1.0
        for i in range(len(pts)):
            if i in chosen:
                continue
            d = min(np.linalg.norm(pts[i] - pts[c]) for c in chosen)
            if d > best_d:
                best, best_d = i, d
        chosen.append(best)
    assert order.tolist() == chosen
    assert np.all(np.diff(gaps[1:]) <= 1e-12)  # each later pick adds no more than the previous


def test_halton_is_well_spread() -> None:
    pts = halton(512, 3)
    assert pts.shape == (512, 3) and pts.min() >= 0 and pts.max() < 1
    counts = np.histogramdd(pts, bins=2)[0]
    assert counts.min() >= 56 and counts.max() <= 72  # ~64 in each octant


def test_targets_go_where_nobody_started() -> None:
    starts = np.random.default_rng(0).uniform(0, 1, size=(30, 2))  # all in the low corner of a 10x10 box
    poses, gaps = target_start_poses(starts, np.zeros(2), np.full(2, 10.0), count=3)
    assert np.all(poses.max(axis=1) > 7)  # far from the corner
    assert np.all(np.diff(gaps) <= 1e-12)
    for p, g in zip(poses, gaps, strict=True):
        assert g <= np.min(np.linalg.norm(starts / 10 - p / 10, axis=1)) + 1e-12
    # held joints stay at the median start
    poses, _ = target_start_poses(starts, np.zeros(2), np.full(2, 10.0), 2, vary=np.array([True, False]))
    np.testing.assert_allclose(poses[:, 1], np.median(starts[:, 1]))


def test_weights_follow_the_rule() -> None:
    day = NS_PER_DAY
    t0 = 1_800_000_000 * 10**9
    has = np.array([False, True, False, True])
    times = [t0, t0, t0 - 30 * day, t0 - 60 * day]
    w, age = sample_weights(has, times)
    raw = np.array([1.0, 2.5, 0.5, 2.5 * 0.25])
    np.testing.assert_allclose(w, raw / raw.sum())
    assert w.sum() == pytest.approx(1.0)
    np.testing.assert_allclose(age, [0, 0, 30, 60])
    w, _ = sample_weights(has, times, WeightRule(intervention_weight=2.0, half_life_days=60))
    raw = np.array([1.0, 2.0, 0.5**0.5, 2.0 * 0.5])
    np.testing.assert_allclose(w, raw / raw.sum())
    with pytest.raises(ValueError, match="half-life"):
        WeightRule(half_life_days=0)


@pytest.fixture(scope="module")
def ds_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write(tmp_path_factory.mktemp("curate") / "ds",
                 SyntheticSpec(episodes=16, min_length=40, max_length=80, seed=11, days_between_episodes=3)).root


def test_curate_scores_equal_independent_computation(ds_root: Path) -> None:
    r = curate(LeRobotDataset.open(ds_root))
    df = read_frames(ds_root).sort_values(["episode_index", "frame_index"])
    eps = read_episodes(ds_root).sort_values("episode_index")
    by_ep = {s.episode_index: s for s in r.episodes}
    for e, g in df.groupby("episode_index"):
        a = stack(g["action"]).astype(np.float64)
        jerk = np.diff(a, n=3, axis=0) * 30**3
        assert by_ep[e].jerk == pytest.approx(float((jerk**2).sum() / 30), rel=1e-9)
    median = np.median(eps["length"])
    for row in eps.itertuples():
        s = by_ep[row.episode_index]
        assert s.duration_ratio == pytest.approx(row.length / median)
        assert s.success == (0.0 if row.outcome == "failure" else 1.0 / row.attempts)
        assert s.has_intervention == bool(json.loads(row.interventions))
    # weights: the rule, recomputed from the episodes table by hand
    newest = eps["recorded_wall_ns"].max()
    raw = np.array([(2.5 if json.loads(x) else 1.0) * 0.5 ** ((newest - t) / NS_PER_DAY / 30)
                    for x, t in zip(eps["interventions"], eps["recorded_wall_ns"], strict=True)])
    np.testing.assert_allclose([s.weight for s in r.episodes], raw / raw.sum())
    assert sum(s.weight for s in r.episodes) == pytest.approx(1.0)
    assert sorted(r.coverage_order) == list(range(16))


def test_squared_jerk_over_row_blocks_is_each_episodes_own() -> None:
    """Episodes straddling the row blocks the jerk is computed in (rows 3 + k * JERK_BLOCK_ROWS on), the third
    starting on a block's first row, and episodes too short for a jerk (NaN)."""
    rng = np.random.default_rng(3)
    lengths = np.array([JERK_BLOCK_ROWS - 2, 5, 2, 3, JERK_BLOCK_ROWS + 7, 1, 40])
    stop = np.cumsum(lengths)
    start = stop - lengths
    action = rng.normal(0, 3, size=(int(stop[-1]), 6)).astype(np.float32)
    got = integrated_squared_jerk(action, start, stop, 30.0)
    for e, (a, b) in enumerate(zip(start, stop, strict=True)):
        if b - a < 4:
            assert np.isnan(got[e])
            continue
        jerk = np.diff(action[a:b].astype(np.float64), n=3, axis=0) * 30**3
        assert got[e] == pytest.approx(float((jerk**2).sum() / 30), rel=1e-9)


def test_jerky_episode_is_flagged(tmp_path: Path) -> None:
    root = write(tmp_path / "ds", SyntheticSpec(episodes=12, min_length=100, max_length=100, seed=2)).root
    rng = np.random.default_rng(0)

    def shake(action: np.ndarray) -> np.ndarray:
        out = action.copy()
        out[500:600] += rng.normal(0, 5, size=(100, 6)).astype(np.float32)  # episode 5 fights the rig
        return out

    rewrite_column(root, "action", shake)
    r = curate(LeRobotDataset.open(root))
    assert [s.episode_index for s in r.episodes if s.jerky] == [5]
    assert all(s.duration_flag == "" for s in r.episodes)


def test_duration_both_tails(tmp_path: Path) -> None:
    lengths = np.array([100, 100, 100, 40, 200, 100, 10, 100.0])
    tasks = ["a", "a", "a", "a", "a", "b", "b", "b"]
    ratios = duration_ratios(lengths, tasks)
    np.testing.assert_allclose(ratios, [1, 1, 1, 0.4, 2, 1, 0.1, 1])  # task medians 100 and 100


def test_cli_writes_weights_a_loader_can_read(ds_root: Path, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    plot = tmp_path / "scores.png"
    assert cli_main(["curate", str(ds_root), "--json", "--plot", str(plot), "--targets", "3"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert len(report["targets"]) == 3 and len(report["episodes"]) == 16
    assert plot.read_bytes()[:4] == b"\x89PNG" and plot.with_name("scores_starts.png").is_file()
    table = pq.read_table(ds_root / "meta" / "sample_weights.parquet").to_pandas()
    assert list(table.columns[:3]) == ["episode_index", "episode_id", "weight"]
    assert table["weight"].sum() == pytest.approx(1.0)
    assert table["episode_id"].tolist() == read_episodes(ds_root).sort_values("episode_index")["episode_id"].tolist()
    weights, rule = read_weights(ds_root)
    assert rule["intervention_weight"] == 2.5 and rule["half_life_days"] == 30.0 and "0.5 **" in rule["rule"]
    fw = frame_weights(LeRobotDataset.open(ds_root))
    assert fw.sum() == pytest.approx(1.0)


def test_foreign_dataset_without_metadata(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = write(tmp_path / "f", SyntheticSpec(episodes=5, min_length=20, max_length=30, episode_metadata=False)).root
    assert cli_main(["curate", str(root), "--no-weights"]) == 0
    out = capsys.readouterr().out
    assert "graded success unknown for every episode" in out and "recency not applied" in out
    assert not (root / "meta" / "sample_weights.parquet").exists()


def test_duration_flags_in_a_dataset(tmp_path: Path) -> None:
    """Equal lengths except one much shorter and one much longer episode (both tails)."""
    root = write(tmp_path / "ds", SyntheticSpec(episodes=9, lengths=(60,) * 7 + (30, 120), seed=1)).root
    r = curate(LeRobotDataset.open(root), duration_tolerance=1.5)
    assert {s.episode_index: s.duration_flag for s in r.episodes if s.duration_flag} == {7: "fast", 8: "slow"}
    r = curate(LeRobotDataset.open(root), duration_tolerance=2.5)
    assert not [s for s in r.episodes if s.duration_flag]


def test_how_hard_the_operator_pressed_is_an_axis(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The episode that squeezed through the gripper's force limit is flagged `pressed`, its measures
    in the table, the JSON and the scatter matrix; the gentle ones are not; without efforts: not measured."""
    ds_root, _bags = pressed(tmp_path)
    report = curate(LeRobotDataset.open(ds_root))
    assert [s.pressed for s in report.episodes] == [True, False, False]
    mash = report.episodes[0].mashing
    assert mash is not None and mash.grip_limit_s > 2.0 and mash.protection_near >= 1
    text = format_text(report)
    assert "grip s" in text and "pressed hard (excess load above" in text and "): [0]" in text
    assert cli_main(["curate", str(ds_root), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["episodes"][0]["mashing"]["grip_limit_s"] == mash.grip_limit_s and doc["episodes"][1]["pressed"] is False
    old = tmp_path / "old"
    write(old, SyntheticSpec(episodes=3, seed=2))
    assert "pressed hard: not measured" in format_text(curate(LeRobotDataset.open(old)))


def test_graded_success_from_the_columns_is_the_records_own() -> None:
    """`table_successes` (no record per row) gives what a record per row gives, for every way a table
    holds outcome and attempts: the columns, a column left empty (the metadata JSON then decides), a
    failure whatever its attempts, an outcome that is neither, no attempts column at all."""
    import pandas as pd  # noqa: PLC0415

    from teleop_flywheel.core.episode import EpisodeMeta  # noqa: PLC0415
    from teleop_flywheel.data.curation.curate import successes, table_successes  # noqa: PLC0415
    from teleop_flywheel.data.lerobot.episode_table import table_records  # noqa: PLC0415

    def meta(outcome: str, attempts: int) -> str:
        return json.dumps(EpisodeMeta(episode_name="e", task="t", outcome=outcome, attempts=attempts).to_strings())

    rows = [("success", 1.0, meta("failure", 5)), ("success", 3.0, None), ("failure", 2.0, None),
            ("failure", None, meta("success", 1)), ("success", None, meta("success", 4)), ("success", None, None),
            ("success", 0.0, None), (None, 2.0, meta("success", 2)), ("", 1.0, None), ("unknown", 1.0, None),
            ("success", 2.0, meta("success", 7))]
    df = pd.DataFrame({"episode_index": range(len(rows)), "length": [30] * len(rows),
                       "outcome": [r[0] for r in rows], "attempts": [r[1] for r in rows],
                       "episode_meta": [r[2] for r in rows]})
    tasks = [["t"]] * len(rows)
    want = successes(table_records(df, tasks, 30.0))
    np.testing.assert_array_equal(table_successes(df, tasks, 30.0), want)
    assert np.isnan(want).sum() == 5 and want[4] == 0.25  # the cases differ: the test can tell them apart
    no_attempts = df.drop(columns=["attempts"])
    np.testing.assert_array_equal(table_successes(no_attempts, tasks, 30.0),
                                  successes(table_records(no_attempts, tasks, 30.0)))


def test_farthest_point_order_is_the_plain_greedy_on_many_ties() -> None:
    """Past the point where picked points are dropped from the work (a few hundred points on a coarse
    grid: many equal distances), the order and gaps are the plain greedy's, lowest index on ties."""
    pts = np.random.default_rng(5).integers(0, 6, size=(400, 3)).astype(float)
    order, gaps = farthest_point_order(pts)
    to_mean = np.linalg.norm(pts - pts.mean(0), axis=1)
    want, want_gaps = [int(np.argmax(to_mean))], [float(to_mean.max())]
    nearest = np.linalg.norm(pts - pts[want[0]], axis=1)
    nearest[want[0]] = -1.0
    for _ in range(len(pts) - 1):
        pick = int(np.argmax(nearest))
        want.append(pick)
        want_gaps.append(float(nearest[pick]))
        nearest = np.minimum(nearest, np.linalg.norm(pts - pts[pick], axis=1))
        nearest[want] = -1.0
    assert order.tolist() == want
    np.testing.assert_array_equal(gaps, want_gaps)


@pytest.mark.parametrize("seed", range(4))
def test_nearest_other_brought_up_to_date_equals_it_computed_again(seed: int) -> None:
    """An append's coverage gains (the ones before, then each new start added in turn) are the gains
    computed from scratch, bit for bit: random starts, some on a coarse grid (duplicates and ties),
    a prefix of every length class (none, one lone start, most, all but one)."""
    rng = np.random.default_rng(seed)
    pts = np.concatenate([rng.normal(size=(150, 6)) * [30, 20, 25, 20, 40, 15],
                          rng.integers(0, 2, size=(50, 6)).astype(float)])[rng.permutation(200)]
    whole = nearest_other(pts)
    brute = np.linalg.norm(pts[:, None] - pts[None], axis=2) + np.diag(np.full(len(pts), np.inf))
    np.testing.assert_allclose(whole, brute.min(1), rtol=1e-12, atol=0)
    assert (whole == 0).sum() >= 2  # the duplicates are there
    for m in (0, 1, 2, 120, 199, 200):
        known = nearest_other(pts[:m])
        np.testing.assert_array_equal(nearest_other_added(pts, known), whole)
    assert np.isnan(nearest_other(pts[:1])).all() and len(nearest_other(pts[:0])) == 0
