"""stats' throughput: cycle and reset time, demos per operator-station-hour, disengagements per
policy-hour and the seeds' costing equal a hand computation on sessions with known times."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.fleet import episode

from teleop_flywheel.cli import main as cli_main
from teleop_flywheel.data.reports.flywheel_stats import stats_for


@pytest.fixture
def fleet(tmp_path: Path) -> Path:
    # rig_a, ana: 20 s of motion, 15 s resets, one failure; an hour's break; then 30 s + 10 s resets.
    for i, outcome in enumerate(["success", "success", "failure", "success"]):
        episode(tmp_path, f"a{i}", "rig_a", "ana", 35 * i, 20, outcome)
    episode(tmp_path, "a4", "rig_a", "ana", 125 + 3600, 30, "success")
    episode(tmp_path, "a5", "rig_a", "ana", 125 + 3600 + 40, 30, "success")
    # rig_b, ben: a policy at work, 60 s episodes 20 s apart; a 10 s takeover handed back, and one
    # taken 50 s in and never handed back (10 s to the stop).
    episode(tmp_path, "b0", "rig_b", "ben", 0, 60, "success", "ckpt-7", ((5, 15),))
    episode(tmp_path, "b1", "rig_b", "ben", 80, 60, "success", "ckpt-7", ((50, None),))
    return tmp_path


def test_throughput_equals_the_hand_computation(fleet: Path) -> None:
    t = stats_for([fleet]).throughput
    a = t["per_station"]["rig_a"]
    # Two shifts (the hour-long gap is a break): 35·3 + 20 = 125 s, then 40 + 30 = 70 s.
    assert a["shifts"] == 2 and a["station_hours"] == pytest.approx(195 / 3600)
    assert (a["episodes"], a["demos"]) == (6, 5)
    assert a["median_reset_s"] == pytest.approx(15)  # resets 15, 15, 15, 10
    assert a["cycle_s"] == pytest.approx(195 / 6)
    # Demos' motion + reset: (20+15) + (20+15) + (20+0) + (30+10) + (30+0) = 160 s of 195.
    assert a["overhead"] == pytest.approx(195 / 160 - 1)
    assert a["per_demo_s"] == pytest.approx(195 / 5)
    assert a["demos_per_station_hour"] == pytest.approx(5 / (195 / 3600))
    assert a["plan"]["station_hours"] == pytest.approx(10_000 / (5 / (195 / 3600)))
    assert a["plan"]["station_weeks"] == pytest.approx(a["plan"]["station_hours"] / 40)
    assert a["disengagements"] == 0 and a["disengagements_per_policy_hour"] is None

    b = t["per_station"]["rig_b"]
    assert b["station_hours"] == pytest.approx(140 / 3600) and b["median_reset_s"] == pytest.approx(20)
    assert b["policy_hours"] == pytest.approx(100 / 3600)  # 120 s minus 10 s and the last 10 s
    assert b["disengagements"] == 2 and b["disengagements_per_policy_hour"] == pytest.approx(72)

    overall = t["overall"]
    assert overall["episodes"] == 8 and overall["shifts"] == 3
    assert overall["station_hours"] == pytest.approx(335 / 3600)
    assert set(t["per_operator"]) == {"ana", "ben"} and t["untimed"] == 0


def test_a_shorter_break_splits_more_shifts(fleet: Path) -> None:
    # Gaps of 15 s and more end a shift: each of rig_a's first four episodes is a shift of its own.
    a = stats_for([fleet], break_s=15).throughput["per_station"]["rig_a"]
    assert a["shifts"] == 5 and a["station_hours"] == pytest.approx((4 * 20 + 40 + 30) / 3600)


def test_stats_prints_the_plan(fleet: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["stats", str(fleet)]) == 0
    out = capsys.readouterr().out
    assert "rig rig_a" in out and "op ben" in out
    assert "10,000 demos take" in out and "station-weeks of 40 h" in out
    assert cli_main(["stats", str(fleet), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["throughput"]["per_station"]["rig_b"]["disengagements"] == 2
    assert cli_main(["stats", str(fleet), "--break-s", "0"]) == 2
    assert "--break-s must be > 0" in capsys.readouterr().err
