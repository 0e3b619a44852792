"""A dataset's consistency check reads what it checks; its repairs still rebuild what they need from
the whole episodes table."""
from __future__ import annotations

from pathlib import Path

from teleop_flywheel.data.convert import converter as conv
from teleop_flywheel.data.lerobot import v3_layout
from teleop_flywheel.data.lerobot.consistency import problems, repair
from teleop_flywheel.testing.synthetic_session import SessionSpec, write_session


def test_a_lost_stats_json_is_rebuilt_from_every_episode_row(tmp_path: Path) -> None:
    bags = [write_session(tmp_path / f"ep{i}", SessionSpec(seed=90 + i, session_time_s=60.0 * i, width=192,
                                                           height=144, duration_s=2.5)).bag for i in range(2)]
    ds = tmp_path / "ds"
    conv.convert(bags, ds, codec="h264", workers=1, progress=False)
    before = (ds / v3_layout.STATS_PATH).read_text()
    (ds / v3_layout.STATS_PATH).unlink()  # this version's name only: the file is the previous version's too
    assert [p.detail for p in problems(ds)] == ["meta/stats.json missing or unreadable"]
    done, left = repair(ds)
    assert len(done) == 1 and left == []
    assert (ds / v3_layout.STATS_PATH).read_text() == before
