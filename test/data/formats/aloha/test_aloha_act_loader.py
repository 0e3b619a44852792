"""ACT's reference loader reads our exported episodes: `tonyzhaozh/act` utils.py, unchanged.

`get_norm_stats` and `EpisodicDataset` are ACT's own code, loaded from a copy of the repository
that is never part of this one: `ACT_UTILS` (the path of its utils.py) or `ACT_REPO` (a checkout or
a bare git mirror of tonyzhaozh/act; default the mirror the `fetch` tool leaves at
/work/.mirror/tonyzhaozh+act/repo). ACT needs torch (and IPython, which its utils.py imports):
run in the LeRobot venv, `PYTHONPATH=$PWD /work/lrenv/venv/bin/python -m pytest test/data/formats/aloha/`.
Skipped, with the reason, where any of that is absent.

What ACT reads must be the source dataset's frames: qpos and the action chunk equal the dataset's
observation.state and action in ALOHA's units (written out here from their definition), through
ACT's own normalisation, exactly; the images equal the source's decoded frames exactly (the
export is uncompressed, so nothing but the dataset's own codec stands between them).
"""
from __future__ import annotations

import importlib.util
import math
import os
import subprocess
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from support import aloha_data as ad

from teleop_flywheel.cli import main as cli_main

torch = pytest.importorskip("torch", reason="ACT's loader needs torch: run in the LeRobot venv (/work/lrenv/venv)")
pytest.importorskip("h5py", reason="h5py is the hdf5 extra: pip install '.[hdf5]'")
pytest.importorskip("IPython", reason="ACT's utils.py imports IPython: pip install ipython")
DEFAULT_MIRROR = "/work/.mirror/tonyzhaozh+act/repo"


def _act_utils(tmp: Path) -> ModuleType:
    """ACT's utils.py as a module, from ACT_UTILS, or ACT_REPO (checkout or bare mirror)."""
    path = Path(os.environ["ACT_UTILS"]) if os.environ.get("ACT_UTILS") else None
    repo = Path(os.environ.get("ACT_REPO", DEFAULT_MIRROR))
    if path is None and (repo / "utils.py").is_file():
        path = repo / "utils.py"
    if path is None and repo.is_dir():
        shown = subprocess.run(["git", "--git-dir", str(repo), "show", "HEAD:utils.py"], capture_output=True,
                               text=True, timeout=60)
        if shown.returncode == 0:
            path = tmp / "act_utils.py"
            path.write_text(shown.stdout)
    if path is None or not path.is_file():
        pytest.skip("ACT's utils.py is absent: set ACT_UTILS to it or ACT_REPO to a copy of tonyzhaozh/act")
    spec = importlib.util.spec_from_file_location("act_utils", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _aloha_units(lerobot: np.ndarray) -> np.ndarray:
    v = np.asarray(lerobot, dtype=np.float64)
    return np.concatenate([v[:, :5] * (math.pi / 180.0), v[:, 5:] / 100.0], axis=1)


def test_acts_own_loader_reads_the_source_frames(tmp_path: Path) -> None:
    act = _act_utils(tmp_path)
    ds = ad.converted(tmp_path)
    out = tmp_path / "aloha"
    assert cli_main(["export", str(ds), "--to", "hdf5-aloha", str(out)]) == 0
    qpos = np.stack([_aloha_units(ad.column(ds, "observation.state", e)) for e in (0, 1)])
    action = np.stack([_aloha_units(ad.column(ds, "action", e)) for e in (0, 1)])
    length = qpos.shape[1]

    stats = act.get_norm_stats(str(out), 2)
    np.testing.assert_array_equal(stats["example_qpos"], qpos[-1])  # ACT's raw read of the last episode
    np.testing.assert_allclose(stats["qpos_mean"], qpos.mean(axis=(0, 1)), rtol=1e-12)
    np.testing.assert_allclose(stats["action_mean"], action.mean(axis=(0, 1)), rtol=1e-12)

    dataset = act.EpisodicDataset([0, 1], str(out), [ad.CAMERA], stats)
    assert not dataset.is_sim
    for index in (0, 1):
        source_frames = ad.frames(ds, ad.VIDEO, index)
        for seed in range(4):
            np.random.seed(seed)
            ts = int(np.random.choice(length))  # the frame ACT draws next
            np.random.seed(seed)
            image, qpos_data, action_data, is_pad = dataset[index]
            # ACT's own arithmetic (utils.py) on the source's values: the same tensors, bit for bit
            expected_qpos = (torch.from_numpy(qpos[index][ts]).float() - stats["qpos_mean"]) / stats["qpos_std"]
            assert torch.equal(qpos_data, expected_qpos)
            start = max(0, ts - 1)  # ACT's real-robot alignment hack (sim is False)
            padded = np.zeros((length, 6), dtype=np.float32)
            padded[:length - start] = action[index][start:]
            expected_action = (torch.from_numpy(padded).float() - stats["action_mean"]) / stats["action_std"]
            assert torch.equal(action_data, expected_action)
            assert is_pad.tolist() == [False] * (length - start) + [True] * start
            pixels = torch.round(image[0].permute(1, 2, 0) * 255.0).to(torch.uint8).numpy()
            np.testing.assert_array_equal(pixels, source_frames[ts])
