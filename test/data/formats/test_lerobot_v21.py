"""`import --from lerobot-v2.1`: a dataset LeRobot's own v2.1 writer wrote, migrated to v3.0 as
LeRobot's own converter migrates it; bad input refused with nothing written.

The input is test/support/lerobot_v21_fixture/, written by LeRobot 0.3.3's `LeRobotDataset`
(test/support/lerobot_v21_writer.py: 3 episodes, 2 cameras of different sizes, an episode with two
tasks). The oracle tests run where LeRobot 0.4.x is importable (the LeRobot venv): its
`LeRobotDataset` loads the result, every frame decodes, and every item equals the item of the
dataset LeRobot's own converter (`convert_dataset_v21_to_v30`, its functions driven on a local
copy) makes of the same input.
"""
from __future__ import annotations

import importlib.util
import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import av
import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from support.cli import run_cli

from teleop_flywheel.cli import main as cli_main
from teleop_flywheel.data.lerobot import v3_layout
from teleop_flywheel.data.lerobot.consistency import problems
from teleop_flywheel.data.lerobot.dataset import LeRobotDataset

FIXTURE = Path(__file__).parents[2] / "support" / "lerobot_v21_fixture"
CAMERAS = ("observation.images.front", "observation.images.wrist")
NEEDS_LEROBOT = pytest.mark.skipif(importlib.util.find_spec("lerobot") is None,
                                   reason="LeRobot is not installed here: the oracle runs in the LeRobot venv "
                                          "(pip install '.[lerobot]')")


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("v21")
    src = root / "src"
    shutil.copytree(FIXTURE, src)
    assert cli_main(["import", "--from", "lerobot-v2.1", str(src), str(root / "out")]) == 0
    return {"root": root, "src": src, "out": root / "out"}


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _frames(path: Path) -> Iterator[np.ndarray]:
    with av.open(str(path)) as c:
        for frame in c.decode(video=0):
            yield frame.to_ndarray(format="rgb24")


def test_the_migration_passes_our_checks_and_reads(made: dict[str, Path]) -> None:
    out = made["out"]
    assert problems(out) == []
    ds = LeRobotDataset.open(out)
    assert ds.fps == 30 and ds.robot_type == "so101_follower"
    info = json.loads((out / v3_layout.INFO_PATH).read_text())
    assert info["codebase_version"] == "v3.0" and info["total_episodes"] == 3 and info["total_frames"] == 87
    assert "total_chunks" not in info and "total_videos" not in info
    assert info["imported_from"]["format"] == "lerobot-v2.1"
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*.mp4")) == [
        f"videos/{cam}/chunk-000/file-000.mp4" for cam in CAMERAS]


def test_rows_are_carried_unchanged(made: dict[str, Path]) -> None:
    src, out = made["src"], made["out"]
    source = pd.concat([pd.read_parquet(p) for p in sorted((src / "data").glob("*/*.parquet"))], ignore_index=True)
    data = pd.read_parquet(out / "data/chunk-000/file-000.parquet")
    assert list(data.columns) == list(source.columns)
    for col in source.columns:
        assert np.array_equal(np.stack(data[col].to_numpy()), np.stack(source[col].to_numpy())), col
    assert sorted(set(data.loc[data.episode_index == 2, "task_index"])) == [0, 1]  # a task switch within an episode


def test_episodes_tasks_and_stats_are_carried(made: dict[str, Path]) -> None:
    src, out = made["src"], made["out"]
    rows = pq.read_table(out / v3_layout.EPISODES_PATH.format(chunk_index=0, file_index=0)).to_pylist()
    legacy, stats = _jsonl(src / "meta/episodes.jsonl"), _jsonl(src / "meta/episodes_stats.jsonl")
    start = 0
    for row, old, st in zip(rows, legacy, stats, strict=True):
        assert (row["episode_index"], row["tasks"], row["length"]) == (old["episode_index"], old["tasks"],
                                                                         old["length"])
        assert (row["dataset_from_index"], row["dataset_to_index"]) == (start, start + old["length"])
        for cam in CAMERAS:
            assert row[f"videos/{cam}/from_timestamp"] == pytest.approx(start / 30)
            assert row[f"videos/{cam}/to_timestamp"] == pytest.approx((start + old["length"]) / 30)
        for feature, values in st["stats"].items():
            for name, value in values.items():
                assert row[f"stats/{feature}/{name}"] == value
        start += old["length"]
    tasks = pd.read_parquet(out / v3_layout.TASKS_PATH)
    assert {str(t): int(i) for t, i in zip(tasks.index, tasks.task_index, strict=True)} == {
        t["task"]: t["task_index"] for t in _jsonl(src / "meta/tasks.jsonl")}
    aggregated = json.loads((out / v3_layout.STATS_PATH).read_text())
    assert set(aggregated["action"]) == {"min", "max", "mean", "std", "count"}  # v2.1 stats have no quantiles
    assert aggregated["action"]["count"] == [87]
    actions = np.stack(pd.read_parquet(out / "data/chunk-000/file-000.parquet")["action"].to_numpy())
    assert np.allclose(aggregated["action"]["mean"], actions.mean(0), atol=1e-4)
    assert np.allclose(aggregated["action"]["std"], actions.std(0), atol=1e-4)


