"""`export --to hdf5-aloha` and `import --from hdf5-aloha`: the layout, the units, the round trip, bad input.

Oracles independent of the code under test: h5py reading the files as ALOHA's loaders do
(`cv2.imdecode` for its JPEG rows), pyarrow and PyAV reading the source dataset
(`support/aloha_data.py`), the unit conversion written out here from its definition (radians =
degrees·π/180, gripper 0..1 = 0..100 / 100), and the project's v3.0 consistency checks. ACT's own
loader reads the same files in test_aloha_act_loader.py.
"""
from __future__ import annotations

import importlib.util
import json
import math
import shutil
from pathlib import Path

import cv2
import numpy as np
import pytest
from support import aloha_data as ad
from support.cli import run_cli

from teleop_flywheel.cli import main as cli_main
from teleop_flywheel.data.lerobot.consistency import problems
from teleop_flywheel.testing.synthetic_dataset import SyntheticSpec, write

h5py = pytest.importorskip("h5py", reason="h5py is the hdf5 extra: pip install '.[hdf5]'")

NEEDS_LEROBOT = pytest.mark.skipif(importlib.util.find_spec("lerobot") is None,
                                   reason="LeRobot (torch, ~8 GB) is not installed here; run in /work/lrenv/venv "
                                          "(pip install '.[lerobot]') for the loader check")
JOINTS = ["shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper"]
JPEG_TOLERANCE = 3.0  # mean absolute difference per pixel, 0..255, at quality 50 (measured 0.98)
CODEC_TOLERANCE = 3.0  # the same after one more encode (h264) on import (measured 0.78)


def _aloha_units(lerobot: np.ndarray) -> np.ndarray:
    v = np.asarray(lerobot, dtype=np.float64)
    return np.concatenate([v[:, :5] * (math.pi / 180.0), v[:, 5:] / 100.0], axis=1)


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("aloha")
    ds = ad.converted(root)
    manifest = root / "m1.json"
    assert cli_main(["manifest", "create", str(ds), "--out", str(manifest), "--filter", "episode_index==1"]) == 0
    assert cli_main(["export", str(ds), "--to", "hdf5-aloha", str(root / "aloha")]) == 0
    assert cli_main(["export", str(ds), "--to", "hdf5-aloha", "--jpeg", "50", str(root / "jpeg")]) == 0
    assert cli_main(["export", str(manifest), "--to", "hdf5-aloha", str(root / "from_manifest")]) == 0
    # h264: PyAV 15.1's libsvtav1 (the LeRobot venv's) damages every inter frame at our preset
    assert cli_main(["import", "--from", "hdf5-aloha", str(root / "aloha"), str(root / "imported"),
                     "--codec", "h264", "--workers", "2"]) == 0
    return {"root": root, "ds": ds, "manifest": manifest, "aloha": root / "aloha", "jpeg": root / "jpeg",
            "from_manifest": root / "from_manifest", "imported": root / "imported"}


def test_files_have_the_layout_act_reads_in_aloha_units(made: dict[str, Path]) -> None:
    ds = made["ds"]
    assert sorted(p.name for p in made["aloha"].iterdir()) == ["episode_0.hdf5", "episode_1.hdf5"]
    table = ad.episodes_table(ds)
    for e in (0, 1):
        with h5py.File(made["aloha"] / f"episode_{e}.hdf5", "r") as f:
            assert not f.attrs["sim"] and not f.attrs["compress"]
            state, action = ad.column(ds, "observation.state", e), ad.column(ds, "action", e)
            np.testing.assert_array_equal(f["/observations/qpos"][()], _aloha_units(state))
            np.testing.assert_array_equal(f["/action"][()], _aloha_units(action))
            assert f["/observations/qpos"][()][:, 5].max() <= 1.0 and f["/observations/qpos"][()][:, 5].min() >= 0.0
            assert json.loads(f.attrs["joint_names"]) == JOINTS
            assert f["/observations/qvel"].attrs["absent"] and not f["/observations/qvel"][()].any()
            np.testing.assert_array_equal(f["/observations/effort"][()], ad.column(ds, "observation.effort", e))
            assert not f["/observations/effort"].attrs["absent"]
            images = f[f"/observations/images/{ad.CAMERA}"]
            assert images.dtype == np.uint8 and images.shape == (len(state), 192, 256, 3)
            np.testing.assert_array_equal(images[()], ad.frames(ds, ad.VIDEO, e))  # the same decoded frames
            extras = f["/teleop_flywheel/frames"]
            for name in ("complementary_info.blend_weight", "intervention", "complementary_info.trigger",
                         "complementary_info.policy_action", "complementary_info.feedback"):
                np.testing.assert_array_equal(extras[name][()], ad.column(ds, name, e))
            assert f.attrs["episode_id"] == table["episode_id"].iloc[e]
            assert f.attrs["source_episode_index"] == e and f.attrs["fps"] == 30
            assert f.attrs["task"] == f"task {e}"
            assert json.loads(f["/teleop_flywheel"].attrs["episode"])["outcome"] == table["outcome"].iloc[e]


