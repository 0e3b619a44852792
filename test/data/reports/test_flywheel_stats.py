"""stats: interventions per checkpoint/week/label/operator from bags and from a dataset; how hard each
operator pressed."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from support.mashing_data import pressed

from teleop_flywheel.cli import main as cli_main
from teleop_flywheel.core.episode import EpisodeMeta, Intervention
from teleop_flywheel.data.reports.flywheel_stats import iso_week, kmeans, stats_for
from teleop_flywheel.recording.mcap.writer import BagWriter
from teleop_flywheel.testing.dataset_files import read_episodes
from teleop_flywheel.testing.synthetic_dataset import SyntheticSpec, write

DAY = 86_400 * 10**9
MONDAY = 1_767_571_200 * 10**9  # 2026-01-05T00:00Z, ISO 2026-W02


def bag(root: Path, name: str, ckpt: str, day: int, operator: str, triggers: list[str | None]) -> None:
    meta = EpisodeMeta(episode_name=name, task="pick", operator=operator, outcome="success", attempts=1,
                       policy_checkpoint=ckpt, session_kind="rollout" if ckpt else "teleop",
                       started_mono_ns=5 * 10**9, clock_start={"mono_ns": 10**9, "wall_ns": MONDAY + day * DAY,
                                                                "uncertainty_ns": 100},
                       interventions=[Intervention(i + 1, 10**9 * (i + 2), 10**9 * (i + 3), t)
                                      for i, t in enumerate(triggers)])
    BagWriter(root / name, episode=meta, fsync=False).close()


def test_stats_from_bags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bag(tmp_path, "e1", "ckpt-a", 0, "ana", ["wrong_grasp"])
    bag(tmp_path, "e2", "ckpt-a", 1, "ben", ["wrong_grasp", "too_slow"])
    bag(tmp_path, "e3", "ckpt-a", 8, "ana", [])
    bag(tmp_path, "e4", "ckpt-b", 9, "ana", [None])
    bag(tmp_path, "e5", "ckpt-b", 10, "ben", [])
    bag(tmp_path, "e6", "", 10, "ben", [])  # a teleop demo: no checkpoint
    s = stats_for([tmp_path])
    rows = {(r.checkpoint, r.week): r for r in s.per_checkpoint_week}
    assert set(rows) == {("ckpt-a", "2026-W02"), ("ckpt-a", "2026-W03"), ("ckpt-b", "2026-W03")}
    a2 = rows[("ckpt-a", "2026-W02")]
    assert (a2.episodes, a2.interventions, a2.episodes_with_intervention) == (2, 3, 2)
    assert a2.by_trigger == {"wrong_grasp": 2, "too_slow": 1} and a2.by_operator == {"ana": 1, "ben": 2}
    assert rows[("ckpt-a", "2026-W03")].interventions == 0
    b3 = rows[("ckpt-b", "2026-W03")]
    assert b3.by_trigger == {"unlabelled": 1} and b3.rate == 0.5
    assert s.current_checkpoint == "ckpt-b"
    assert s.current["interventions_per_episode"] == 0.5 and s.current["latest_week"] == "2026-W03"
    assert s.episodes_per_task == {"pick": 6} and s.episodes_per_operator == {"ana": 3, "ben": 3}
    assert cli_main(["stats", str(tmp_path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["current_checkpoint"] == "ckpt-b"


def test_stats_from_dataset(tmp_path: Path) -> None:
    root = write(tmp_path / "ds", SyntheticSpec(episodes=20, min_length=20, max_length=30, seed=4,
                                                tasks=("pick", "place"), days_between_episodes=1)).root
    s = stats_for([root], k=3)
    eps = read_episodes(root)
    n_int = eps["interventions"].map(lambda x: len(json.loads(x)))
    weeks = eps["recorded_wall_ns"].map(iso_week)
    for r in s.per_checkpoint_week:
        sel = (eps["policy_checkpoint"] == r.checkpoint) & (weeks == r.week)
        assert r.episodes == int(sel.sum()) and r.interventions == int(n_int[sel].sum())
    assert sum(r.episodes for r in s.per_checkpoint_week) == 20
    assert s.episodes_per_task == {"pick": 10, "place": 10}
    assert len(s.clusters) == 3 and sum(c["episodes"] for c in s.clusters) == 20
    assert s.current_checkpoint == eps.loc[eps["recorded_wall_ns"].idxmax(), "policy_checkpoint"]


def test_kmeans_finds_obvious_clusters() -> None:
    rng = np.random.default_rng(0)
    centres = np.array([[0, 0], [10, 0], [0, 10]], dtype=float)
    pts = np.concatenate([c + rng.normal(0, 0.3, size=(15, 2)) for c in centres])
    labels, found = kmeans(pts, 3)
    assert [len(set(labels[i * 15:(i + 1) * 15])) for i in range(3)] == [1, 1, 1]
    assert len(set(labels)) == 3
    assert np.min(np.linalg.norm(found[:, None] - centres[None], axis=2), axis=0).max() < 0.5


def test_no_bags_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["stats", str(tmp_path)]) == 2
    assert "no bags" in capsys.readouterr().err


def test_stats_reads_the_mcap_not_metadata_yaml(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A metadata.yaml edited (or damaged) to say another operator is refused, naming the bag."""
    bag(tmp_path, "e1", "ckpt-a", 0, "ana", ["wrong_grasp"])
    bag(tmp_path, "e2", "ckpt-a", 1, "ben", [])
    meta = tmp_path / "e2" / "metadata.yaml"
    meta.write_text(meta.read_text().replace("operator: ben", "operator: eve"))
    assert cli_main(["stats", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "e2" in err and "disagree on operator" in err


def test_stats_say_how_hard_each_operator_pressed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ds_root, _bags = pressed(tmp_path)
    s = stats_for([ds_root])
    assert list(s.mashing) == ["(all)", "ana", "bo"]
    ana, bo = s.mashing["ana"], s.mashing["bo"]
    assert ana.grip_limit_s > 2.0 and ana.protection_near >= 1 and ana.episodes_near_protection == 1
    assert (bo.episodes, bo.grip_limit_s, bo.protection_near) == (2, 0.0, 0) and bo.felt_share == 1.0
    assert s.mashing["(all)"].grip_limit_s == ana.grip_limit_s and s.mashing["(all)"].episodes == 3
    assert cli_main(["stats", str(ds_root)]) == 0
    out = capsys.readouterr().out
    assert "how hard the operators pressed (grip limit 0.2" in out
    assert "  bo: at the grip limit 0.0 s" in out and "protection came near 0 time(s) in 0 of 2 episodes" in out
    assert cli_main(["stats", str(ds_root), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["mashing"]["ana"]["grip_limit_s"] == ana.grip_limit_s
