"""Time has one source (header stamps in the CDR), on ROS time; foreign rosbag2 bags convert like ours.

- an old bag of ours (CLOCK_MONOTONIC stamps, publish_time = stamp, no `stamp_clock`) is refused
  by the reader and by validate, naming `teleop-flywheel migrate`; migrated, its stamps and
  intervention times are exactly those of the same session recorded on ROS time, and it validates
  and converts to the same frames;
- publish_time 30 ms after the header stamp (a camera pipeline rosbag2 records) changes nothing:
  the same verdict and the same frames as publish_time = stamp (failed before: the validator read
  one time, the converter the other);
- a system-clock step in the episode's (monotonic, wall) samples is CLOCK_STEP;
- a bag written by rosbags' rosbag2 writer, and one laid out by the mcap library as
  `ros2 bag record -s mcap` lays it out, from the messages of one of our bags, validate (with
  `--outcome`; without it OUTCOME_UNSET) and convert to the same frames as our bag.
"""
from __future__ import annotations

import json
from pathlib import Path

import av
import numpy as np
import pyarrow.parquet as pq
import pytest

from teleop_flywheel.cli import main as cli_main
from teleop_flywheel.core.calibration import sim_calibration_file
from teleop_flywheel.core.episode import METADATA_RECORD, EpisodeMeta
from teleop_flywheel.data.convert import converter as conv
from teleop_flywheel.data.validate import validator as val
from teleop_flywheel.data.validate.reasons import Supplied
from teleop_flywheel.hw.camera import timecode
from teleop_flywheel.recording.mcap.exceptions import OutdatedBagError
from teleop_flywheel.recording.mcap.reader import open_bag, open_indexed
from teleop_flywheel.recording.mcap.writer import BagWriter
from teleop_flywheel.testing.foreign_bag import write_with_mcap, write_with_rosbags
from teleop_flywheel.testing.synthetic_session import MONO0_NS, WALL0_NS, SessionSpec, write_session

SESSION = dict(duration_s=3.0, session_kind="policy", interventions=((1.0, 2.0, "wrong_grasp"),), seed=21,
               width=256, height=192)
CFG = val.ValidateConfig.load()


def _verdict(bag: Path, supplied: Supplied | None = None) -> val.EpisodeReport:
    return val.validate_bag((str(bag), CFG, supplied))


def frames(dataset: Path) -> tuple[dict[str, np.ndarray], list[int]]:
    """Every data column but the positional ones, and the capture time in each video frame's pixels."""
    table = pq.read_table(next((dataset / "data").rglob("*.parquet")))
    cols = {n: np.asarray(table.column(n).to_pylist(), dtype=object if n == "task_index" else None)
            for n in table.column_names if n not in ("index", "episode_index", "task_index")}
    with av.open(str(next((dataset / "videos").rglob("*.mp4")))) as c:
        codes = [timecode.decode(f.to_ndarray(format="bgr24")) for f in c.decode(video=0)]
    return cols, codes


def _convert(bags: list[Path], out: Path, **kw: object) -> conv.ConvertResult:
    return conv.convert(bags, out, codec="h264", workers=1, progress=False, **kw)  # type: ignore[arg-type]


def assert_same_frames(a: Path, b: Path, clock_shift_ns: int = 0) -> None:
    """Same data columns, and video frames showing the same captures (`clock_shift_ns`: a's pixel
    clock minus b's, when one session stamped on ROS time and the other on CLOCK_MONOTONIC)."""
    ca, va = frames(a)
    cb, vb = frames(b)
    assert set(ca) == set(cb)
    for name in ca:
        np.testing.assert_array_equal(ca[name], cb[name], err_msg=name)
    assert [x - clock_shift_ns for x in va] == vb and len(va) == len(ca["frame_index"])


