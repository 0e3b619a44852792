"""The data pipeline on simulator bags: bag reader, align, validate (one fixture per seed failure), convert.

Convert is checked as a round trip."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import av
import cv2
import numpy as np
import pyarrow.parquet as pq
import pytest

from teleop_flywheel.cli import main as cli_main
from teleop_flywheel.cli.verbs import convert as convert_verb
from teleop_flywheel.cli.verbs import validate as validate_verb
from teleop_flywheel.core.bag_topics import FOLLOWER_COMMAND, FOLLOWER_STATE, camera_image
from teleop_flywheel.core.calibration import load_calibration, sim_calibration_file
from teleop_flywheel.core.so101 import JOINT_NAMES
from teleop_flywheel.data.convert import converter as conv
from teleop_flywheel.data.convert.align import AlignError, align
from teleop_flywheel.data.validate import validator as val
from teleop_flywheel.hw.camera import timecode
from teleop_flywheel.recording.mcap.reader import CORRUPT, TRUNCATED, Stream, open_bag
from teleop_flywheel.testing.synthetic_session import SessionSpec, write_session

FIXTURES = {
    "clean": (SessionSpec(), None),
    "stall": (SessionSpec(duration_s=8, camera_stall=(2.0, 4.0), seed=1), "FRAME_GAP"),
    "dies_early": (SessionSpec(duration_s=8, camera_stall=(5.0, 10.0), seed=10), "FRAME_GAP"),  # never comes back
    # 20 fps behind a 24 ms pipeline: the last frames are still in flight at stop, which is no gap.
    "slow_camera": (SessionSpec(camera_fps=20.0, camera_latency_ms=24.0, seed=12), None),
    "dead_air": (SessionSpec(duration_s=44, dead_air=(2.0, 40.0), width=320, height=240, seed=2), "DEAD_AIR"),
    "clock_offset": (SessionSpec(camera_stamp_offset_ms=30.0, seed=3), "CLOCK_OFFSET"),
    "outcome_unset": (SessionSpec(outcome="unset", seed=4), "OUTCOME_UNSET"),
    "unlabelled": (SessionSpec(session_kind="policy", interventions=((2.0, 3.5, None),), seed=5),
                   "UNLABELLED_INTERVENTION"),
    "labelled": (SessionSpec(session_kind="policy", interventions=((2.0, 3.5, "wrong_grasp"),), seed=6), None),
    "two_cams": (SessionSpec(cameras=("wrist", "top"), seed=7), "SCHEMA_MISMATCH"),
    "truncated": (SessionSpec(chunk_size=64 * 1024, truncate_bag=0.6, seed=8), TRUNCATED),
    "corrupt": (SessionSpec(chunk_size=64 * 1024, corrupt_chunk=True, seed=9), CORRUPT),
}


@pytest.fixture(scope="session")
def bags(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("bags")
    out = {}
    for name, (spec, _) in FIXTURES.items():
        write_session(root / name, spec)
        out[name] = root / name
    return out


# -- reader -----------------------------------------------------------------------------------

def test_reader_matches_simulation_and_rosbags(tmp_path: Path) -> None:
    from rosbags.typesys import Stores, get_typestore

    truth = write_session(tmp_path / "ep", SessionSpec(duration_s=3))
    bag = open_bag(tmp_path / "ep")
    assert bag.damage == []
    js = bag.joint_state(FOLLOWER_STATE)
    np.testing.assert_array_equal(js.position, truth.follower)
    np.testing.assert_array_equal(js.stamps_ns, truth.joint_stamps_ns)
    assert np.all(bag.raw(FOLLOWER_STATE).publish_ns < js.log_ns)  # publish_time: the DDS send time
    store = get_typestore(Stores.LATEST)
    for i in (0, 7, len(js.position) - 1):
        msg = store.deserialize_cdr(bag.raw(FOLLOWER_STATE).data[i], "sensor_msgs/msg/JointState")
        assert list(msg.name) == js.names == list(JOINT_NAMES)
        np.testing.assert_array_equal(msg.position, js.position[i])
    im = bag.images(camera_image("wrist"))
    np.testing.assert_array_equal(im.stamps_ns, truth.camera_stamp_ns["wrist"])
    msg = store.deserialize_cdr(bag.raw(camera_image("wrist")).data[3], "sensor_msgs/msg/CompressedImage")
    assert bytes(msg.data) == im.data[3] and msg.format == "jpeg"
    assert bag.episode is not None and bag.episode.outcome == "success"


def test_content_id_ignores_names_and_compression(tmp_path: Path) -> None:
    a = write_session(tmp_path / "a", SessionSpec(duration_s=2.5, compression="zstd")).bag
    b = write_session(tmp_path / "renamed", SessionSpec(duration_s=2.5, compression="lz4", chunk_size=32 * 1024)).bag
    c = write_session(tmp_path / "other", SessionSpec(duration_s=2.5, seed=11)).bag
    ida, idb, idc = (open_bag(p).episode_id for p in (a, b, c))
    assert ida == idb != idc


def test_damage_is_classified_and_what_survived_is_read(bags: dict[str, Path]) -> None:
    t = open_bag(bags["truncated"])
    assert [d.code for d in t.damage] == [TRUNCATED] and "truncated_0.mcap" in t.damage[0].file
    assert 0 < len(t.raw(FOLLOWER_STATE)) < 600
    c = open_bag(bags["corrupt"])
    assert CORRUPT in [d.code for d in c.damage] and "corrupt_0.mcap" in c.damage[0].file
    assert 0 < len(c.raw(FOLLOWER_STATE)) < 600


# -- align ------------------------------------------------------------------------------------

def test_align_zero_order_hold_and_frame_contract() -> None:
    fps = 10.0
    st = Stream("state", np.array([0, 40, 90, 130, 180, 230, 300]) * 1_000_000, np.arange(7.0)[:, None])
    cmd = Stream("cmd", np.array([5, 55, 105, 155, 205, 255, 305]) * 1_000_000, np.arange(7.0)[:, None] * 10)
    a = align([st], [cmd], fps)
    t = a.grid.times(0)
    assert a.grid.t0_ns == 5_000_000 and a.grid.n == 2  # t_{k+1} must exist: t2 = 205 ms <= 300 ms
    for k in range(a.grid.n):
        assert a.values["state"][k, 0] == st.values[st.stamps_ns <= t[k]][-1, 0]
        assert a.values["cmd"][k, 0] == cmd.values[cmd.stamps_ns <= t[k] + 100_000_000][-1, 0]
    assert set(np.unique(a.values["state"])) <= set(st.values[:, 0])  # held, never interpolated


def test_align_dropout_names_stream_time_and_gap() -> None:
    stamps = np.concatenate([np.arange(0, 1_000, 10), np.arange(1_500, 3_000, 10)]) * 1_000_000
    cam = Stream("camera:wrist", stamps, np.arange(len(stamps)))
    joints = Stream("state", np.arange(0, 3_000, 2) * 1_000_000, np.zeros((1500, 1)))
    with pytest.raises(AlignError) as err:
        align([joints, cam], [joints], 30.0)
    d = err.value.dropouts[0]
    assert err.value.code == "FRAME_GAP" and d.stream == "camera:wrist"
    assert 0.95 < d.time_s < 1.55 and 0.45 < d.gap_s < 0.52
    ok = align([joints, cam], [joints], 30.0, staleness_s=0.6)
    assert ok.grid.n > 80


# -- validate ---------------------------------------------------------------------------------

@pytest.fixture(scope="session")
def reports(bags: dict[str, Path]) -> dict[str, val.EpisodeReport]:
    rs = val.validate_paths(list(bags.values()), val.ValidateConfig.load(), workers=1)
    return {Path(r.path).name: r for r in rs}


@pytest.mark.parametrize("name", list(FIXTURES))
def test_each_seed_failure_gets_its_code(reports: dict[str, val.EpisodeReport], name: str) -> None:
    expected = FIXTURES[name][1]
    r = reports[name]
    if expected is None:
        assert r.passed, r.line()
    else:
        assert not r.passed and expected in r.codes, r.line()
        assert expected in r.line()


def test_reason_numbers(reports: dict[str, val.EpisodeReport]) -> None:
    gap = next(x for x in reports["stall"].reasons if x.code == "FRAME_GAP")
    assert gap.numbers["stream"] == camera_image("wrist") and 3.9 < gap.numbers["gap_s"] < 4.2
    tail = next(x for x in reports["dies_early"].reasons if x.code == "FRAME_GAP")
    assert 2.9 < tail.numbers["gap_s"] < 3.1 and "after its last message, to the episode's end" in tail.detail
    dead = next(x for x in reports["dead_air"].reasons if x.code == "DEAD_AIR")
    assert 39.0 < dead.numbers["seconds"] < 41.0
    clk = next(x for x in reports["clock_offset"].reasons if x.code == "CLOCK_OFFSET")
    assert -25 < clk.numbers["median_latency_ms"] < -19  # 8 ms pipeline latency - 30 ms stamp offset
    assert reports["clean"].episode_id and len(reports["clean"].episode_id) == 64


def test_clock_offset_fixture_against_pixel_truth(bags: dict[str, Path]) -> None:
    """The pixel timecode is the ground truth: the offset bag's stamps really are 30 ms late."""
    import cv2

    for name, expect_ms in (("clean", 0.0), ("clock_offset", 30.0)):
        im = open_bag(bags[name]).images(camera_image("wrist"))
        d = [(im.stamps_ns[i] - timecode.decode(cv2.imdecode(np.frombuffer(im.data[i], np.uint8), 1))) / 1e6
             for i in range(0, len(im.data), 20)]
        assert abs(np.median(d) - expect_ms) < 0.01


