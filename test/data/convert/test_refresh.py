"""After an append the dataset's sample weights equal a full `curate` over it, value for value, while the
append reads only the appended episode's frames (however many the dataset holds); the card is marked
behind, never silently stale, and `card` makes it the full refresh's again."""
from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from teleop_flywheel.data.convert import converter as conv
from teleop_flywheel.data.convert.refresh import card_behind
from teleop_flywheel.data.curation.curate import curate
from teleop_flywheel.data.curation.weights import read_weight_table, write_weights
from teleop_flywheel.data.lerobot.dataset import LeRobotDataset
from teleop_flywheel.data.reports.card import write_card
from teleop_flywheel.testing.synthetic_session import SessionSpec, write_session

SPEC = dict(width=192, height=144, duration_s=2.5)


@pytest.fixture(scope="module")
def bags(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    root = tmp_path_factory.mktemp("refresh")
    return [write_session(root / f"ep{i}", SessionSpec(seed=80 + i, session_time_s=60.0 * i, **SPEC)).bag
            for i in range(5)]


def _frames_read(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Rows each parquet read of a data file returned (the real pyarrow reader, observed)."""
    counts: list[int] = []
    real = pq.read_table

    def observed(source, *args, **kwargs):  # type: ignore[no-untyped-def]
        table = real(source, *args, **kwargs)
        if "/data/chunk-" in str(source):
            counts.append(table.num_rows)
        return table

    monkeypatch.setattr(pq, "read_table", observed)
    return counts


def _append_reads(bag: Path, ds: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[int, int]:
    """(frames of data files the whole append read, frames the appended episode has)."""
    before = len(LeRobotDataset.open(ds).episodes)
    with monkeypatch.context() as m:
        counts = _frames_read(m)
        res = conv.convert([bag], ds, codec="h264", workers=1, progress=False)
    assert res.converted, res.errors
    eps = LeRobotDataset.open(ds).episodes
    assert len(eps) == before + 1
    return sum(counts), int(eps["length"].iloc[-1])


def test_appends_read_only_the_new_episode_and_weigh_as_curate(bags: list[Path], tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    ds = tmp_path / "ds"
    conv.convert(bags[:1], ds, codec="h264", workers=1, progress=False)
    reads = [_append_reads(b, ds, monkeypatch) for b in bags[1:]]
    # the frames read do not grow with the episodes already there: each append reads its own episode once
    assert [r for r, _ in reads] == [n for _, n in reads], reads
    table, rule = read_weight_table(ds)
    report = curate(LeRobotDataset.open(ds))
    full = tmp_path / "full.parquet"
    write_weights(LeRobotDataset.open(ds), report.episodes, report.rule, full)
    assert table.equals(pq.read_table(full)), "incremental weights differ from a full curate"
    assert rule["intervention_weight"] == report.rule.intervention_weight
    ages = table.column("age_days").to_pylist()
    assert ages[0] > ages[-1] == 0.0  # recency applied across the appends: the first is minutes older


def test_the_card_is_marked_behind_and_card_regenerates_the_full_one(bags: list[Path], tmp_path: Path) -> None:
    ds = tmp_path / "ds"
    conv.convert(bags[:2], ds, codec="h264", workers=1, progress=False)
    assert not card_behind(ds)  # a new dataset's card is written whole
    conv.convert(bags[2:3], ds, codec="h264", workers=1, progress=False)
    text = (ds / "README.md").read_text()
    assert card_behind(ds) and "now holds 3 episodes" in text
    conv.convert(bags[3:4], ds, codec="h264", workers=1, progress=False)
    text = (ds / "README.md").read_text()
    assert text.count("This card is behind its dataset") == 1 and "now holds 4 episodes" in text
    write_card(ds)
    regenerated = (ds / "README.md").read_text()
    assert not card_behind(ds)
    fresh = tmp_path / "batch" / "ds"  # the same four episodes in one convert: one full refresh
    conv.convert(bags[:4], fresh, codec="h264", workers=1, progress=False)
    assert regenerated == (fresh / "README.md").read_text()  # byte for byte