def test_jpeg_rows_are_what_alohas_recorder_writes(made: dict[str, Path]) -> None:
    for e in (0, 1):
        with h5py.File(made["jpeg"] / f"episode_{e}.hdf5", "r") as f:
            assert f.attrs["compress"]
            rows = f[f"/observations/images/{ad.CAMERA}"][()]
            lengths = f["/compress_len"][()]
            assert rows.ndim == 2 and rows.dtype == np.uint8 and lengths.shape == (1, len(rows))
            assert rows.shape[1] == lengths.max()  # padded to the longest frame
            source = ad.frames(made["ds"], ad.VIDEO, e)
            for t, row in enumerate(rows):
                n = int(lengths[0, t])
                assert not row[n:].any()
                image = cv2.imdecode(row, cv2.IMREAD_COLOR)  # what ALOHA's loaders do
                assert image.shape == source[t].shape
                assert np.abs(image.astype(int) - source[t]).mean() < JPEG_TOLERANCE


def _assert_round_trip(src: Path, out: Path, tolerance: float) -> None:
    """Every numeric column of `src` exactly in `out`, every frame within `tolerance` (mean absolute
    difference per pixel, 0..255), the episodes' recorded fields and the dataset's keys kept."""
    assert problems(out) == []
    a, b = ad.rows(src), ad.rows(out)
    assert len(a) == len(b)
    src_info = json.loads((src / "meta/info.json").read_text())
    out_info = json.loads((out / "meta/info.json").read_text())
    assert set(out_info["features"]) == set(src_info["features"])
    numeric = [name for name, feature in src_info["features"].items() if feature["dtype"] != "video"]
    assert {"action", "observation.state", "observation.effort", "timestamp", "intervention"} <= set(numeric)
    for name in numeric:
        feature = src_info["features"][name]
        assert out_info["features"][name]["dtype"] == feature["dtype"], name
        assert out_info["features"][name]["names"] == feature["names"], name
        left, right = np.stack(a[name].map(np.asarray)), np.stack(b[name].map(np.asarray))
        assert right.dtype == left.dtype, name
        np.testing.assert_array_equal(right, left, err_msg=name)
    for key in ("trigger_labels", "joint_limits"):
        assert out_info[key] == src_info[key]
    ta, tb = ad.episodes_table(src), ad.episodes_table(out)
    for col in ("episode_id", "outcome", "operator", "interventions", "tasks"):
        assert [list(x) if col == "tasks" else x for x in tb[col]] == \
            [list(x) if col == "tasks" else x for x in ta[col]], col
    for e in (0, 1):
        before, after = ad.frames(src, ad.VIDEO, e), ad.frames(out, ad.VIDEO, e)
        assert after.shape == before.shape
        per_frame = np.abs(after.astype(int) - before).mean(axis=(1, 2, 3))
        assert per_frame.max() < tolerance, (e, int(per_frame.argmax()), float(per_frame.max()))


def test_round_trip_keeps_every_column_and_frame(made: dict[str, Path]) -> None:
    """LeRobot → HDF5-ALOHA → LeRobot: numeric columns bit-exact (float64 in the file), frames within
    one h264 encode."""
    _assert_round_trip(made["ds"], made["imported"], CODEC_TOLERANCE)


@NEEDS_LEROBOT
def test_lerobot_loads_the_imported_dataset(made: dict[str, Path]) -> None:
    ad.assert_lerobot_reads(made["imported"], made["ds"])


