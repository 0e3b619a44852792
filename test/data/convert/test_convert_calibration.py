"""convert: calibrations by role (never the simulated arm's by accident), joint limits from them, repo_id kept.

Each test converts a short synthetic session whose episode metadata carries the calibration form
under test; values are checked against the calibration that must have been used.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml

from teleop_flywheel.cli import main as cli_main
from teleop_flywheel.core.bag_topics import FOLLOWER_STATE
from teleop_flywheel.core.calibration import load_calibration, sim_calibration_file
from teleop_flywheel.core.episode import EpisodeMeta
from teleop_flywheel.core.resources import config_path
from teleop_flywheel.data.convert import converter as conv
from teleop_flywheel.data.convert.calibrations import joint_limits
from teleop_flywheel.data.lerobot.dataset import LeRobotDataset
from teleop_flywheel.data.provenance.manifest import create
from teleop_flywheel.data.reports.card import write_card
from teleop_flywheel.recording.mcap.reader import open_bag
from teleop_flywheel.testing.synthetic_session import SessionSpec, write_session

REAL = config_path("calibration/example_real_follower.yaml")  # a real arm's file: no role in its name


def _doc(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text())


def _session(path: Path, calibration: dict[str, Any], seed: int = 0) -> Path:
    spec = SessionSpec(duration_s=2.5, width=256, height=192, seed=seed, calibration=calibration)
    return write_session(path, spec).bag


def _convert(bags: list[Path], out: Path, **kw: Any) -> conv.ConvertResult:
    return conv.convert(bags, out, codec="h264", workers=1, progress=False, **kw)


def _state(root: Path) -> np.ndarray:
    data = pq.read_table(root / "data/chunk-000/file-000.parquet").to_pandas()
    return np.stack(data["observation.state"].to_numpy())


def test_role_keyed_real_calibration_is_used_and_gives_the_joint_limits(tmp_path: Path) -> None:
    bag = _session(tmp_path / "ep", {"follower": _doc(REAL), "leader": _doc(sim_calibration_file("leader"))})
    res = _convert([bag], tmp_path / "ds")
    assert res.errors == [] and len(res.converted[str(tmp_path / "ds")]) == 1
    real = load_calibration(REAL)
    info = json.loads((tmp_path / "ds/meta/info.json").read_text())
    assert info["joint_limits"] == joint_limits(real)  # not the simulated follower's
    assert info["joint_limits"] != joint_limits(load_calibration(sim_calibration_file("follower")))
    follower = open_bag(bag).joint_state(FOLLOWER_STATE)
    state = _state(tmp_path / "ds")
    expected = real.rad_to_lerobot(follower.position).astype(np.float32)
    assert np.isin(state[:, 0], expected[:, 0]).all()  # every frame holds a sample converted with the real file


def test_a_role_nobody_recorded_is_an_error_naming_role_and_option(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    # Recorded before roles were keys, from a real arm's file whose stem names no role.
    bag = _session(
        tmp_path / "ep", {"so101_5A46083062": _doc(REAL), "leader_sim": _doc(sim_calibration_file("leader"))}
    )
    res = _convert([bag], tmp_path / "ds")
    assert res.converted == {} and len(res.errors) == 1  # never the simulated arm's calibration
    assert "follower" in res.errors[0] and "--calibration follower=FILE" in res.errors[0]
    assert not (tmp_path / "ds" / "meta").exists()
    assert cli_main(["convert", str(bag), "--dataset", str(tmp_path / "cli"), "--codec", "h264", "--workers", "1"]) == 1
    assert "--calibration follower=FILE" in capsys.readouterr().err.splitlines()[-1]
    # Supplied: that file is used for the follower (the recorded leader stays the recorded one).
    assert cli_main(["convert", str(bag), "--dataset", str(tmp_path / "cli"), "--codec", "h264", "--workers", "1",
                     "--calibration", f"follower={REAL}"]) == 0
    info = json.loads((tmp_path / "cli/meta/info.json").read_text())
    assert info["joint_limits"] == joint_limits(load_calibration(REAL))


def test_bags_keyed_by_file_stem_stay_convertible(tmp_path: Path) -> None:
    legacy = {
        "follower_sim": _doc(sim_calibration_file("follower")),
        "leader_sim": _doc(sim_calibration_file("leader")),
    }
    res = _convert([_session(tmp_path / "ep", legacy)], tmp_path / "ds")
    assert res.errors == [] and len(res.converted[str(tmp_path / "ds")]) == 1


def test_calibration_by_role_reads_both_forms() -> None:
    def roles(cal: dict[str, Any]) -> dict[str, Any]:
        return EpisodeMeta(episode_name="e", calibration=cal).calibration_by_role()

    assert roles({"leader": 1, "follower": 2}) == {"leader": 1, "follower": 2}
    assert roles({"leader_sim": 1, "my_follower_arm": 2}) == {"leader": 1, "follower": 2}
    assert roles({"arm_a": 1, "arm_b": 2}) == {}  # no role named: nothing guessed
    assert roles({"follower_a": 1, "follower_b": 2}) == {}  # two candidates: ambiguous
    assert roles({"leader_follower": 1}) == {}  # names both roles
    assert roles({"follower": 1, "old_follower": 2}) == {"follower": 1}  # the role key wins


def test_bad_calibration_arguments_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bag = _session(tmp_path / "ep", {})
    for arg, message in (("wrist=x.yaml", "ROLE=FILE"), (f"follower={tmp_path}/none.yaml", "none.yaml")):
        assert cli_main(["convert", str(bag), "--dataset", str(tmp_path / "ds"), "--calibration", arg]) == 2  # usage
        assert message in capsys.readouterr().err
    res = _convert([bag], tmp_path / "ds", calibrations={"follower": REAL})
    assert "--calibration leader=FILE" in res.errors[0]


def test_repo_id_is_stored_and_read_by_card_and_manifest(tmp_path: Path) -> None:
    bag = _session(tmp_path / "ep", {})  # nothing recorded: both arms supplied
    files = [f"follower={sim_calibration_file('follower')}", f"leader={sim_calibration_file('leader')}"]
    args = ["convert", str(bag), "--dataset", str(tmp_path / "ds"), "--codec", "h264", "--workers", "1",
            "--repo-id", "lab/so101_pick", *(a for f in files for a in ("--calibration", f))]
    assert cli_main(args) == 0
    ds = LeRobotDataset.open(tmp_path / "ds")
    assert ds.info["repo_id"] == ds.repo_id == "lab/so101_pick"
    assert "# Data card: lab/so101_pick" in write_card(ds.root).read_text()
    assert create(ds)["repo_id"] == "lab/so101_pick"
    with pytest.raises(ValueError, match="refusing to change it"):
        _convert([bag], tmp_path / "ds", repo_id="other/name")
    again = _convert([_session(tmp_path / "ep2", {}, seed=1)], tmp_path / "ds",
                     calibrations={"follower": sim_calibration_file("follower"),
                                   "leader": sim_calibration_file("leader")})  # no --repo-id: kept
    assert len(again.converted[str(tmp_path / "ds")]) == 1
    assert LeRobotDataset.open(tmp_path / "ds").repo_id == "lab/so101_pick"
