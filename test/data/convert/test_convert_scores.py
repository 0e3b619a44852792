"""convert writes the curation scores in the commit of every append, for every episode, equal to what
`curate` computes from the dataset (never stale); a manifest that filtered on a relative score names it
once an append moved it; the spec columns come from the episode's metadata."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from teleop_flywheel.cli import main as cli_main
from teleop_flywheel.data.convert import converter as conv
from teleop_flywheel.data.curation import curate as curate_module
from teleop_flywheel.data.curation.curate import curate
from teleop_flywheel.data.lerobot import v3_layout
from teleop_flywheel.data.lerobot.dataset import LeRobotDataset
from teleop_flywheel.data.lerobot.episode_table import CURATION_COLUMNS
from teleop_flywheel.data.validate.checks import inspect_bag
from teleop_flywheel.data.validate.episode_columns import episode_columns
from teleop_flywheel.data.validate.reasons import ValidateConfig
from teleop_flywheel.recording.mcap.reader import open_bag
from teleop_flywheel.testing.dataset_files import read_episodes
from teleop_flywheel.testing.synthetic_session import SessionSpec, write_session

SPEC = dict(width=256, height=192)


@pytest.fixture(scope="module")
def bags(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    root = tmp_path_factory.mktemp("scores")
    return [write_session(root / f"ep{i}", SessionSpec(seed=60 + i, duration_s=d, **SPEC)).bag
            for i, d in enumerate((2.5, 3.0, 4.5))]


def _assert_scores_are_curates(root: Path) -> None:
    eps = read_episodes(root).set_index("episode_index")
    report = curate(LeRobotDataset.open(root))
    assert len(report.episodes) == len(eps)
    for s in report.episodes:
        row = eps.loc[s.episode_index]
        assert row["jerk"] == s.jerk and row["jerk_z"] == s.jerk_z, s.episode_index
        assert row["duration_ratio"] == s.duration_ratio and row["coverage_gain"] == s.coverage_gap
        assert row["graded_success"] == s.success
    np.testing.assert_array_equal(np.stack([np.asarray(v) for v in eps.sort_index()["start_state"]]),
                                  np.array(report.start_states))


def test_every_append_rewrites_every_score(bags: list[Path], tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    ds = tmp_path / "ds"
    conv.convert(bags[:2], ds, codec="h264", workers=1, progress=False)
    assert set(CURATION_COLUMNS) <= set(read_episodes(ds).columns)
    _assert_scores_are_curates(ds)
    before = read_episodes(ds).set_index("episode_index")["duration_ratio"].to_dict()
    manifest = tmp_path / "m.json"
    assert cli_main(["manifest", "create", str(ds), "--out", str(manifest), "--filter", "duration_ratio < 2"]) == 0
    unfiltered = tmp_path / "all.json"
    assert cli_main(["manifest", "create", str(ds), "--out", str(unfiltered)]) == 0

    conv.convert(bags[2:], ds, codec="h264", workers=1, progress=False)  # a longer episode moves the median
    _assert_scores_are_curates(ds)
    after = read_episodes(ds).set_index("episode_index")["duration_ratio"].to_dict()
    assert after[0] != before[0] and after[1] != before[1]
    capsys.readouterr()
    assert cli_main(["manifest", "verify", str(ds), str(manifest), "--subset"]) == 1
    out = capsys.readouterr().out
    assert f"changed episode 0 id {json.loads(manifest.read_text())['episodes'][0]['episode_id']}: " \
           f"filter column duration_ratio: {json.dumps(before[0])} -> {json.dumps(after[0])}" in out
    # a manifest without a filter does not read the scores: the append leaves it valid
    assert cli_main(["manifest", "verify", str(ds), str(unfiltered), "--subset"]) == 0


def test_scores_of_a_dataset_converted_before_them_are_filled_in(bags: list[Path], tmp_path: Path) -> None:
    ds = tmp_path / "ds"
    conv.convert(bags[:2], ds, codec="h264", workers=1, progress=False)
    path = next((ds / "meta" / "episodes").rglob("*.parquet"))
    table = pq.read_table(path)
    # as a converter before scores wrote it: no curation column in the rows, no scores file
    pq.write_table(table.drop_columns([c for c in CURATION_COLUMNS if c in table.column_names]), path)
    (ds / v3_layout.SCORES_PATH).unlink()
    conv.convert(bags[2:], ds, codec="h264", workers=1, progress=False)
    _assert_scores_are_curates(ds)


def test_spec_columns_come_from_the_metadata(bags: list[Path]) -> None:
    bag = open_bag(bags[0])
    ins = inspect_bag(bag, ValidateConfig.load(), images=False)
    assert ins.episode is not None
    cols = episode_columns(bag, ins.episode, ins, None, (0.0, 0.0))
    assert cols["task_spec_id"] is None and cols["outcome_check"] is None  # recorded without a spec
    ep = dataclasses.replace(ins.episode, task_spec_id="spec-1234",
                             outcome_check={"passed": False, "detail": "gripper open"})
    cols = episode_columns(bag, ep, ins, None, (0.0, 0.0))
    assert cols["task_spec_id"] == "spec-1234"
    assert json.loads(cols["outcome_check"]) == {"passed": False, "detail": "gripper open"}


def test_an_append_brings_coverage_up_to_date_as_a_convert_of_every_bag_computes_it(
        bags: list[Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An append inside the dataset's box (on its 5-unit grid) takes the gains the dataset holds and adds
    the new start to them (no computation over every pair of starts) and writes the column a convert of
    all the bags at once writes, value for value; one that widens the box computes them again."""
    more = bags + [write_session(tmp_path / f"ep{i}", SessionSpec(seed=60 + i, duration_s=d, **SPEC)).bag
                   for i, d in ((3, 2.5), (4, 3.0))]  # seed 64's states lie in the box of seeds 60-63
    whole = tmp_path / "whole"
    conv.convert(more, whole, codec="h264", workers=1, progress=False)
    calls: list[int] = []
    real = curate_module.nearest_other

    def counted(points: np.ndarray) -> np.ndarray:
        calls.append(len(points))
        return real(points)

    monkeypatch.setattr(curate_module, "nearest_other", counted)
    ds = tmp_path / "ds"
    conv.convert(more[:4], ds, codec="h264", workers=1, progress=False)
    assert calls == [4]
    conv.convert(more[4:], ds, codec="h264", workers=1, progress=False)
    assert calls == [4]  # brought up to date, not computed again
    want = read_episodes(whole).set_index("episode_index")["coverage_gain"]
    got = read_episodes(ds).set_index("episode_index")["coverage_gain"]
    assert got.tolist() == want.tolist() and got.notna().all() and (got > 0).all()
    _assert_scores_are_curates(ds)
    calls.clear()
    widened = tmp_path / "widened"
    conv.convert(more[:2], widened, codec="h264", workers=1, progress=False)
    conv.convert(more[2:3], widened, codec="h264", workers=1, progress=False)  # seed 62 widens the box
    assert calls == [2, 3]
    _assert_scores_are_curates(widened)
