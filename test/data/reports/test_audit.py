"""audit: every number equals an independent pandas/numpy computation; the length check fires."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from teleop_flywheel.cli import main as cli_main
from teleop_flywheel.data.errors import DatasetError
from teleop_flywheel.data.lerobot.dataset import LeRobotDataset
from teleop_flywheel.data.reports.audit import audit
from teleop_flywheel.testing.dataset_files import drop_rows, read_episodes, read_frames, rewrite_column, stack
from teleop_flywheel.testing.synthetic_dataset import SyntheticSpec, write


@pytest.fixture(scope="module")
def ours(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write(tmp_path_factory.mktemp("audit") / "ds", SyntheticSpec(episodes=14, min_length=40, max_length=90,
                                                                       seed=3)).root


@pytest.fixture(scope="module")
def foreign(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Another writer's flavour: list<float> vectors, several data files, names as {"motors": [...]},
    no teleop_flywheel episode columns."""
    root = write(tmp_path_factory.mktemp("audit") / "foreign",
                 SyntheticSpec(episodes=9, min_length=30, max_length=60, seed=5, list_type="list",
                               frames_per_file=150, episode_metadata=False)).root
    info = json.loads((root / "meta/info.json").read_text())
    for key in ("action", "observation.state"):
        info["features"][key]["names"] = {"motors": info["features"][key]["names"]}
    (root / "meta/info.json").write_text(json.dumps(info))
    return root


def expected_numbers(root: Path) -> dict:
    """The audit computed the slow, obvious way with pandas."""
    df = read_frames(root).sort_values(["episode_index", "frame_index"]).reset_index(drop=True)
    df["a_bytes"] = df["action"].map(lambda a: np.asarray(a, dtype=np.float32).tobytes())
    prev = df.groupby("episode_index")["a_bytes"].shift()
    dead = df["a_bytes"] == prev
    leading = []
    for _, g in df.assign(dead=dead).groupby("episode_index"):
        flags = g["dead"].tolist()[1:]
        n = 0
        while n < len(flags) and flags[n]:
            n += 1
        leading.append(n)
    lengths = df.groupby("episode_index").size().to_numpy()
    state = stack(df["observation.state"]).astype(np.float64)
    starts = stack(df[df["frame_index"] == 0].sort_values("episode_index")["observation.state"]).astype(np.float64)
    dist = np.sqrt(((starts - starts.mean(axis=0)) ** 2).sum(axis=1))
    q1, q3 = np.percentile(dist, [25, 75])
    return {
        "episodes": len(lengths), "frames": len(df), "min": lengths.min(), "median": np.median(lengths),
        "max": lengths.max(), "dead_share": dead.mean(), "leading": leading,
        "visited_min": state.min(0), "visited_max": state.max(0),
        "start_span": starts.max(0) - starts.min(0), "start_std": starts.std(0), "dist": dist,
        "outliers": [i for i, d in enumerate(dist) if d > q3 + 1.5 * (q3 - q1)],
    }


@pytest.mark.parametrize("which", ["ours", "foreign"])
def test_audit_equals_independent_computation(which: str, request: pytest.FixtureRequest) -> None:
    root = request.getfixturevalue(which)
    exp = expected_numbers(root)
    r = audit(LeRobotDataset.open(root))
    assert (r.episodes, r.frames) == (exp["episodes"], exp["frames"])
    assert r.length_frames["min"] == exp["min"] and r.length_frames["max"] == exp["max"]
    assert r.length_frames["median"] == exp["median"]
    assert r.length_frames["max_over_min"] == pytest.approx(exp["max"] / exp["min"])
    assert r.length_seconds["max"] == pytest.approx(exp["max"] / 30)
    assert r.dead_share == pytest.approx(exp["dead_share"])
    assert r.dead_share > 0.02  # the fixture has dead air, so the comparison means something
    assert r.leading_dead == exp["leading"]
    assert r.leading_dead_median == np.median(exp["leading"]) and r.leading_dead_max == max(exp["leading"])
    assert r.leading_dead_max_episode == int(np.argmax(exp["leading"]))
    np.testing.assert_allclose([j.visited_min for j in r.joint_ranges], exp["visited_min"])
    np.testing.assert_allclose([j.visited_max for j in r.joint_ranges], exp["visited_max"])
    np.testing.assert_allclose([s.span for s in r.start_spread], exp["start_span"])
    np.testing.assert_allclose([s.std for s in r.start_spread], exp["start_std"], rtol=1e-9)
    np.testing.assert_allclose(r.start_distance, exp["dist"], rtol=1e-9)
    assert r.outliers == exp["outliers"]
    assert [j.joint for j in r.joint_ranges][0] == "shoulder_pan.pos"
    assert r.joint_ranges[-1].available_source == "so101-default"
    assert r.joint_ranges[-1].share == pytest.approx(r.joint_ranges[-1].visited / 100.0)


def test_shuffled_rows_are_sorted_and_give_the_same_numbers(tmp_path: Path) -> None:
    root = write(tmp_path / "ds", SyntheticSpec(episodes=6, min_length=30, max_length=50, seed=8)).root
    before = audit(LeRobotDataset.open(root)).to_dict()
    import pyarrow.parquet as pq
    path = next((root / "data").rglob("*.parquet"))
    table = pq.read_table(path)
    perm = np.random.default_rng(0).permutation(table.num_rows)
    pq.write_table(table.take(perm), path)
    after = audit(LeRobotDataset.open(root))
    assert after.notes and "sorted" in after.notes[0]
    for key in ("frames", "dead_share", "leading_dead", "start_distance", "outliers", "episode_lengths"):
        assert after.to_dict()[key] == before[key], key


