"""`export --to rlds`: TensorFlow Datasets' own reader is the oracle, as it reads Open X-Embodiment's datasets.

`tfds.builder_from_directory(OUT).as_dataset(split='train')` reads every episode back; what it
returns is compared with the source dataset read independently of the exporter (pyarrow and PyAV,
`support/aloha_data.py`): step counts, state and action bit for bit (float32, the dataset's units),
the RLDS flags, the task, every step's image within JPEG's tolerance of the source frame, and the
episode metadata's provenance. TensorFlow (~1.4 GB) is never in the dev venv: run these in their own
venv, `PYTHONPATH=$PWD /work/tfenv/bin/python -m pytest test/data/formats/test_rlds.py` (docs/formats.md says how
to build it). The `rlds` package (Open-X's transformations) does not import with TensorFlow 2.21
(it needs dm-reverb, built for TensorFlow 2.15), so the RLDS step keys are checked here by name.
"""
from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support import aloha_data as ad
from support.cli import run_cli

from teleop_flywheel.cli import main as cli_main
from teleop_flywheel.testing.synthetic_dataset import SyntheticSpec, write

HAS_TFDS = importlib.util.find_spec("tensorflow_datasets") is not None
NEEDS_TFDS = pytest.mark.skipif(not HAS_TFDS, reason="tensorflow-datasets (the rlds extra, ~1.4 GB with TensorFlow) "
                                                     "is not installed here; run in /work/tfenv (docs/formats.md)")
# mean absolute difference per pixel, 0..255, at quality 95 (measured 0.67; 12.4 with R and B swapped)
JPEG_TOLERANCE = 2.0
STEP_KEYS = {"observation", "action", "reward", "discount", "is_first", "is_last", "is_terminal",
             "language_instruction", "teleop_flywheel"}


def _episodes(out: Path) -> list[dict[str, Any]]:
    """Every episode as TFDS reads it: numpy steps (stacked) and metadata."""
    import tensorflow_datasets as tfds  # noqa: PLC0415

    builder = tfds.builder_from_directory(str(out))
    episodes = []
    for episode in tfds.as_numpy(builder.as_dataset(split="train")):
        steps = list(episode["steps"])  # a nested tf.data.Dataset, as numpy: one dict per step
        assert set(steps[0]) == STEP_KEYS
        episodes.append({"steps": steps, "meta": episode["episode_metadata"]})
    return episodes


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("rlds")
    ds = ad.converted(root)
    manifest = root / "m1.json"
    assert cli_main(["manifest", "create", str(ds), "--out", str(manifest), "--filter", "episode_index==1"]) == 0
    assert cli_main(["export", str(ds), "--to", "rlds", str(root / "rlds")]) == 0
    assert cli_main(["export", str(manifest), "--to", "rlds", str(root / "from_manifest")]) == 0
    return {"root": root, "ds": ds, "manifest": manifest, "rlds": root / "rlds",
            "from_manifest": root / "from_manifest"}


@NEEDS_TFDS
def test_tfds_reads_every_episode_as_the_source_has_it(made: dict[str, Path]) -> None:
    ds, out = made["ds"], made["rlds"]
    assert {"dataset_info.json", "features.json"} <= {p.name for p in out.iterdir()}
    assert any(p.name.startswith("teleop_flywheel_so101-train.tfrecord-") for p in out.iterdir())
    table = ad.episodes_table(ds)
    episodes = _episodes(out)
    assert len(episodes) == 2
    for e, episode in enumerate(episodes):
        steps, meta = episode["steps"], episode["meta"]
        action, state = ad.column(ds, "action", e), ad.column(ds, "observation.state", e)
        assert len(steps) == len(action) == int(table["length"].iloc[e])
        got_action = np.stack([s["action"] for s in steps])
        assert got_action.dtype == np.float32 and action.dtype == np.float32
        np.testing.assert_array_equal(got_action, action)
        np.testing.assert_array_equal(np.stack([s["observation"]["state"] for s in steps]), state)
        np.testing.assert_array_equal(np.stack([s["observation"]["effort"] for s in steps]),
                                      ad.column(ds, "observation.effort", e))
        last = [False] * (len(steps) - 1) + [True]
        assert [bool(s["is_first"]) for s in steps] == [True] + [False] * (len(steps) - 1)
        assert [bool(s["is_last"]) for s in steps] == last
        assert [bool(s["is_terminal"]) for s in steps] == last
        success = table["outcome"].iloc[e] == "success"
        assert [float(s["reward"]) for s in steps] == [float(success and x) for x in last]
        assert all(float(s["discount"]) == 1.0 for s in steps)
        assert {s["language_instruction"].decode() for s in steps} == {f"task {e}"}
        np.testing.assert_array_equal(
            np.stack([s["teleop_flywheel"]["complementary_info.blend_weight"] for s in steps]).reshape(-1),
            ad.column(ds, "complementary_info.blend_weight", e).reshape(-1))
        feedback = np.stack([s["teleop_flywheel"]["complementary_info.feedback"] for s in steps])
        assert feedback.shape == (len(steps), 12)  # what the leader rendered, carried
        np.testing.assert_array_equal(feedback, ad.column(ds, "complementary_info.feedback", e))
        source = ad.frames(ds, ad.VIDEO, e)
        assert len(source) == len(steps)
        for t, step in enumerate(steps):
            image = step["observation"][f"image_{ad.CAMERA}"]
            assert image.dtype == np.uint8 and image.shape == source[t].shape
            assert np.abs(image.astype(int) - source[t]).mean() < JPEG_TOLERANCE, t
        assert meta["episode_id"].decode() == table["episode_id"].iloc[e]
        assert meta["source_episode_index"] == e
        assert meta["source_dataset"].decode() == os.path.abspath(ds)
        assert meta["manifest"].decode() == ""
        assert json.loads(meta["episode"].decode())["outcome"] == table["outcome"].iloc[e]
    info = json.loads((out / "metadata.json").read_text())
    assert info["joint_names"] == ["shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll",
                                   "gripper"]
    assert info["fps"] == 30 and "degrees" in info["units"]