def test_videos_are_remuxed_not_reencoded(made: dict[str, Path]) -> None:
    src, out = made["src"], made["out"]
    for cam in CAMERAS:
        source = [f for p in sorted((src / "videos").glob(f"*/{cam}/*.mp4")) for f in _frames(p)]
        ours = list(_frames(out / v3_layout.VIDEO_PATH.format(video_key=cam, chunk_index=0, file_index=0)))
        assert len(ours) == len(source) == 87
        assert all(np.array_equal(a, b) for a, b in zip(ours, source, strict=True)), cam


def _refused(capsys: pytest.CaptureFixture[str], src: Path, tmp_path: Path, what: str, name: str) -> None:
    out = tmp_path / "out"
    code, _, err = run_cli(capsys, "import", "--from", "lerobot-v2.1", str(src), str(out))
    lines = err.strip().splitlines()
    assert code == 1, err
    assert len(lines) == 1 and name in lines[0] and what in lines[0], lines
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "bad") in ([], ["out.lock"])


def _bad(tmp_path: Path) -> Path:
    bad = tmp_path / "bad"
    shutil.copytree(FIXTURE, bad)
    return bad


def test_a_missing_video_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = _bad(tmp_path)
    (bad / "videos/chunk-000/observation.images.wrist/episode_000001.mp4").unlink()
    _refused(capsys, bad, tmp_path, "missing (the observation.images.wrist video of episode 1)",
             "observation.images.wrist/episode_000001.mp4")


def test_a_broken_jsonl_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = _bad(tmp_path)
    episodes = bad / "meta/episodes.jsonl"
    lines = episodes.read_text().splitlines()
    row = json.loads(lines[1])
    del row["length"]
    episodes.write_text("\n".join([lines[0], json.dumps(row), lines[2]]))
    _refused(capsys, bad, tmp_path, "line 2 has no 'length' (int)", "episodes.jsonl")
    shutil.copy(FIXTURE / "meta/episodes.jsonl", episodes)
    (bad / "meta/episodes_stats.jsonl").unlink()
    _refused(capsys, bad, tmp_path, "missing", "episodes_stats.jsonl")


def test_a_truncated_video_or_parquet_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = _bad(tmp_path)
    mp4 = bad / "videos/chunk-000/observation.images.front/episode_000002.mp4"
    mp4.write_bytes(mp4.read_bytes()[:300])
    _refused(capsys, bad, tmp_path, "not a readable video", "episode_000002.mp4")
    shutil.copy(FIXTURE / mp4.relative_to(bad), mp4)
    parquet = bad / "data/chunk-000/episode_000000.parquet"
    parquet.write_bytes(parquet.read_bytes()[:-100])
    _refused(capsys, bad, tmp_path, "not a readable parquet file", "episode_000000.parquet")