def test_manifest_exports_exactly_its_episodes_and_names_them(made: dict[str, Path]) -> None:
    files = sorted(p.name for p in made["from_manifest"].iterdir())
    assert files == ["episode_0.hdf5"]
    manifest = json.loads(made["manifest"].read_text())
    with h5py.File(made["from_manifest"] / "episode_0.hdf5", "r") as f:
        assert f.attrs["source_episode_index"] == 1
        assert f.attrs["episode_id"] == manifest["episodes"][0]["episode_id"]
        assert f.attrs["manifest_fingerprint"] == manifest["fingerprint"]
        assert f.attrs["manifest"] == str(made["manifest"].resolve())
        np.testing.assert_array_equal(f["/action"][()], _aloha_units(ad.column(made["ds"], "action", 1)))


def test_jpeg_files_import_too(made: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "from_jpeg"
    assert cli_main(["import", "--from", "hdf5-aloha", str(made["jpeg"]), str(out), "--codec", "h264"]) == 0
    _assert_round_trip(made["ds"], out, JPEG_TOLERANCE + CODEC_TOLERANCE)


def test_a_dataset_without_video_or_effort_exports(tmp_path: Path) -> None:
    ds = write(tmp_path / "syn", SyntheticSpec(episodes=2, min_length=20, max_length=30, seed=3)).root
    assert cli_main(["export", str(ds), "--to", "hdf5-aloha", str(tmp_path / "out")]) == 0
    with h5py.File(tmp_path / "out" / "episode_1.hdf5", "r") as f:
        assert f["/observations/effort"].attrs["absent"] and not f["/observations/effort"][()].any()
        assert len(f["/observations/images"]) == 0
        np.testing.assert_array_equal(f["/observations/qpos"][()], _aloha_units(ad.column(ds, "observation.state", 1)))


def test_an_existing_out_is_refused_and_left_alone(made: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    before = sorted(p.name for p in made["root"].iterdir())
    code, _, err = run_cli(capsys, "export", str(made["ds"]), "--to", "hdf5-aloha", str(made["aloha"]))
    assert code == 2 and "output already exists" in err.strip().splitlines()[-1]
    code, _, err = run_cli(capsys, "import", "--from", "hdf5-aloha", str(made["aloha"]), str(made["imported"]))
    assert code == 2 and "output already exists" in err.strip().splitlines()[-1]
    assert sorted(p.name for p in made["root"].iterdir()) == before


def _bad_dir(made: dict[str, Path], tmp_path: Path) -> Path:
    bad = tmp_path / "bad"
    shutil.copytree(made["aloha"], bad)
    return bad


def _refused(capsys: pytest.CaptureFixture[str], src: Path, tmp_path: Path, what: str, name: str) -> None:
    out = tmp_path / "ds"
    code, _, err = run_cli(capsys, "import", "--from", "hdf5-aloha", str(src), str(out))
    lines = err.strip().splitlines()
    assert code == 1, err
    assert name in lines[-1] and what in lines[-1], lines[-1]
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "bad") in ([], ["ds.lock"])


def test_a_truncated_file_is_refused(made: dict[str, Path], tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    bad = _bad_dir(made, tmp_path)
    path = bad / "episode_1.hdf5"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    _refused(capsys, bad, tmp_path, "not a readable HDF5 file", "episode_1.hdf5")


def test_a_file_without_action_is_refused(made: dict[str, Path], tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    bad = _bad_dir(made, tmp_path)
    with h5py.File(bad / "episode_0.hdf5", "a") as f:
        del f["/action"]
    _refused(capsys, bad, tmp_path, "no /action", "episode_0.hdf5")


def test_a_bad_frame_found_in_a_worker_is_one_line_and_nothing(made: dict[str, Path], tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """Only frame 0 is checked up front; a later frame fails while a worker encodes its episode."""
    bad = tmp_path / "bad"
    shutil.copytree(made["jpeg"], bad)
    with h5py.File(bad / "episode_1.hdf5", "a") as f:
        f[f"/observations/images/{ad.CAMERA}"][5] = 0  # no JPEG there any more
    out = tmp_path / "ds"
    code, _, err = run_cli(capsys, "import", "--from", "hdf5-aloha", str(bad), str(out), "--workers", "2",
                           "--codec", "h264")
    line = err.strip().splitlines()[-1]
    assert code == 1 and "episode_1.hdf5" in line and "frame 5 is not a 256x192 JPEG" in line, err
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".ds")]


def test_a_foreign_joint_count_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad"
    bad.mkdir()
    with h5py.File(bad / "episode_0.hdf5", "w") as f:  # a bimanual ALOHA file: 14 joints
        f.attrs["sim"] = False
        f.create_dataset("/observations/qpos", data=np.zeros((10, 14)))
        f.create_dataset("/observations/qvel", data=np.zeros((10, 14)))
        f.create_dataset("/action", data=np.zeros((10, 14)))
        f.create_dataset("/observations/images/top", data=np.zeros((10, 48, 64, 3), np.uint8))
    _refused(capsys, bad, tmp_path, "14 joints", "episode_0.hdf5")


def test_an_export_that_fails_midway_leaves_nothing(made: dict[str, Path], tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    ds = tmp_path / "ds"
    shutil.copytree(made["ds"], ds)
    video = next((ds / "videos" / ad.VIDEO).rglob("*.mp4"))
    video.write_bytes(video.read_bytes()[:2000])  # the frames are gone: the first episode's images fail
    code, _, err = run_cli(capsys, "export", str(ds), "--to", "hdf5-aloha", str(tmp_path / "out"))
    line = err.strip().splitlines()[-1]
    assert code == 1 and "unreadable video" in line and "nothing was written" in line, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds"]  # no OUT, no temporary directory


def test_a_foreign_six_joint_aloha_directory_imports(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A file as ALOHA's recorder writes it (no attributes of ours): task from --task, 50 fps."""
    src = tmp_path / "aloha"
    src.mkdir()
    rng = np.random.default_rng(0)
    qpos = rng.uniform(-1.0, 1.0, (12, 6))
    qpos[:, 5] = rng.uniform(0.0, 1.0, 12)
    with h5py.File(src / "episode_0.hdf5", "w") as f:
        f.attrs["sim"] = False
        f.create_dataset("/observations/qpos", data=qpos.astype(np.float32))
        f.create_dataset("/observations/qvel", data=np.zeros((12, 6), np.float32))
        f.create_dataset("/observations/effort", data=np.zeros((12, 6), np.float32))
        f.create_dataset("/action", data=qpos.astype(np.float32))
        f.create_dataset("/observations/images/top", data=np.full((12, 48, 64, 3), 128, np.uint8))
    out = tmp_path / "ds"
    code, _, err = run_cli(capsys, "import", "--from", "hdf5-aloha", str(src), str(out))
    assert code == 2 and "states no task" in err.strip().splitlines()[-1] and not out.exists()
    code, _, err = run_cli(capsys, "import", "--from", "hdf5-aloha", str(src), str(out), "--task", "stack",
                        "--codec", "h264")
    assert code == 0, err
    assert problems(out) == []
    info = json.loads((out / "meta/info.json").read_text())
    assert info["fps"] == 50 and "observation.images.top" in info["features"]
    expected = np.concatenate([np.rad2deg(qpos[:, :5].astype(np.float32).astype(np.float64)),
                               qpos[:, 5:].astype(np.float32).astype(np.float64) * 100.0], axis=1)
    np.testing.assert_allclose(ad.column(out, "action", 0), expected.astype(np.float32), rtol=0, atol=0)
    assert ad.episodes_table(out)["tasks"].iloc[0].tolist() == ["stack"]


def test_import_in_one_process_writes_the_dataset_two_workers_write(made: dict[str, Path], tmp_path: Path) -> None:
    """`made["imported"]` was imported by two worker processes."""
    out = tmp_path / "imported"
    assert cli_main(["import", "--from", "hdf5-aloha", str(made["aloha"]), str(out), "--codec", "h264",
                     "--workers", "1"]) == 0
    serial = {p.relative_to(out): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
    parallel = {p.relative_to(made["imported"]): p.read_bytes() for p in sorted(made["imported"].rglob("*"))
                if p.is_file()}
    assert sorted(serial) == sorted(parallel)
    assert [name for name in serial if serial[name] != parallel[name]] == []