@NEEDS_TFDS
def test_manifest_exports_exactly_its_episodes_and_names_them(made: dict[str, Path]) -> None:
    manifest = json.loads(made["manifest"].read_text())
    (episode,) = _episodes(made["from_manifest"])
    meta = episode["meta"]
    assert meta["source_episode_index"] == 1
    assert meta["episode_id"].decode() == manifest["episodes"][0]["episode_id"]
    assert meta["manifest"].decode() == str(made["manifest"].resolve())
    assert meta["manifest_fingerprint"].decode() == manifest["fingerprint"]
    assert meta["manifest_sha256"].decode()
    np.testing.assert_array_equal(np.stack([s["action"] for s in episode["steps"]]),
                                  ad.column(made["ds"], "action", 1))


@NEEDS_TFDS
def test_an_existing_out_is_refused_and_left_alone(made: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    before = sorted(p.name for p in made["root"].iterdir())
    code, _, err = run_cli(capsys, "export", str(made["ds"]), "--to", "rlds", str(made["rlds"]))
    assert code == 2 and "output already exists" in err.strip().splitlines()[-1]
    assert sorted(p.name for p in made["root"].iterdir()) == before


@NEEDS_TFDS
def test_a_dataset_without_video_or_effort_exports(tmp_path: Path) -> None:
    ds = write(tmp_path / "syn", SyntheticSpec(episodes=2, min_length=12, max_length=20, seed=3)).root
    assert cli_main(["export", str(ds), "--to", "rlds", str(tmp_path / "out")]) == 0
    episodes = _episodes(tmp_path / "out")
    assert len(episodes) == 2
    for e, episode in enumerate(episodes):
        assert set(episode["steps"][0]["observation"]) == {"state"}
        np.testing.assert_array_equal(np.stack([s["action"] for s in episode["steps"]]), ad.column(ds, "action", e))


def _foreign(info: dict[str, Any]) -> None:
    info["features"]["observation.state"]["names"] = [f"joint_{i}" for i in range(6)]


def _stateless(info: dict[str, Any]) -> None:
    del info["features"]["observation.state"]


@NEEDS_TFDS
@pytest.mark.parametrize(("edit", "what"), [(_foreign, "has joints ['joint_0'"), (_stateless, "no observation.state")])
def test_a_dataset_of_another_arm_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                             edit: Any, what: str) -> None:
    ds = write(tmp_path / "syn", SyntheticSpec(episodes=1, min_length=12, max_length=12, seed=5)).root
    info_path = ds / "meta/info.json"
    info = json.loads(info_path.read_text())
    edit(info)
    info_path.write_text(json.dumps(info))
    code, _, err = run_cli(capsys, "export", str(ds), "--to", "rlds", str(tmp_path / "out"))
    lines = err.strip().splitlines()
    assert code == 1 and len(lines) == 1, err
    assert str(info_path) in lines[0] and what in lines[0], lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["syn"]  # no OUT, no temporary directory


@NEEDS_TFDS
def test_an_export_that_fails_midway_leaves_nothing(made: dict[str, Path], tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    ds = tmp_path / "ds"
    ad.truncated_video_copy(made["ds"], ds)
    code, _, err = run_cli(capsys, "export", str(ds), "--to", "rlds", str(tmp_path / "out"))
    line = err.strip().splitlines()[-1]
    assert code == 1 and "unreadable video" in line, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds"]


@pytest.mark.skipif(HAS_TFDS, reason="tensorflow-datasets is installed here")
def test_without_the_extra_it_says_how_to_install_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ds = write(tmp_path / "syn", SyntheticSpec(episodes=1, min_length=12, max_length=12, seed=5)).root
    code, _, err = run_cli(capsys, "export", str(ds), "--to", "rlds", str(tmp_path / "out"))
    line = err.strip().splitlines()[-1]
    assert code == 2 and "tensorflow-datasets is not installed" in line and "[rlds]" in line, err
    assert not (tmp_path / "out").exists()


def test_options_it_does_not_use_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """One TFDS writer in episode order: `--workers`/`--executor ray` are refused, not ignored (docs/formats.md)."""
    ds = write(tmp_path / "syn", SyntheticSpec(episodes=1, min_length=12, max_length=12, seed=5)).root
    for option in (("--workers", "2"), ("--executor", "ray"), ("--calibration", "follower=x.yaml"), ("--jpeg", "0")):
        code, _, err = run_cli(capsys, "export", str(ds), "--to", "rlds", str(tmp_path / "out"), *option)
        line = err.strip().splitlines()[-1]
        expected = "JPEG quality 0 is out of range" if option[0] == "--jpeg" else f"{option[0]} does not apply to rlds"
        assert code == 2 and expected in line, err
        assert not (tmp_path / "out").exists()