def test_a_foreign_dataset_whose_data_are_not_its_named_joints_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Another robot's dataset migrates (the migration maps no joints); one whose info.json names
    joints its rows do not hold is refused, naming the first data file that disagrees."""
    bad = _bad(tmp_path)
    info_path = bad / "meta/info.json"
    info = json.loads(info_path.read_text())
    arm = [f"{side}_{j}" for side in ("left", "right") for j in ("waist", "shoulder", "elbow", "wrist")]
    info["features"]["observation.state"].update(shape=[len(arm)], names=arm)
    info_path.write_text(json.dumps(info))
    _refused(capsys, bad, tmp_path, "holds [6] values a frame, info.json names 8", "episode_000000.parquet")
    info["features"]["observation.state"]["shape"] = [6]
    info_path.write_text(json.dumps(info))
    _refused(capsys, bad, tmp_path, "names 8 values", "info.json")


def test_another_robots_dataset_migrates(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = _bad(tmp_path)
    info_path = src / "meta/info.json"
    info = json.loads(info_path.read_text())
    info["robot_type"] = "koch_follower"
    for feature in ("observation.state", "action"):
        info["features"][feature]["names"] = [f"joint_{i}" for i in range(6)]
    info_path.write_text(json.dumps(info))
    code, out, err = run_cli(capsys, "import", "--from", "lerobot-v2.1", str(src), str(tmp_path / "out"))
    assert code == 0, err
    assert LeRobotDataset.open(tmp_path / "out").joint_names("action") == [f"joint_{i}" for i in range(6)]


def test_other_versions_are_refused(made: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shutil.copytree(made["out"], tmp_path / "bad")
    _refused(capsys, tmp_path / "bad", tmp_path, "codebase_version is 'v3.0'", "info.json")


def test_an_existing_out_and_aloha_options_are_refused(made: dict[str, Path],
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    before = sorted(p.name for p in made["root"].iterdir())
    code, _, err = run_cli(capsys, "import", "--from", "lerobot-v2.1", str(made["src"]), str(made["out"]))
    assert code == 2 and "output already exists" in err.strip().splitlines()[-1]
    code, _, err = run_cli(capsys, "import", "--from", "lerobot-v2.1", str(made["src"]), str(made["root"] / "x"),
                           "--fps", "50")
    assert code == 2 and "--fps does not apply to lerobot-v2.1" in err.strip().splitlines()[-1]
    for option in (("--workers", "2"), ("--executor", "ray")):  # one remux in this process: not ignored, refused
        code, _, err = run_cli(capsys, "import", "--from", "lerobot-v2.1", str(made["src"]), str(made["root"] / "x"),
                               *option)
        assert code == 2 and f"{option[0]} does not apply to lerobot-v2.1" in err.strip().splitlines()[-1], err
    assert sorted(p.name for p in made["root"].iterdir()) == before


def test_a_migration_that_fails_midway_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    def broken(parts: list[Path], out: Path) -> None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(b"half a video")
        raise OSError(28, "No space left on device", str(out))

    monkeypatch.setattr(v3_layout, "concat_videos", broken)
    code, _, err = run_cli(capsys, "import", "--from", "lerobot-v2.1", str(FIXTURE), str(tmp_path / "out"))
    assert code != 0 and "no space left" in err.lower()
    assert sorted(p.name for p in tmp_path.iterdir()) in ([], ["out.lock"])


# -- the oracle: LeRobot 0.4.x's loader and its own v2.1 -> v3.0 converter -------------------------

def _lerobot_convert(root: Path, data_mb: float, video_mb: float) -> Path:
    """The v3.0 dataset LeRobot's own converter makes of the fixture (offline: its functions on a
    local copy; its script's `convert_dataset` downloads from the Hub unless given a root)."""
    from lerobot.datasets.v30 import convert_dataset_v21_to_v30 as c  # noqa: PLC0415

    src, new = root / "lerobot_src", root / "lerobot_v30"
    shutil.copytree(FIXTURE, src)
    c.validate_local_dataset_version(src)
    c.convert_info(src, new, data_mb, video_mb)
    c.convert_tasks(src, new)
    data = c.convert_data(src, new, data_mb)
    videos = c.convert_videos(src, new, video_mb)
    c.convert_episodes_metadata(src, new, data, videos)
    return new


@pytest.fixture(scope="module")
def lerobots(made: dict[str, Path]) -> Path:
    return _lerobot_convert(made["root"], v3_layout.DEFAULT_DATA_FILE_SIZE_IN_MB,
                            v3_layout.DEFAULT_VIDEO_FILE_SIZE_IN_MB)


