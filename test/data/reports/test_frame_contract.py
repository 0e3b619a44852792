"""The frame contract on datasets: our converter's passes; actions shifted by a frame either way, or
copied from the state, are flagged by audit and doctor."""
from __future__ import annotations

import html
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from teleop_flywheel.cli import main as cli_main
from teleop_flywheel.data.lerobot.dataset import LeRobotDataset
from teleop_flywheel.data.reports.audit import audit
from teleop_flywheel.data.reports.frame_contract import FrameContract
from teleop_flywheel.testing import synthetic_dataset
from teleop_flywheel.testing.dataset_files import data_files, read_frames, rewrite_column
from teleop_flywheel.testing.synthetic_session import SessionSpec, write_session


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Demo-like episodes: hand-like reaches, an STS3215's top speed, grasps held at the driver's load."""
    tmp = tmp_path_factory.mktemp("contract")
    for seed in range(3):
        write_session(tmp / "bags" / f"ep{seed}", SessionSpec(
            duration_s=8.0, seed=seed, motion="reach", follower_max_speed=4.7, grip_object=0.5,
            gripper_torque=0.16, cameras=()))
    out = tmp / "ds"
    assert cli_main(["convert", str(tmp / "bags"), "--dataset", str(out), "--workers", "1"]) == 0
    assert len(data_files(out)) == 1
    return out


def _contract(root: Path) -> FrameContract:
    c = audit(LeRobotDataset.open(root)).frame_contract
    assert c is not None
    return c


def _mutated(src: Path, dest: Path, change: str) -> Path:
    """A copy whose actions are shifted within each episode (+1: action[t] is the command of t+1), or the state."""
    shutil.copytree(src, dest)
    frames = read_frames(dest)
    episode = frames["episode_index"].to_numpy()
    state = np.stack(frames["observation.state"].to_numpy())

    def fn(action: np.ndarray) -> np.ndarray:
        if change == "state":
            return state.astype(action.dtype)
        shift = int(change)
        out = action.copy()
        for e in np.unique(episode):
            rows = np.flatnonzero(episode == e)
            moved = np.clip(np.arange(len(rows)) + shift, 0, len(rows) - 1)
            out[rows] = action[rows[moved]]
        return out

    rewrite_column(dest, "action", fn)
    return dest


def test_our_converter_keeps_the_contract(converted: Path, capsys: pytest.CaptureFixture[str]) -> None:
    c = _contract(converted)
    assert c.reference and c.problem == "" and c.flagged == [], c
    assert c.decided_share == 1.0, c  # every episode decides (standard error within 0.15 frame)
    assert c.offset_frames is not None and abs(c.offset_frames) < 0.2
    assert c.lag_frames is not None and 2.3 < c.lag_frames < 2.9  # 1 frame + the follower's 52 ms at 30 fps
    assert cli_main(["doctor", str(converted)]) == 0
    assert "as the contract says" in capsys.readouterr().out


@pytest.mark.parametrize("change,words", [("1", "frames ahead of the command"), ("-1", "frames behind the command"),
                                          ("state", "the action is the state of the same frame")])
def test_shifted_or_copied_actions_are_flagged(converted: Path, tmp_path: Path, change: str, words: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """Before: audit and doctor had no such check (doctor: consistent, exit 0)."""
    bad = _mutated(converted, tmp_path / "bad", change)
    c = _contract(bad)
    assert words in c.problem and c.flagged == [0, 1, 2], c
    if change != "state":
        assert abs(abs(c.offset_frames or 0.0) - 1.0) < 0.2, c.offset_frames
    assert cli_main(["doctor", str(bad), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["consistent"] and doc["frame_contract"]["flagged"] == [0, 1, 2]
    assert cli_main(["audit", str(bad), "--json", "--html", str(tmp_path / "audit.html")]) == 0
    assert json.loads(capsys.readouterr().out)["frame_contract"]["problem"] == c.problem
    assert html.escape(f"PROBLEM: {c.problem}") in (tmp_path / "audit.html").read_text()


def test_doctor_checks_the_contract_of_a_dataset_whose_videos_are_missing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The contract reads only the state and action columns. Before, doctor skipped it whenever it had
    found any problem, so a dataset copied without its videos (as `SamueleSandrini/record-test` is
    published) said nothing about its actions."""
    write_session(tmp_path / "bags" / "ep0", SessionSpec(duration_s=8.0, motion="reach", width=192, height=144))
    ds = tmp_path / "ds"
    assert cli_main(["convert", str(tmp_path / "bags"), "--dataset", str(ds), "--workers", "1", "--codec", "h264"]) == 0
    capsys.readouterr()
    videos = list(ds.resolve().rglob("*.mp4"))
    assert videos
    for video in videos:
        video.unlink()
    assert cli_main(["doctor", str(ds), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert not doc["consistent"] and any(".mp4" in p["problem"] for p in doc["problems"]), doc["problems"]
    contract = doc["frame_contract"]
    assert contract is not None and contract["problem"] == "" and contract["decided_share"] == 1.0, contract


def test_a_foreign_dataset_whose_actions_are_the_next_state(tmp_path: Path) -> None:
    """No bag lag to compare with (a dataset another writer made): the copy is still caught."""
    root = synthetic_dataset.write(tmp_path / "foreign", synthetic_dataset.SyntheticSpec(
        episodes=4, episode_metadata=False)).root
    c = _contract(root)
    assert not c.reference and "the action is the state of the next frame, copied" in c.problem, c.problem