@pytest.fixture(scope="module")
def ours(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_session(tmp_path_factory.mktemp("ours") / "episode_ros", SessionSpec(stamp_clock="ros",
                                                                                       **SESSION)).bag


def test_an_old_stamp_bag_is_refused_then_migrated(ours: Path, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    old = write_session(tmp_path / "episode_mono", SessionSpec(stamp_clock="monotonic", **SESSION)).bag
    with pytest.raises(OutdatedBagError, match=r"header stamps on CLOCK_MONOTONIC.*run `teleop-flywheel migrate "):
        open_bag(old)
    assert "CLOCK_MONOTONIC" in _verdict(old).line() and f"teleop-flywheel migrate {old}" in _verdict(old).line()
    assert cli_main(["recover", str(old)]) == 2
    assert "run `teleop-flywheel migrate" in capsys.readouterr().err

    assert cli_main(["migrate", str(old)]) == 0
    out = capsys.readouterr().out
    assert "stamps: " in out and "header stamps" in out and "intervention times" in out and "schemas:" not in out
    new_bag, migrated = open_bag(ours), open_bag(tmp_path / "episode_mono.migrated")
    assert migrated.damage == [] and migrated.episode is not None and migrated.episode.stamp_clock == "ros"
    for topic in ("/follower/joint_states", "/teleop/authority", "/cameras/wrist/image/compressed"):
        np.testing.assert_array_equal(migrated.stamps(topic), new_bag.stamps(topic), err_msg=topic)
    assert new_bag.episode is not None
    assert migrated.episode.interventions == new_bag.episode.interventions
    assert migrated.strings("/teleop/intervention")[0][1] == new_bag.strings("/teleop/intervention")[0][1]
    assert (migrated.episode.started_ros_ns, migrated.episode.stopped_ros_ns) == \
        (new_bag.episode.started_ros_ns, new_bag.episode.stopped_ros_ns)
    assert _verdict(tmp_path / "episode_mono.migrated").passed
    for b, d in ((ours, "ds_new"), (tmp_path / "episode_mono.migrated", "ds_migrated")):
        assert len(_convert([b], tmp_path / d).converted) == 1
    # the same frames; the pixels carry the capture time on the clock each session stamped with
    assert_same_frames(tmp_path / "ds_new", tmp_path / "ds_migrated", WALL0_NS - MONO0_NS)
    assert cli_main(["migrate", str(tmp_path / "episode_mono.migrated")]) == 0
    assert "already in the current format" in capsys.readouterr().out


def test_publish_time_30ms_after_the_stamp_changes_nothing(tmp_path: Path) -> None:
    plain = write_session(tmp_path / "plain", SessionSpec(camera_publish_offset_ms=0.0, **SESSION)).bag
    late = write_session(tmp_path / "late", SessionSpec(camera_publish_offset_ms=30.0, **SESSION)).bag
    cam = "/cameras/wrist/image/compressed"
    d = open_bag(late).raw(cam).publish_ns - open_bag(late).stamps(cam)
    assert np.all(d == 30_000_000)
    assert _verdict(plain).passed and _verdict(late).passed, _verdict(late).line()
    _convert([plain], tmp_path / "a")
    _convert([late], tmp_path / "b")
    assert_same_frames(tmp_path / "a", tmp_path / "b")


@pytest.mark.parametrize("step_ms", [250.0, -250.0, 40.0])
def test_a_system_clock_step_rejects_the_episode(step_ms: float, tmp_path: Path) -> None:
    bag = write_session(tmp_path / "step", SessionSpec(clock_step=(1.5, step_ms), **SESSION)).bag
    r = _verdict(bag)
    assert "CLOCK_STEP" in r.codes, r.line()
    step = next(x for x in r.reasons if x.code == "CLOCK_STEP" and "drift_ns" in x.numbers)
    assert step.numbers["drift_ns"] == int(step_ms * 1e6) and "system clock stepped" in step.detail
    # slewing is not a step: 400 ppm over the episode stays within the bound
    ok = write_session(tmp_path / "slew", SessionSpec(clock_step=(1.5, 0.5), **SESSION)).bag
    assert "CLOCK_STEP" not in _verdict(ok).codes


@pytest.mark.parametrize("writer", [write_with_rosbags, write_with_mcap], ids=["rosbags", "mcap-as-rosbag2"])
def test_foreign_rosbag2_bag_converts_to_the_same_frames(writer: object, ours: Path, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    foreign = writer(ours, tmp_path / "rig_b_2026_01_01")  # type: ignore[operator]
    bag = open_bag(foreign)
    assert bag.episode is None and bag.damage == [], bag.damage
    unset = _verdict(foreign)
    assert unset.codes == ["OUTCOME_UNSET"], unset.line()
    assert _verdict(foreign, Supplied(outcome="success")).passed
    # the CLI: without --outcome rejected as usual; with --task/--outcome/--calibration converted
    out = tmp_path / "ds_foreign"
    cals = ["--calibration", f"leader={sim_calibration_file('leader')}",
            "--calibration", f"follower={sim_calibration_file('follower')}"]
    assert cli_main(["convert", str(foreign), "--dataset", str(out), "--codec", "h264", "--workers", "1", *cals]) == 0
    assert "rejected OUTCOME_UNSET: 1" in capsys.readouterr().out
    assert cli_main(["convert", str(foreign), "--dataset", str(out), "--codec", "h264", "--workers", "1", *cals,
                     "--task", "pick the brick", "--outcome", "success"]) == 0
    _convert([ours], tmp_path / "ds_ours")
    assert_same_frames(tmp_path / "ds_ours", out)
    row = pq.read_table(next((out / "meta" / "episodes").rglob("*.parquet"))).to_pylist()[0]
    assert row["outcome"] == "success" and row["tasks"] == ["pick the brick"]
    assert [i["trigger"] for i in json.loads(row["interventions"])] == ["wrong_grasp"]  # from the JSON events


def test_a_namespaced_rig_validates_and_converts_like_any_other(ours: Path, tmp_path: Path) -> None:
    """A rig under `namespace:=rig_a` records `/rig_a/...`; the reader strips the namespace its episode
    metadata names, so config/validate.yaml's names and the frames stay the same."""
    idx = open_indexed(ours)
    meta = EpisodeMeta.from_strings(idx.metadata()[METADATA_RECORD])
    meta.namespace = "/rig_a"
    meta.topics = ["/rig_a" + t for t in meta.topics]
    rig = tmp_path / "episode_rig_a"
    with BagWriter(rig, episode=meta, fsync=False) as w:
        names = {cid: ("/rig_a" + ch.topic if ch.topic != "/diagnostics" else ch.topic, ch.schema_name)
                 for cid, ch in idx.channels.items()}
        for topic, type_name in names.values():
            w.add_topic(topic, type_name)
        for m in idx.messages():
            w.write(names[m.channel_id][0], m.data, m.log_time, m.publish_time, m.sequence)
    bag = open_bag(rig)
    assert "/follower/joint_states" in bag.topics and not any(t.startswith("/rig_a") for t in bag.topics)
    assert _verdict(rig).passed, _verdict(rig).line()
    _convert([ours], tmp_path / "a")
    _convert([rig], tmp_path / "b")
    assert_same_frames(tmp_path / "a", tmp_path / "b")