def test_ptp_offset_bound(tmp_path: Path) -> None:
    p = write_session(tmp_path / "ptp", SessionSpec(duration_s=2.5, ptp_offset_ns=5_000_000)).bag
    r = val.validate_bag((str(p), val.ValidateConfig.load()))
    assert "CLOCK_OFFSET" in r.codes and "PTP" in r.line()


def test_cli_quarantine_moves_and_records(bags: dict[str, Path], tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    work = tmp_path / "session"
    for name in ("clean", "stall", "truncated"):
        shutil.copytree(bags[name], work / name)
    q = tmp_path / "q"
    parser = __import__("argparse").ArgumentParser()
    validate_verb.add_arguments(parser)
    assert validate_verb.run(parser.parse_args([str(work), "--quarantine", str(q), "--workers", "1"])) == 0
    out = capsys.readouterr().out
    assert "2/3 rejected (66.7 %)" in out and "FRAME_GAP 1" in out and "TRUNCATED 1" in out
    assert (q / "FRAME_GAP" / "stall").is_dir() and not (work / "stall").exists()
    record = json.loads((q / "TRUNCATED" / "truncated.json").read_text())
    assert record["codes"] == ["TRUNCATED"] and record["passed"] is False
    assert (work / "clean").is_dir()
    shutil.copytree(bags["stall"], work / "stall")  # the same bag again: never overwrite
    assert validate_verb.run(parser.parse_args([str(work), "--quarantine", str(q), "--json", "--workers", "1"])) == 0
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    assert doc["summary"]["rejected"] == 1 and (q / "FRAME_GAP" / "stall_1").is_dir()
    assert validate_verb.run(parser.parse_args([str(work), "--workers", "1"])) == 0
    assert "WARNING: nothing was rejected" in capsys.readouterr().err
    assert cli_main(["validate", str(tmp_path / "nope")]) == 2  # one line, exit 2 (cli/)
    assert capsys.readouterr().err.splitlines()[-1].startswith("teleop-flywheel validate: error: no such file")


def test_schema_reference_from_config(reports: dict[str, val.EpisodeReport]) -> None:
    rs = [val.EpisodeReport(r.path, r.name, r.episode_id, [], list(r.cameras)) for r in reports.values()]
    val.apply_schema(rs, ["top", "wrist"])
    assert [r.name for r in rs if r.codes == ["SCHEMA_MISMATCH"]] != [] and \
        all(r.passed for r in rs if r.name == "two_cams")


# -- convert ----------------------------------------------------------------------------------

@pytest.fixture(scope="session")
def dataset(bags: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, conv.ConvertResult]:
    out = tmp_path_factory.mktemp("ds") / "ds"
    names = ("clean", "labelled", "two_cams", "stall", "outcome_unset")
    res = conv.convert([bags[n] for n in names], out, workers=2, progress=False)
    return out, res


def _zoh(stamps: np.ndarray, values: np.ndarray, t: np.ndarray) -> np.ndarray:
    return values[np.searchsorted(stamps, t, side="right") - 1]


def test_convert_only_passing_and_schema_drift(dataset: tuple[Path, conv.ConvertResult]) -> None:
    out, res = dataset
    assert len(res.converted[str(out)]) == 2
    side = [r for r in res.converted if r != str(out)]
    assert len(side) == 1 and "top" in side[0] and len(res.converted[side[0]]) == 1
    assert res.rejected == {"FRAME_GAP": ["stall"], "OUTCOME_UNSET": ["outcome_unset"]}
    info = json.loads((Path(side[0]) / "meta/info.json").read_text())
    assert {"observation.images.top", "observation.images.wrist"} <= set(info["features"])


def test_round_trip_values_contract_and_video(dataset: tuple[Path, conv.ConvertResult], bags: dict[str, Path]) -> None:
    out, _ = dataset
    info = json.loads((out / "meta/info.json").read_text())
    assert info["codebase_version"] == "v3.0" and info["total_episodes"] == 2 and info["fps"] == 30
    vinfo = info["features"]["observation.images.wrist"]["info"]
    assert vinfo["video.codec"] == "av1" and vinfo["video.pix_fmt"] == "yuv420p" and vinfo["video.fps"] == 30
    data = pq.read_table(out / "data/chunk-000/file-000.parquet").to_pandas()
    eps = pq.read_table(out / "meta/episodes/chunk-000/file-000.parquet").to_pandas()
    cal = load_calibration(sim_calibration_file("follower"))
    video = out / "videos/observation.images.wrist/chunk-000/file-000.mp4"
    with av.open(str(video)) as c:
        frames = [(f.time, f.to_ndarray(format="rgb24")) for f in c.decode(video=0)]
    assert len(frames) == info["total_frames"]
    for _, ep in eps.iterrows():
        bag = open_bag(bags[ep["source_bag"]])
        rows = data[data.episode_index == ep.episode_index]
        assert len(rows) == ep.length == ep.dataset_to_index - ep.dataset_from_index
        np.testing.assert_array_equal(rows["index"], np.arange(ep.dataset_from_index, ep.dataset_to_index))
        np.testing.assert_allclose(rows.timestamp, np.arange(ep.length) / 30, atol=1e-6)
        fs, cm = bag.joint_state(FOLLOWER_STATE), bag.joint_state(FOLLOWER_COMMAND)
        im = bag.images(camera_image("wrist"))
        t0 = max(fs.stamps_ns[0], cm.stamps_ns[0], im.stamps_ns[0])
        t = t0 + np.round(np.arange(ep.length + 1) * 1e9 / 30).astype(np.int64)
        state = cal.rad_to_lerobot(_zoh(fs.stamps_ns, fs.position, t[:-1])).astype(np.float32)
        action = cal.rad_to_lerobot(_zoh(cm.stamps_ns, cm.position, t[1:])).astype(np.float32)
        np.testing.assert_array_equal(np.stack(rows["observation.state"]), state)
        np.testing.assert_array_equal(np.stack(rows["action"]), action)  # frame contract: in effect over (t, t+1]
        assert ep["episode_id"] == bag.episode_id
        start = float(ep["videos/observation.images.wrist/from_timestamp"])
        assert abs(float(ep["videos/observation.images.wrist/to_timestamp"]) - start - ep.length / 30) < 1e-9
        caps = np.array([timecode.decode(img[..., ::-1]) for ts, img in frames
                         if start - 1e-4 <= ts < start + ep.length / 30 - 1e-4])
        expected = _zoh(im.stamps_ns, np.array([timecode.decode(__import__("cv2").imdecode(
            np.frombuffer(d, np.uint8), 1)) for d in im.data]), t[:-1])
        np.testing.assert_array_equal(caps, expected)
        blend = rows["complementary_info.blend_weight"].to_numpy()
        if ep["source_bag"] == "labelled":
            assert rows.intervention.any() and set(rows["complementary_info.trigger"][rows.intervention]) == {2}
            assert blend.min() == 0.0 and blend.max() == 1.0
        else:
            assert not rows.intervention.any() and (blend == 1.0).all()


def test_stats_match_numpy(dataset: tuple[Path, conv.ConvertResult]) -> None:
    out, _ = dataset
    stats = json.loads((out / "meta/stats.json").read_text())
    data = pq.read_table(out / "data/chunk-000/file-000.parquet").to_pandas()
    eps = pq.read_table(out / "meta/episodes/chunk-000/file-000.parquet").to_pandas()
    for key in ("observation.state", "action"):
        v = np.stack(data[key]).astype(np.float64)
        np.testing.assert_allclose(stats[key]["mean"], v.mean(0), rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(stats[key]["std"], v.std(0), rtol=1e-7, atol=1e-7)
        np.testing.assert_allclose(stats[key]["min"], v.min(0))
        np.testing.assert_allclose(stats[key]["max"], v.max(0))
        assert stats[key]["count"] == [len(v)]
        for _, ep in eps.iterrows():
            e = v[ep.dataset_from_index:ep.dataset_to_index]
            np.testing.assert_allclose(np.asarray(ep[f"stats/{key}/q90"], float), np.quantile(e, 0.9, axis=0))
    img = stats["observation.images.wrist"]
    assert np.asarray(img["mean"]).shape == (3, 1, 1) and 0 < np.asarray(img["mean"]).min() < 1
    assert set(img) == {"min", "max", "mean", "std", "count", "q01", "q10", "q50", "q90", "q99"}
    tasks = pq.read_table(out / "meta/tasks.parquet").to_pandas()
    assert tasks.index.name == "task" and list(tasks.task_index) == [0]


def test_ids_stable_no_duplicates_and_append(dataset: tuple[Path, conv.ConvertResult], bags: dict[str, Path],
                                             tmp_path: Path) -> None:
    out, first = dataset
    again = conv.convert([bags["clean"], bags["labelled"]], out, workers=1, progress=False)
    assert sorted(again.duplicates) == ["clean", "labelled"] and again.converted == {}
    fresh = conv.convert([bags["labelled"], bags["clean"]], tmp_path / "fresh", workers=1, progress=False,
                         codec="h264")
    assert sorted(fresh.converted[str(tmp_path / "fresh")]) == sorted(first.converted[str(out)])
    new = write_session(tmp_path / "new_ep", SessionSpec(duration_s=3, seed=42)).bag
    added = conv.convert([new], tmp_path / "fresh", workers=1, progress=False, codec="h264")
    root = tmp_path / "fresh"
    info = json.loads((root / "meta/info.json").read_text())
    assert len(added.converted[str(root)]) == 1 and info["total_episodes"] == 3
    eps = pq.read_table(root / "meta/episodes/chunk-000/file-000.parquet").to_pandas()
    assert list(eps.episode_index) == [0, 1, 2] and eps["data/file_index"].tolist() == [0, 0, 1]
    assert eps["videos/observation.images.wrist/file_index"].tolist() == [0, 0, 1]
    assert eps["videos/observation.images.wrist/from_timestamp"].iloc[2] == 0.0
    assert eps.dataset_from_index.iloc[2] == eps.dataset_to_index.iloc[1]
    assert info["total_frames"] == int(eps.length.sum())


def test_include_failed_converts_rejected(bags: dict[str, Path], tmp_path: Path) -> None:
    res = conv.convert([bags["outcome_unset"]], tmp_path / "f", include_failed=True, workers=1, progress=False,
                       codec="h264")
    eps = pq.read_table(tmp_path / "f/meta/episodes/chunk-000/file-000.parquet").to_pandas()
    assert len(res.converted[str(tmp_path / "f")]) == 1 and eps.outcome.tolist() == ["unset"]


def test_project_reader_opens_the_dataset(dataset: tuple[Path, conv.ConvertResult]) -> None:
    from teleop_flywheel.data.lerobot.dataset import LeRobotDataset

    ds = LeRobotDataset.open(dataset[0], episode_stats=True)
    assert ds.fps == 30 and ds.joint_names("action")[0] == "shoulder_pan.pos"
    assert len(ds.column("action")) == json.loads((dataset[0] / "meta/info.json").read_text())["total_frames"]


def test_lerobot_loads_every_frame(dataset: tuple[Path, conv.ConvertResult]) -> None:
    lerobot_dataset = pytest.importorskip("lerobot.datasets.lerobot_dataset",
                                          reason="LeRobot not installed (too heavy for CI)")
    ds = lerobot_dataset.LeRobotDataset("local/ds", root=dataset[0], video_backend="pyav")
    for i in range(len(ds)):
        item = ds[i]
        assert item["observation.images.wrist"].shape[0] == 3


def test_lerobot_loads_the_frame_captured_at_every_frame_of_an_h264_dataset(bags: dict[str, Path],
                                                                          tmp_path: Path) -> None:
    """h264 runs with MB-tree off and two threads (byte-identical encodes): LeRobot's own loader,
    seeking by timestamp, returns for every frame the image the camera captured for it (the
    timecode drawn in its pixels), across two episodes in one file."""
    lerobot_dataset = pytest.importorskip("lerobot.datasets.lerobot_dataset",
                                          reason="LeRobot not installed (too heavy for CI)")
    root = tmp_path / "h264"
    conv.convert([bags["clean"], bags["labelled"]], root, workers=1, progress=False, codec="h264")
    info = json.loads((root / "meta/info.json").read_text())
    assert info["features"]["observation.images.wrist"]["info"]["video.codec"] == "h264"
    ds = lerobot_dataset.LeRobotDataset("local/h264", root=root, video_backend="pyav")
    eps = pq.read_table(root / "meta/episodes/chunk-000/file-000.parquet").to_pandas()
    assert len(ds) == info["total_frames"] == int(eps.length.sum())
    for _, ep in eps.iterrows():
        bag = open_bag(bags[ep["source_bag"]])
        fs, cm = bag.joint_state(FOLLOWER_STATE), bag.joint_state(FOLLOWER_COMMAND)
        im = bag.images(camera_image("wrist"))
        t0 = max(fs.stamps_ns[0], cm.stamps_ns[0], im.stamps_ns[0])
        t = t0 + np.round(np.arange(ep.length) * 1e9 / 30).astype(np.int64)
        expected = _zoh(im.stamps_ns, np.array([timecode.decode(cv2.imdecode(np.frombuffer(d, np.uint8), 1))
                                                for d in im.data]), t)
        got = []
        for i in range(int(ep.dataset_from_index), int(ep.dataset_to_index)):
            rgb = (ds[i]["observation.images.wrist"].permute(1, 2, 0).numpy() * 255).round().astype(np.uint8)
            got.append(timecode.decode(rgb[..., ::-1]))
        np.testing.assert_array_equal(np.array(got), expected)


def test_convert_cli_summary(bags: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import argparse

    parser = argparse.ArgumentParser()
    convert_verb.add_arguments(parser)
    args = parser.parse_args([str(bags["clean"]), str(bags["stall"]), "--dataset", str(tmp_path / "ds"),
                              "--codec", "h264", "--workers", "1", "--repo-id", "me/so101"])
    assert convert_verb.run(args) == 0
    out = capsys.readouterr().out
    assert "episodes in: 2; converted: 1;" in out and "rejected FRAME_GAP: 1 (stall)" in out
    assert "LeRobotDataset('me/so101'" in out
    assert cli_main(["convert", str(tmp_path / "missing"), "--dataset", str(tmp_path / "x")]) == 2
