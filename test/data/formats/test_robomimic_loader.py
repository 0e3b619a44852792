"""robomimic's own code reads our export: `SequenceDataset` with each filter key, and
`scripts/get_dataset_info.py`.

robomimic needs torch, so it lives in its own environment (docs/formats.md says how /work/rmenv is
made): `PYTHONPATH=$PWD /work/rmenv/bin/python -m pytest test/data/formats/test_robomimic_loader.py`.
Skipped, with the reason, where robomimic is not importable. Run against robomimic 0.3.0 (PyPI's)
and the repository's 0.5.0 (a copy of ARISE-Initiative/robomimic first on PYTHONPATH).

What robomimic returns must be the source dataset's frames: `state` and the images exactly (the
export is uncompressed), the actions the source's through the documented normalisation; and a
filter key must give exactly the demos our labels select, with their frame count.
"""
from __future__ import annotations

import inspect
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support import aloha_data as ad
from support import robomimic_data as rd

from teleop_flywheel.cli import main as cli_main

pytest.importorskip("h5py", reason="h5py is the hdf5 extra: pip install '.[hdf5]'")
pytest.importorskip("robomimic", reason="robomimic (with torch) is not installed here: run in its own venv "
                                        "(/work/rmenv, docs/formats.md)")
import robomimic.utils.obs_utils as ObsUtils  # noqa: E402
from robomimic.utils.dataset import SequenceDataset  # noqa: E402

OBS_KEYS = ("state", "effort", "wrist_image")
JOINTS = ["shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper"]


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("robomimic_loader")
    ds = rd.converted(root)
    assert cli_main(["export", str(ds), "--to", "hdf5-robomimic", str(root / "out.hdf5")]) == 0
    ObsUtils.initialize_obs_utils_with_obs_specs({"obs": {"low_dim": ["state", "effort"], "rgb": ["wrist_image"]}})
    return {"ds": ds, "out": root / "out.hdf5"}


def _sequences(path: Path, obs_keys: tuple[str, ...], dataset_keys: tuple[str, ...], **kwargs: object) -> object:
    """robomimic's SequenceDataset: 0.3 (PyPI) takes the actions among the dataset keys; 0.4+ as
    `action_keys` with an `action_config` (no normalisation: ours are in [-1, 1] already)."""
    if "action_keys" in inspect.signature(SequenceDataset).parameters:
        actions = tuple(k for k in dataset_keys if k == "actions")
        return SequenceDataset(str(path), obs_keys=obs_keys, action_keys=actions,
                               dataset_keys=tuple(k for k in dataset_keys if k not in actions),
                               action_config={k: {"normalization": None} for k in actions}, **kwargs)
    return SequenceDataset(str(path), obs_keys=obs_keys, dataset_keys=dataset_keys, **kwargs)


def _normalised(ds: Path, action: np.ndarray) -> np.ndarray:
    info = json.loads((ds / "meta/info.json").read_text())
    stats = json.loads((ds / "meta/stats.json").read_text())["action"]
    low = np.minimum([info["joint_limits"][f"{j}.pos"][0] for j in JOINTS], stats["min"])
    high = np.maximum([info["joint_limits"][f"{j}.pos"][1] for j in JOINTS], stats["max"])
    return 2.0 * (action.astype(np.float64) - low) / (high - low) - 1.0


@pytest.mark.parametrize("key, episodes", [("success", rd.SUCCESS), ("failure", rd.FAILURE),
                                           ("intervention", rd.INTERVENTION), ("validated", [0, 1, 2])])
