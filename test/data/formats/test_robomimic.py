"""`export --to hdf5-robomimic`: the layout, the values, the filter keys, provenance, bad input.

Oracles independent of the code under test: h5py reading the file, pyarrow and PyAV reading the
source dataset (`support/aloha_data.py`), the action normalisation written out here from its
definition (2·(a − low)/(high − low) − 1 over info.json joint_limits widened to stats.json's action
range), and the labels read straight from the episodes table, the data rows and meta/validation.json.
robomimic's own SequenceDataset and get_dataset_info read the same file in test_robomimic_loader.py.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from support import aloha_data as ad
from support import robomimic_data as rd
from support.cli import run_cli

from teleop_flywheel.cli import main as cli_main
from teleop_flywheel.data.validate.dataset_record import read_verdicts

h5py = pytest.importorskip("h5py", reason="h5py is the hdf5 extra: pip install '.[hdf5]'")

JOINTS = ["shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper"]


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("robomimic")
    ds = rd.converted(root)
    manifest = root / "m.json"
    assert cli_main(["manifest", "create", str(ds), "--out", str(manifest), "--filter", "episode_index>=2"]) == 0
    assert cli_main(["export", str(ds), "--to", "hdf5-robomimic", str(root / "out.hdf5")]) == 0
    assert cli_main(["export", str(manifest), "--to", "hdf5-robomimic", str(root / "subset.hdf5")]) == 0
    return {"root": root, "ds": ds, "manifest": manifest, "out": root / "out.hdf5", "subset": root / "subset.hdf5"}


def _action_range(ds: Path) -> tuple[np.ndarray, np.ndarray]:
    info = json.loads((ds / "meta/info.json").read_text())
    stats = json.loads((ds / "meta/stats.json").read_text())["action"]
    low = np.array([info["joint_limits"][f"{j}.pos"][0] for j in JOINTS])
    high = np.array([info["joint_limits"][f"{j}.pos"][1] for j in JOINTS])
    return np.minimum(low, stats["min"]), np.maximum(high, stats["max"])


def _names(f: h5py.File, key: str) -> list[str]:
    return sorted(n.decode() for n in f[f"mask/{key}"][()])


def test_demos_hold_the_source_frames(made: dict[str, Path]) -> None:
    ds = made["ds"]
    table = ad.episodes_table(ds)
    low, high = _action_range(ds)
    with h5py.File(made["out"], "r") as f:
        assert sorted(f["data"]) == ["demo_0", "demo_1", "demo_2", "demo_3"]
        total = 0
        for e in range(4):
            demo = f[f"data/demo_{e}"]
            state, action = ad.column(ds, "observation.state", e), ad.column(ds, "action", e)
            n = len(state)
            total += n
            assert demo.attrs["num_samples"] == n
            assert demo["obs/state"].dtype == np.float32
            np.testing.assert_array_equal(demo["obs/state"][()], state)
            np.testing.assert_array_equal(demo["obs/effort"][()], ad.column(ds, "observation.effort", e))
            actions = demo["actions"][()]
            np.testing.assert_array_equal(actions, 2.0 * (action.astype(np.float64) - low) / (high - low) - 1.0)
            assert actions.min() >= -1.0 and actions.max() <= 1.0
            back = ((actions + 1.0) / 2.0 * (high - low) + low).astype(np.float32)
            np.testing.assert_array_equal(back, action)  # the inverse gives the recorded float32 back
            np.testing.assert_array_equal(demo["actions"].attrs["low"], low)
            np.testing.assert_array_equal(demo["teleop_flywheel/action"][()], action)
            success = table["outcome"].iloc[e] == "success"
            assert demo["rewards"][()].tolist() == [0.0] * (n - 1) + [float(success)]
            assert demo["dones"][()].tolist() == [0] * (n - 1) + [1]
            images = demo["obs/wrist_image"]
            assert images.dtype == np.uint8 and images.shape == (n, 192, 256, 3)
            source = ad.frames(ds, ad.VIDEO, e)
            np.testing.assert_array_equal(images[()], source)  # uncompressed: the very frames decoded
            for key in ("state", "effort", "wrist_image"):
                obs, nxt = demo[f"obs/{key}"][()], demo[f"next_obs/{key}"][()]
                np.testing.assert_array_equal(nxt[:-1], obs[1:])
                np.testing.assert_array_equal(nxt[-1], obs[-1])
            np.testing.assert_array_equal(demo["teleop_flywheel/intervention"][()], ad.column(ds, "intervention", e))
            np.testing.assert_array_equal(demo["teleop_flywheel/complementary_info.feedback"][()],
                                          ad.column(ds, "complementary_info.feedback", e))  # what the leader rendered
            assert demo.attrs["episode_id"] == table["episode_id"].iloc[e]
            assert demo.attrs["source_episode_index"] == e and demo.attrs["task"] == f"task {e}"
        assert f["data"].attrs["total"] == total
        env = json.loads(f["data"].attrs["env_args"])
        assert set(env) == {"env_name", "type", "env_kwargs"} and env["env_kwargs"]["joint_names"] == JOINTS
        assert json.loads(f.attrs["episode_ids"]) == table["episode_id"].tolist()
        assert f.attrs["source_dataset"] == os.path.abspath(ds)


def test_filter_keys_are_the_labels(made: dict[str, Path]) -> None:
    ds = made["ds"]
    table = ad.episodes_table(ds)
    intervened = [e for e in range(4) if ad.column(ds, "intervention", e).any()]
    verdicts = {v["episode_id"]: v["passed"] for v in read_verdicts(ds)}
    expected = {
        "success": [e for e in range(4) if table["outcome"].iloc[e] == "success"],
        "failure": [e for e in range(4) if table["outcome"].iloc[e] == "failure"],
        "intervention": intervened,
        "no_intervention": [e for e in range(4) if e not in intervened],
        "validated": [e for e in range(4) if verdicts.get(table["episode_id"].iloc[e])],
        "train": [0, 1, 2, 3],
    }
    # the fixture's design, so every key tells episodes apart
    assert (expected["success"], expected["intervention"], expected["validated"]) == \
        (rd.SUCCESS, rd.INTERVENTION, [0, 1, 2])
    with h5py.File(made["out"], "r") as f:
        assert sorted(f["mask"]) == sorted(expected)
        for key, episodes in expected.items():
            assert f[f"mask/{key}"].dtype.kind == "S"
            assert _names(f, key) == sorted(f"demo_{e}" for e in episodes), key


def test_a_manifest_exports_exactly_its_episodes_and_names_them(made: dict[str, Path]) -> None:
    manifest = json.loads(made["manifest"].read_text())
    with h5py.File(made["subset"], "r") as f:
        assert sorted(f["data"]) == ["demo_0", "demo_1"]
        assert [f[f"data/demo_{k}"].attrs["source_episode_index"] for k in (0, 1)] == [2, 3]
        assert json.loads(f.attrs["episode_ids"]) == [m["episode_id"] for m in manifest["episodes"]]
        assert f.attrs["manifest_fingerprint"] == manifest["fingerprint"]
        assert f.attrs["manifest"] == str(made["manifest"].resolve())
        assert f["data/demo_1"].attrs["manifest_fingerprint"] == manifest["fingerprint"]
        assert _names(f, "intervention") == ["demo_0"] and _names(f, "validated") == ["demo_0"]
        np.testing.assert_array_equal(f["data/demo_1/obs/state"][()], ad.column(made["ds"], "observation.state", 3))


def test_another_arms_dataset_is_refused_and_nothing_written(made: dict[str, Path], tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    ds = tmp_path / "koch"
    shutil.copytree(made["ds"], ds)
    info = json.loads((ds / "meta/info.json").read_text())
    info["features"]["observation.state"]["names"] = [f"joint_{i}" for i in range(6)]
    (ds / "meta/info.json").write_text(json.dumps(info))
    code, _, err = run_cli(capsys, "export", str(ds), "--to", "hdf5-robomimic", str(tmp_path / "out.hdf5"))
    lines = err.strip().splitlines()
    assert code == 1, err
    assert str(ds / "meta/info.json") in lines[-1] and "joint_0" in lines[-1] and "SO-101" in lines[-1], lines[-1]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["koch"]  # no OUT, no temporary


def test_a_video_that_fails_midway_leaves_nothing(made: dict[str, Path], tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    ds = tmp_path / "ds"
    shutil.copytree(made["ds"], ds)
    video = next((ds / "videos" / ad.VIDEO).rglob("*.mp4"))
    video.write_bytes(video.read_bytes()[:len(video.read_bytes()) // 2])  # the later episodes' frames are gone
    code, _, err = run_cli(capsys, "export", str(ds), "--to", "hdf5-robomimic", str(tmp_path / "out.hdf5"))
    assert code == 1 and "nothing was written" in err.strip().splitlines()[-1], err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds"]


def test_an_existing_out_is_refused_and_left_alone(made: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    before = made["out"].stat().st_mtime_ns
    code, _, err = run_cli(capsys, "export", str(made["ds"]), "--to", "hdf5-robomimic", str(made["out"]))
    assert code == 2 and "output already exists" in err.strip().splitlines()[-1]
    assert made["out"].stat().st_mtime_ns == before


def test_options_of_other_formats_are_refused(made: dict[str, Path], tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    for option, value in (("--jpeg", "50"), ("--calibration", "follower=x.yaml"), ("--workers", "2"),
                          ("--executor", "ray")):
        code, _, err = run_cli(capsys, "export", str(made["ds"]), "--to", "hdf5-robomimic", option, value,
                               str(tmp_path / "out.hdf5"))
        assert code == 2 and f"{option} does not apply" in err.strip().splitlines()[-1], err
        assert not (tmp_path / "out.hdf5").exists()