def test_hand_made_dead_air(tmp_path: Path) -> None:
    """Actions a a a b b c in episode 0: 3 dead frames, 2 of them leading."""
    root = write(tmp_path / "ds", SyntheticSpec(episodes=2, min_length=6, max_length=6, seed=1)).root

    def pattern(action: np.ndarray) -> np.ndarray:
        out = np.tile(np.arange(12, dtype=np.float32)[:, None], (1, 6))  # all distinct
        out[0:3] = 1.5
        out[3:5] = 2.5
        out[5] = 3.5
        return out

    rewrite_column(root, "action", pattern)
    r = audit(LeRobotDataset.open(root))
    assert r.leading_dead == [2, 0]
    assert r.dead_frames == 3 and r.dead_share == pytest.approx(3 / 12)


def test_negative_zero_is_not_bit_identical(tmp_path: Path) -> None:
    root = write(tmp_path / "ds", SyntheticSpec(episodes=1, min_length=4, max_length=4, seed=1)).root
    rewrite_column(root, "action", lambda a: np.array([[0.0] * 6, [-0.0] * 6, [-0.0] * 6, [1.0] * 6],
                                                       dtype=np.float32))
    assert audit(LeRobotDataset.open(root)).leading_dead == [0]
    assert audit(LeRobotDataset.open(root)).dead_frames == 1


def test_truncated_episode_fires_the_length_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = write(tmp_path / "ds", SyntheticSpec(episodes=8, min_length=40, max_length=60, seed=2)).root
    declared = int(read_episodes(root).set_index("episode_index").loc[5, "length"])
    drop_rows(root, episode=5, count=7)
    with pytest.raises(DatasetError, match=f"episode 5: metadata length {declared} but {declared - 7} data rows"):
        audit(LeRobotDataset.open(root))
    assert cli_main(["audit", str(root)]) == 2
    err = capsys.readouterr().err
    assert f"episode 5: metadata length {declared}" in err
    assert "total_frames" in err  # info.json totals disagree too, and say so


def test_shifted_bounds_fire(tmp_path: Path) -> None:
    """Lengths right but dataset_from_index pointing at the wrong rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    root = write(tmp_path / "ds", SyntheticSpec(episodes=4, min_length=20, max_length=30, seed=2)).root
    path = next((root / "meta/episodes").rglob("*.parquet"))
    t = pq.read_table(path)
    for name in ("dataset_from_index", "dataset_to_index"):
        i = t.schema.get_field_index(name)
        t = t.set_column(i, name, pa.array(t.column(name).to_numpy() + np.array([0, 0, 1, 1])))
    pq.write_table(t, path)
    with pytest.raises(DatasetError, match="episode 2: dataset_from_index"):
        audit(LeRobotDataset.open(root))


def test_cli_json_and_html(ours: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "report" / "audit.html"
    assert cli_main(["audit", str(ours), "--json", "--html", str(out)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["episodes"] == 14 and len(data["joint_ranges"]) == 6
    page = out.read_text()
    for name in ("joint_ranges", "start_states", "episode_lengths"):
        png = out.parent / "audit_files" / f"{name}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"audit_files/{name}.png" in page


def test_bad_input_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["audit", str(tmp_path)]) == 2
    assert "not a LeRobot dataset (no meta/info.json)" in capsys.readouterr().err
    root = write(tmp_path / "v2", SyntheticSpec(episodes=2, min_length=5, max_length=6,
                                                extra_info={"codebase_version": "v2.1"})).root
    assert cli_main(["audit", str(root)]) == 2
    assert "codebase_version 'v2.1' is not supported" in capsys.readouterr().err


def test_available_range_comes_from_limits_metadata(tmp_path: Path) -> None:
    limits = {"shoulder_pan.pos": [-110.0, 110.0], "gripper": [0.0, 50.0]}
    root = write(tmp_path / "ds", SyntheticSpec(episodes=3, min_length=20, max_length=30,
                                                extra_info={"joint_limits": limits})).root
    ranges = {j.joint: j for j in audit(LeRobotDataset.open(root)).joint_ranges}
    assert (ranges["shoulder_pan.pos"].available, ranges["shoulder_pan.pos"].available_source) == (220.0, "metadata")
    assert ranges["gripper.pos"].share == pytest.approx(ranges["gripper.pos"].visited / 50.0)
    assert ranges["elbow_flex.pos"].available_source == "so101-default"


def test_available_range_comes_from_the_calibration(tmp_path: Path) -> None:
    from teleop_flywheel.core.calibration import load_calibration, sim_calibration_file
    arm = load_calibration(sim_calibration_file("follower"))
    root = write(tmp_path / "ds", SyntheticSpec(episodes=3, min_length=20, max_length=30,
                                                extra_info={"calibration": {"follower": arm.to_dict()}})).root
    ranges = {j.joint: j for j in audit(LeRobotDataset.open(root)).joint_ranges}
    pan = arm["shoulder_pan"]
    assert ranges["shoulder_pan.pos"].available_source == "calibration"
    assert ranges["shoulder_pan.pos"].available == pytest.approx((pan.range_max - pan.range_min) * 360 / 4095)
    assert (ranges["gripper.pos"].available_min, ranges["gripper.pos"].available_max) == (0.0, 100.0)