def test_a_filter_key_gives_its_demos_and_their_frames(made: dict[str, Path], key: str, episodes: list[int]) -> None:
    ds = made["ds"]
    data: Any = _sequences(made["out"], OBS_KEYS, ("actions", "rewards", "dones"), filter_by_attribute=key,
                           seq_length=1, hdf5_cache_mode=None)
    assert data.demos == [f"demo_{e}" for e in episodes]
    lengths = [len(ad.column(ds, "action", e)) for e in episodes]
    assert len(data) == sum(lengths)
    start = 0
    for e, n in zip(episodes, lengths, strict=True):
        state, action = ad.column(ds, "observation.state", e), ad.column(ds, "action", e)
        frames = ad.frames(ds, ad.VIDEO, e)
        for t in (0, n // 2, n - 1):
            item = data[start + t]
            np.testing.assert_array_equal(item["obs"]["state"][0], state[t])
            np.testing.assert_array_equal(item["obs"]["wrist_image"][0], frames[t])
            np.testing.assert_array_equal(item["next_obs"]["state"][0], state[min(t + 1, n - 1)])
            # robomimic reads the file's float64 as is, or as float32 where it caches (low_dim, all)
            np.testing.assert_array_equal(item["actions"][0], _normalised(ds, action)[t].astype(item["actions"].dtype))
            assert item["dones"][0] == float(t == n - 1)
        start += n


def test_sequences_and_the_in_memory_cache_read_the_same(made: dict[str, Path]) -> None:
    ds = made["ds"]
    data: Any = _sequences(made["out"], ("state",), ("actions",), filter_by_attribute="intervention", seq_length=10,
                           hdf5_cache_mode="low_dim")
    first = rd.INTERVENTION[0]
    state, action = ad.column(ds, "observation.state", first), ad.column(ds, "action", first)
    item = data[5]
    np.testing.assert_array_equal(item["obs"]["state"], state[5:15])
    assert item["actions"].dtype == np.float32  # the cache's cast
    np.testing.assert_array_equal(item["actions"], _normalised(ds, action)[5:15].astype(np.float32))


def test_get_dataset_info_describes_it(made: dict[str, Path]) -> None:
    ds = made["ds"]
    run = subprocess.run([sys.executable, "-m", "robomimic.scripts.get_dataset_info", "--dataset", str(made["out"])],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    total = sum(len(ad.column(ds, "action", e)) for e in range(4))
    assert f"total transitions: {total}" in run.stdout and "total trajectories: 4" in run.stdout
    for key, n in (("success", 3), ("failure", 1), ("intervention", 2), ("no_intervention", 2), ("validated", 3),
                   ("train", 4)):
        assert f"filter key {key} with {n} demos" in run.stdout, run.stdout
    run = subprocess.run([sys.executable, "-m", "robomimic.scripts.get_dataset_info", "--dataset", str(made["out"]),
                          "--filter_key", "intervention"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "total trajectories: 2" in run.stdout
    assert f"total transitions: {sum(len(ad.column(ds, 'action', e)) for e in rd.INTERVENTION)}" in run.stdout


def test_bc_trains_on_a_filter_key_and_its_policy_acts(made: dict[str, Path], tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """robomimic's own trainer (scripts/train.py `train`, 0.3's API) on the `intervention` subset:
    its training set is exactly those demos' frames, and the checkpoint it saves gives a policy that
    acts on our `state`."""
    pytest.importorskip("torchvision", reason="robomimic's trainer imports torchvision (a CPU build, or the CUDA "
                                              "one with its torch: /work/rmtrainenv, docs/formats.md)")
    pytest.importorskip("imageio", reason="robomimic's trainer imports imageio")
    import torch  # noqa: PLC0415
    from robomimic.config import config_factory  # noqa: PLC0415
    from robomimic.scripts.train import train  # noqa: PLC0415
    from robomimic.utils.file_utils import policy_from_checkpoint  # noqa: PLC0415

    if "action_keys" in inspect.signature(SequenceDataset).parameters:
        pytest.skip("written for robomimic 0.3's train(config, device); 0.4+ takes a list of datasets")
    config = config_factory("bc")
    with config.values_unlocked():
        config.train.data = str(made["out"])
        config.train.output_dir = str(tmp_path / "trained")
        config.train.hdf5_filter_key = "intervention"
        config.train.hdf5_cache_mode = "low_dim"
        config.train.batch_size = 16
        config.train.num_epochs = 2
        config.experiment.name = "intervention"
        config.experiment.epoch_every_n_steps = 5
        config.experiment.rollout.enabled = False  # no simulator of the arm
        config.experiment.logging.terminal_output_to_txt = False
        config.experiment.logging.log_tb = False
        config.experiment.save.every_n_epochs = 2
        config.observation.modalities.obs.low_dim = ["state"]
        config.observation.modalities.obs.rgb = []
    train(config, device=torch.device("cpu"))
    printed = capsys.readouterr().out
    frames = sum(len(ad.column(made["ds"], "action", e)) for e in rd.INTERVENTION)
    assert "filter_key=intervention" in printed and f"num_demos={len(rd.INTERVENTION)}" in printed, printed[-2000:]
    assert f"num_sequences={frames}" in printed
    checkpoint = next((tmp_path / "trained").rglob("model_epoch_2.pth"))
    policy, _ = policy_from_checkpoint(ckpt_path=str(checkpoint), device=torch.device("cpu"))
    policy.start_episode()
    action = policy(ob={"state": ad.column(made["ds"], "observation.state", rd.INTERVENTION[0])[0]})
    assert action.shape == (6,) and np.isfinite(action).all()