def _same_items(ours_root: Path, theirs_root: Path) -> None:
    """LeRobot loads both; every item (every frame of every camera decoded by LeRobot) is equal."""
    import torch  # noqa: PLC0415
    from lerobot.datasets.lerobot_dataset import LeRobotDataset as LeRobot  # noqa: PLC0415

    ours = LeRobot("local/ours", root=ours_root, video_backend="pyav")
    theirs = LeRobot("local/theirs", root=theirs_root, video_backend="pyav")
    assert (ours.num_episodes, len(ours)) == (theirs.num_episodes, len(theirs)) == (3, 87)
    assert ours.meta.camera_keys == theirs.meta.camera_keys == list(CAMERAS)
    for i in range(len(ours)):
        a, b = ours[i], theirs[i]
        assert a.keys() == b.keys()
        for key, value in a.items():
            if isinstance(value, torch.Tensor):
                assert torch.equal(value, b[key]), (i, key)
            else:
                assert value == b[key], (i, key)


@NEEDS_LEROBOT
def test_lerobot_loads_it_and_every_frame_equals_its_own_converters(made: dict[str, Path], lerobots: Path) -> None:
    _same_items(made["out"], lerobots)


@NEEDS_LEROBOT
def test_its_files_equal_lerobots_own_converters(made: dict[str, Path], lerobots: Path) -> None:
    out = made["out"]
    info = json.loads((out / v3_layout.INFO_PATH).read_text())
    info.pop("imported_from")
    assert info == json.loads((lerobots / v3_layout.INFO_PATH).read_text())
    episodes = v3_layout.EPISODES_PATH.format(chunk_index=0, file_index=0)
    ours, theirs = pq.read_table(out / episodes), pq.read_table(lerobots / episodes)
    assert ours.column_names == theirs.column_names
    for name in theirs.column_names:
        assert ours.column(name).to_pylist() == theirs.column(name).to_pylist(), name
    data = v3_layout.DATA_PATH.format(chunk_index=0, file_index=0)
    ours, theirs = pq.read_table(out / data), pq.read_table(lerobots / data)
    for name in theirs.column_names:
        assert ours.column(name).to_pylist() == theirs.column(name).to_pylist(), name
    assert pd.read_parquet(out / v3_layout.TASKS_PATH).equals(pd.read_parquet(lerobots / v3_layout.TASKS_PATH))
    a, b = (json.loads((root / v3_layout.STATS_PATH).read_text()) for root in (out, lerobots))
    assert a.keys() == b.keys()
    for feature in b:
        assert a[feature].keys() == b[feature].keys(), feature
        for name in b[feature]:
            assert np.allclose(a[feature][name], b[feature][name], rtol=1e-12, atol=0), (feature, name)


@NEEDS_LEROBOT
def test_files_roll_over_where_lerobots_converter_rolls_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With file limits the fixture's episodes overflow (data 6 KB uncompressed, video 12 KB: episodes 0-1 in one
    file, 2 in the next), both cut the files alike and every item is equal. One difference, on
    purpose: LeRobot's converter records episode 2's data in file 0, where its rows are not."""
    data_mb, video_mb = 6 / 1024, 12 / 1024
    theirs = _lerobot_convert(tmp_path, data_mb, video_mb)
    monkeypatch.setattr(v3_layout, "DEFAULT_DATA_FILE_SIZE_IN_MB", data_mb)
    monkeypatch.setattr(v3_layout, "DEFAULT_VIDEO_FILE_SIZE_IN_MB", video_mb)
    ours = tmp_path / "out"
    assert cli_main(["import", "--from", "lerobot-v2.1", str(FIXTURE), str(ours)]) == 0
    assert sorted(p.relative_to(ours).as_posix() for p in ours.rglob("file-*.*")) == sorted(
        p.relative_to(theirs).as_posix() for p in theirs.rglob("file-*.*"))
    assert len(list(ours.rglob("file-001.mp4"))) == 2 and (ours / "data/chunk-000/file-001.parquet").exists()
    _same_items(ours, theirs)
    episodes = v3_layout.EPISODES_PATH.format(chunk_index=0, file_index=0)
    a, b = pq.read_table(ours / episodes).to_pylist(), pq.read_table(theirs / episodes).to_pylist()
    assert [r["data/file_index"] for r in a] == [0, 0, 1]
    assert [r["data/file_index"] for r in b] == [0, 0, 0]  # LeRobot's: episode 2's rows are in file 1
    assert set(pq.read_table(ours / "data/chunk-000/file-001.parquet").column("episode_index").to_pylist()) == {2}
    for ra, rb in zip(a, b, strict=True):
        assert {k: v for k, v in ra.items() if k != "data/file_index"} == \
            {k: v for k, v in rb.items() if k != "data/file_index"}
