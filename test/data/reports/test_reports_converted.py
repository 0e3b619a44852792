"""The reports on a dataset made by our own converter from simulator bags (not a hand-written one)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from teleop_flywheel.cli import main as cli_main
from teleop_flywheel.data.curation.curate import curate
from teleop_flywheel.data.lerobot.dataset import LeRobotDataset
from teleop_flywheel.data.reports.audit import audit
from teleop_flywheel.data.reports.flywheel_stats import stats_for
from teleop_flywheel.testing.dataset_files import read_episodes, read_frames, stack
from teleop_flywheel.testing.synthetic_session import SessionSpec, write_session


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("conv")
    specs = [
        SessionSpec(duration_s=2.5, seed=0, operator="ana"),
        SessionSpec(duration_s=2.5, seed=1, operator="ben", session_kind="policy",
                    interventions=((0.6, 1.2, "wrong_grasp"),)),
        SessionSpec(duration_s=3.0, seed=2, operator="ana", session_kind="policy"),
    ]
    for i, spec in enumerate(specs):
        write_session(tmp / "bags" / f"ep{i}", spec)
    out = tmp / "ds"
    assert cli_main(["convert", str(tmp / "bags"), "--dataset", str(out), "--codec", "h264", "--workers", "1"]) == 0
    return out


def test_audit_of_converted_dataset_equals_pandas(converted: Path) -> None:
    r = audit(LeRobotDataset.open(converted))
    df = read_frames(converted).sort_values(["episode_index", "frame_index"]).reset_index(drop=True)
    eps = read_episodes(converted)
    assert (r.episodes, r.frames) == (len(eps), len(df)) == (3, int(eps["length"].sum()))
    a = stack(df["action"]).astype(np.float32)
    same = np.all(a[1:].view(np.uint32) == a[:-1].view(np.uint32), axis=1) & (
        df["episode_index"].to_numpy()[1:] == df["episode_index"].to_numpy()[:-1])
    assert r.dead_frames == int(same.sum())
    state = stack(df["observation.state"]).astype(np.float64)
    np.testing.assert_allclose([j.visited_min for j in r.joint_ranges], state.min(0))
    assert {j.available_source for j in r.joint_ranges} == {"metadata"}  # the converter's joint_limits
    assert all(not j.exceeds_available for j in r.joint_ranges)


def test_curate_stats_manifest_on_converted_dataset(converted: Path, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    ds = LeRobotDataset.open(converted)
    r = curate(ds)
    by_ep = {s.episode_index: s for s in r.episodes}
    eps = read_episodes(converted).set_index("episode_index")
    for e, s in by_ep.items():
        assert s.episode_id == eps.loc[e, "episode_id"]
        assert s.has_intervention == bool(json.loads(eps.loc[e, "interventions"]))
    assert sum(s.has_intervention for s in r.episodes) == 1
    assert sum(s.weight for s in r.episodes) == pytest.approx(1.0)
    st = stats_for([converted])
    assert sum(c.interventions for c in st.per_checkpoint_week) == 1
    assert st.per_checkpoint_week[0].by_trigger == {"wrong_grasp": 1}
    manifest = tmp_path / "run.json"
    assert cli_main(["manifest", "create", str(converted), "--out", str(manifest)]) == 0
    assert cli_main(["manifest", "verify", str(converted), str(manifest)]) == 0
    ids = [e["episode_id"] for e in json.loads(manifest.read_text())["episodes"]]
    assert ids == [eps.loc[e, "episode_id"] for e in sorted(eps.index)]


def test_a_command_that_outran_the_follower_shows_in_curate_stats_and_card(tmp_path: Path,
                                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """Before: no report said how much of an episode the command outran the follower (no such column)."""
    bags = tmp_path / "bags"
    write_session(bags / "calm", SessionSpec(duration_s=8.0, seed=0, motion="reach", cameras=()))
    write_session(bags / "shaken", SessionSpec(duration_s=8.0, seed=1, motion="reach", cameras=(),
                                               follower_max_speed=2.0, human_fast=(2.0, 2.0)))
    out = tmp_path / "ds"
    assert cli_main(["convert", str(bags), "--dataset", str(out), "--workers", "1", "--include-failed"]) == 0
    capsys.readouterr()
    shaken = int(read_episodes(out).set_index("source_bag").loc["shaken", "episode_index"])
    report = curate(LeRobotDataset.open(out))
    by_ep = {s.episode_index: s for s in report.episodes}
    assert by_ep[shaken].outrun is not None and by_ep[shaken].outrun > 0.15 and by_ep[shaken].outrun_joint
    assert by_ep[1 - shaken].outrun is not None and by_ep[1 - shaken].outrun < 0.01
    assert cli_main(["curate", str(out)]) == 0
    text = capsys.readouterr().out
    assert f"validate's FOLLOWER_OUTRUN): {shaken} ({by_ep[shaken].outrun_joint}" in text
    s = stats_for([out])
    worst = max(s.tracking, key=lambda r: r.outrun_worst or 0.0)
    assert worst.outrun_worst_episode == shaken and (worst.outrun_worst or 0.0) > 0.15
    card = (out / "README.md").read_text()
    assert f"The command outran the follower (its speed or acceleration beyond what the follower achieved) on at " \
           f"most {100 * (worst.outrun_worst or 0.0):.1f} % of an episode ({worst.joint}, episode {shaken})" in card
