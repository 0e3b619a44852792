"""Mashing measured per episode: time at the follower gripper's force limit, excess load in contact,
approaches to the overload protection, the contact felt through the leader — from a converted dataset,
checked against the bags it came from (their 100 Hz follower load, not the dataset's 30 fps frames)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from support.mashing_data import pressed

from teleop_flywheel.cli import main as cli_main
from teleop_flywheel.core.bag_topics import FOLLOWER_STATE
from teleop_flywheel.core.so101 import JOINT_NAMES
from teleop_flywheel.data.convert import converter as conv
from teleop_flywheel.data.lerobot.dataset import LeRobotDataset
from teleop_flywheel.data.lerobot.episode_table import episode_records
from teleop_flywheel.data.reports import mashing as m
from teleop_flywheel.data.reports.audit import load
from teleop_flywheel.recording.mcap.reader import open_bag
from teleop_flywheel.testing.synthetic_session import SessionSpec, write_session

NAMES = [f"{j}.effort" for j in JOINT_NAMES]


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Path]]:
    return pressed(tmp_path_factory.mktemp("mashing"))


def test_thresholds_are_the_rig_s_own() -> None:
    """The grip limit and the overload thresholds are the follower's settings, not numbers of ours."""
    assert (m.GRIP_LIMIT, m.GRIPPER_CONTACT_LOAD) == (0.2, 0.1)
    assert (m.GRIPPER_OVERLOAD, m.BODY_OVERLOAD) == (0.25, 0.8)


def test_the_operator_who_squeezed_is_measured_and_the_gentle_one_is_not(made: tuple[Path, list[Path]]) -> None:
    ds_path, bags = made
    ds = LeRobotDataset.open(ds_path)
    measures = m.dataset_mashing(ds, load(ds))
    assert measures is not None and [x.episode_index for x in measures] == [0, 1, 2]
    ana, *bo = measures
    load_100hz = np.abs(open_bag(bags[0]).joint_state(FOLLOWER_STATE).effort[:, 5])
    at_limit_s = np.count_nonzero(load_100hz >= m.GRIP_LIMIT) / 100  # the bag's own time at the limit
    assert at_limit_s > 2.0 and abs(ana.grip_limit_s - at_limit_s) < 0.15, (ana.grip_limit_s, at_limit_s)
    assert ana.excess_peak == pytest.approx(0.5 - m.GRIPPER_CONTACT_LOAD, abs=1e-6)  # its cap, beyond contact
    assert ana.protection_near >= 1 and ana.protection_near_s > 2.0  # 0.5 is past 0.9 x 0.25
    for gentle in bo:  # capped at 0.15: a grasp (contact), never the limit, never near the protection
        assert gentle.grip_limit_s == 0.0 and gentle.protection_near == 0 and gentle.contact_s > 1.0
        assert gentle.excess_peak == pytest.approx(0.15 - m.GRIPPER_CONTACT_LOAD, abs=1e-6)
        assert gentle.excess_integral < ana.excess_integral / 2
    assert all(x.felt_share == 1.0 for x in measures)  # the leader rendered every grasp (feedback `gripper`)
    by_op = m.by_operator(measures, sorted(episode_records(ds), key=lambda r: r.episode_index), ds.fps)
    assert set(by_op) == {"ana", "bo"} and by_op["bo"].episodes == 2 and by_op["bo"].grip_limit_s == 0.0
    assert by_op["ana"].worst_episode == 0 and by_op["ana"].grip_limit_s == ana.grip_limit_s


def test_felt_share_says_whether_the_leader_rendered_the_contact() -> None:
    effort = np.zeros((10, 6))
    effort[2:8, 5] = 0.3  # six frames of grasp
    ceilings = np.zeros((10, 12))
    assert m.episode_mashing(0, effort, NAMES, 30.0).felt_share is None  # not recorded: unknown, never 0
    assert m.episode_mashing(0, effort, NAMES, 30.0, ceilings).felt_share == 0.0  # feedback off: nothing felt
    ceilings[2:5, 11] = 0.15
    assert m.episode_mashing(0, effort, NAMES, 30.0, ceilings).felt_share == pytest.approx(0.5)
    nan = effort.copy()
    nan[3, :] = np.nan  # an unknown load counts as nothing
    assert m.episode_mashing(0, nan, NAMES, 30.0).contact_s == pytest.approx(5 / 30)


def test_a_dataset_without_efforts_is_not_measured(tmp_path: Path) -> None:
    bag = write_session(tmp_path / "old", SessionSpec(duration_s=3.0, effort=False, seed=9)).bag
    conv.convert([bag], tmp_path / "ds", codec="h264", workers=1, progress=False)
    ds = LeRobotDataset.open(tmp_path / "ds")
    assert m.dataset_mashing(ds, load(ds)) is None


def test_convert_stores_the_measures_so_a_manifest_can_leave_the_masher_out(made: tuple[Path, list[Path]],
                                                                            tmp_path: Path) -> None:
    ds_path, _bags = made
    ds = LeRobotDataset.open(ds_path)
    table = ds.episodes.sort_values("episode_index")
    measures = m.dataset_mashing(ds, load(ds))
    assert measures is not None
    for column, values in zip(m.TABLE_COLUMNS, zip(*(m.table_columns(x).values() for x in measures), strict=True),
                              strict=True):
        assert table[column].tolist() == pytest.approx(list(values)), column
    out = tmp_path / "gentle.json"
    assert cli_main(["manifest", "create", str(ds_path), "--out", str(out), "--filter", "grip_limit_s < 1"]) == 0
    kept = {e["episode_id"] for e in json.loads(out.read_text())["episodes"]}
    assert kept == set(table.episode_id[table.episode_index != 0])


def test_free_motion_at_full_load_is_neither_contact_nor_near_the_protection() -> None:
    """A body joint reversing at speed passes full load while moving (seen on the simulated rig:
    wrist_roll at 1.0); the same load on a stalled shaft is the arm pressing on something. The
    protection counts only loads held for a quarter of the time that trips it (0.5 s)."""
    fps = 30.0
    effort = np.zeros((60, 6))
    effort[10:13, 4] = 1.0  # 0.1 s at full load, wrist_roll
    moving = np.zeros((60, 6))
    moving[:, 4] = np.arange(60) * 2.0  # 60 deg/s: turning
    free = m.episode_mashing(0, effort, NAMES, fps, state=moving)
    assert (free.excess_peak, free.contact_s, free.protection_near) == (0.0, 0.0, 0)
    stalled = m.episode_mashing(0, effort, NAMES, fps, state=np.zeros((60, 6)))
    assert stalled.excess_peak == pytest.approx(0.5) and stalled.contact_s == pytest.approx(0.1)
    assert stalled.protection_near == 0  # 0.1 s near 0.8: not held
    effort[20:40, 4] = 0.75  # 0.67 s within 10 % of 0.8
    held = m.episode_mashing(0, effort, NAMES, fps, state=np.zeros((60, 6)))
    assert (held.protection_near, held.protection_near_s) == (1, pytest.approx(20 / fps))
    assert m.NEAR_TIME_S == 0.5 and m.STALL_DEG_S["wrist_roll"] == pytest.approx(np.degrees(0.1))
