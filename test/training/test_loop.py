"""`teleop-flywheel train`: LeRobot's training machinery on a manifest's episodes, registered in lineage.

Without LeRobot (CI): the command says in one line what to install, refuses arguments that would
contradict the manifest, and neither it nor the training package imports torch. With LeRobot
(`pip install '.[lerobot]'`; skipped elsewhere with that reason): a tiny ACT trains for a few steps
on CPU on a converted dataset (no backbone download), its checkpoint is LeRobot's own layout, is
registered in lineage against the manifest, loads in the project's `lerobot` policy plugin under
the registered id, and was trained on exactly the manifest's episodes.
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from support.imports import loaded_after
from support.paths import ROOT

from teleop_flywheel.cli import main as cli_main
from teleop_flywheel.data.convert import converter as conv
from teleop_flywheel.data.lerobot import commit
from teleop_flywheel.testing.synthetic_session import SessionSpec, write_session

HAVE_LEROBOT = importlib.util.find_spec("lerobot") is not None
NEEDS_LEROBOT = pytest.mark.skipif(not HAVE_LEROBOT, reason="LeRobot (torch, ~8 GB) is not installed here; "
                                                            "pip install '.[lerobot]' to run the training tests")
TINY_ACT = ["--policy.chunk_size=4", "--policy.n_action_steps=4", "--policy.dim_model=32", "--policy.n_heads=2",
            "--policy.dim_feedforward=64", "--policy.n_encoder_layers=1", "--policy.n_decoder_layers=1",
            "--policy.n_vae_encoder_layers=1", "--policy.latent_dim=8", "--num_workers=0"]


@pytest.fixture(scope="module")
def manifest(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """4 converted 2.5 s episodes (one with a takeover), curate's weights, a manifest of all but episode 1.
    The follower's effort is recorded (the simulator's default), so the dataset has observation.effort,
    which `train` must leave out of the inputs: the policy node feeds only the state and the cameras."""
    tmp = tmp_path_factory.mktemp("train")
    specs = [SessionSpec(duration_s=2.5, seed=s) for s in range(3)]
    specs.append(SessionSpec(duration_s=2.5, seed=3, session_kind="policy",
                             interventions=((0.5, 1.2, "wrong_grasp"),)))
    bags = [write_session(tmp / "bags" / f"ep{i}", s).bag for i, s in enumerate(specs)]
    res = conv.convert(bags, tmp / "ds", workers=1, progress=False)
    assert sum(map(len, res.converted.values())) == 4, res.rejected
    assert cli_main(["curate", str(tmp / "ds")]) == 0
    out = tmp / "run.json"
    assert cli_main(["manifest", "create", str(tmp / "ds"), "--out", str(out), "--filter", "episode_index!=1"]) == 0
    return out


def _train(manifest: Path, out: Path, *extra: str) -> list[str]:
    return ["train", str(manifest), "--policy", "act", "--out", str(out), "--steps", "3", "--batch-size", "2",
            "--seed", "7", "--", *TINY_ACT, *extra]


@pytest.mark.parametrize(("extra", "message"), [
    (["--dataset.episodes=[0]"], "--dataset.episodes is set by the manifest's episodes, the arguments after --"),
    (["--dataset.root=/elsewhere"], "--dataset.root is set by the manifest's dataset (or --dataset)"),
    (["--steps=9"], "--steps is set by this command's --steps"),
    (["--policy.path=/ckpt"], "--policy.path is set by nothing: fine-tuning a checkpoint is lerobot-train's"),
    (["policy.dim_model=8"], "unexpected argument 'policy.dim_model=8', the arguments after --"),
])
def test_arguments_that_would_contradict_the_manifest_are_refused(manifest: Path, tmp_path: Path, extra: list[str],
                                                                  message: str,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(_train(manifest, tmp_path / "run", *extra)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("teleop-flywheel train: error: ") and message in err[0], err
    assert not (tmp_path / "run").exists()


def test_a_run_directory_is_never_overwritten(manifest: Path, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "run").mkdir()
    assert cli_main(_train(manifest, tmp_path / "run")) == 2
    assert "the run directory exists" in capsys.readouterr().err


@pytest.mark.skipif(HAVE_LEROBOT, reason="LeRobot is installed: the missing-install message cannot be shown")
def test_without_lerobot_train_says_what_to_install(manifest: Path, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(_train(manifest, tmp_path / "run")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["teleop-flywheel train: error: LeRobot is not installed, and train runs LeRobot's training "
                   "(pip install 'teleop_flywheel[lerobot]' (LeRobot 0.4.x with torch, ~8 GB))"]
    assert not (tmp_path / "run").exists()


def test_the_base_cli_and_the_training_package_do_not_import_torch() -> None:
    code = ("import contextlib, io\n"
            "from teleop_flywheel.cli import main\n"
            "import teleop_flywheel.training, teleop_flywheel.training.loop, teleop_flywheel.training.training_set\n"
            "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
            "    assert main(['--help']) == 0 and main(['train', '--help']) == 0\n"
            "assert '-- LEROBOT_ARGS' in out.getvalue(), out.getvalue()\n")
    assert loaded_after(code, "torch", "lerobot") == []


@NEEDS_LEROBOT
def test_a_tiny_act_trains_on_the_manifest_and_its_checkpoint_is_registered_and_runs(
        manifest: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from teleop_flywheel.data.provenance.lineage import Registry
    from teleop_flywheel.policies import load_policy
    from teleop_flywheel.training.training_set import load_training_set

    registry = tmp_path / "lineage.json"
    out = tmp_path / "act_run"
    res = subprocess.run([sys.executable, "-m", "teleop_flywheel.cli", *_train(manifest, out, "--save_freq=2")],
                         capture_output=True, text=True, timeout=600,
                         env={**os.environ, "PYTHONPATH": str(ROOT), "TELEOP_FLYWHEEL_LINEAGE": str(registry)})
    assert res.returncode == 0, res.stderr[-3000:]
    assert "train act: 3 steps..." in res.stderr  # not a terminal: one line, no bar
    pretrained = out / "checkpoints" / "000003" / "pretrained_model"
    assert f"checkpoint {pretrained}" in res.stdout, res.stdout
    assert (out / "checkpoints" / "000002" / "pretrained_model" / "model.safetensors").is_file()  # --save_freq=2
    assert (out / "checkpoints" / "last").resolve() == pretrained.parent
    assert (pretrained.parent / "training_state" / "training_step.json").is_file()

    # trained on exactly the manifest's episodes (the dataset's current indices of its episode ids)
    tset = load_training_set(manifest)
    assert tset.episodes == [0, 2, 3]
    train_config = json.loads((pretrained / "train_config.json").read_text())
    assert train_config["dataset"]["episodes"] == tset.episodes
    assert train_config["dataset"]["root"] == str(tset.files) and train_config["steps"] == 3  # the pinned version
    assert tset.files.parent == commit.versions_path(tset.root)
    assert train_config["policy"]["pretrained_backbone_weights"] is None  # nothing downloaded

    # registered against the manifest, under the id the policy plugin tags its commands with
    (entry,) = Registry.load(registry).checkpoints.values()
    frozen = json.loads(manifest.read_text())
    assert entry["manifest"] == frozen and entry["run"] == "act_run"
    assert entry["training"] | {"weight_rule": None} == {
        "path": str(pretrained.resolve()), "policy": "act", "steps": 3, "batch_size": 2, "seed": 7,
        "episodes": tset.episodes, "manifest_fingerprint": frozen["fingerprint"], "sampler": "WeightedFrameSampler",
        "weight_rule": None, "lerobot_args": [*TINY_ACT, "--save_freq=2"]}
    assert f"registered as {entry['checkpoint']} in {registry}" in res.stdout
    assert entry["checkpoint"].startswith("lerobot:act_run-000003:")

    policy = load_policy("lerobot", str(out / "checkpoints" / "last" / "pretrained_model"), "", simulated=True)
    assert policy.checkpoint_id == entry["checkpoint"] and policy.cameras == ("wrist",)
    image = np.random.default_rng(0).integers(0, 256, (240, 320, 3), dtype=np.uint8)
    action = policy.act([0.1, -0.2, 0.3, -0.1, 0.2, 0.4], 0, {"wrist": image})
    assert action is not None and len(action) == 6 and np.isfinite(action).all()

    monkey_env = {"TELEOP_FLYWHEEL_LINEAGE": str(registry)}
    os.environ.update(monkey_env)
    try:
        assert cli_main(["lineage", "which", entry["checkpoint"]]) == 0
    finally:
        del os.environ["TELEOP_FLYWHEEL_LINEAGE"]
    assert f"trained    act, 3 steps, batch 2, seed 7: {pretrained.resolve()}" in capsys.readouterr().out


@NEEDS_LEROBOT
def test_a_bad_lerobot_argument_is_one_line(manifest: Path, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(_train(manifest, tmp_path / "run", "--policy.no_such_field=3")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("teleop-flywheel train: error: LeRobot's config parser: "), err
    assert "no_such_field" in err[0] and not (tmp_path / "run").exists()
