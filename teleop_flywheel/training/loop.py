"""`teleop-flywheel train MANIFEST --policy act|diffusion --out DIR`: LeRobot's own training machinery
on a frozen manifest's episodes, frames drawn by their sample weights, the checkpoint registered in
lineage (docs/training.md).

LeRobot's `lerobot-train` samples a dataset uniformly (or with its `EpisodeAwareSampler`) and takes
no sampler, so this loop is built from LeRobot's public pieces in the order its script uses them:
the config (`TrainPipelineConfig`, parsed by draccus from the options below plus everything after
`--`, then its own `validate`), `make_dataset`, `make_policy`, `make_pre_post_processors`,
`make_optimizer_and_scheduler`, its training step `update_policy` under an `accelerate.Accelerator`,
and its checkpointing (`save_checkpoint`, `update_last_checkpoint`: `OUT/checkpoints/<step>/
pretrained_model`, `OUT/checkpoints/last`). What differs is the DataLoader's sampler:
`WeightedFrameSampler` over the manifest's episodes, `steps × batch size` draws seeded with the
run's seed, dropping the last frames of each episode where the policy asks LeRobot to
(`drop_n_last_frames`).

The manifest decides the data: `--dataset.repo_id`, `--dataset.root` and `--dataset.episodes` come
from it (the dataset's current indices of the manifest's episodes, after `training_set` verified
them) and are refused after `--`; the loaded dataset's episodes are checked to be exactly those
before the first step. `--dataset.root` is the dataset's current version folder, pinned and leased
for the whole run (`commit.pinned`): a commit during the run (an ingest's append) is not read, and
the version is not collected under it; lineage records the dataset's path, as the manifest does.
Offline: HF_HUB_OFFLINE and HF_DATASETS_OFFLINE are set (unless set already),
ACT's ResNet starts from random weights (`--policy.pretrained_backbone_weights=null`; give
`-- --policy.pretrained_backbone_weights=ResNet18_Weights.IMAGENET1K_V1` to download ImageNet's),
videos decode with pyav, nothing is pushed to the hub.

At the end the last checkpoint is registered in the lineage registry (`--registry`, default as for
`lineage`) against the manifest, under the id the policy node tags its commands with when it runs
that checkpoint (`policies/lerobot_checkpoint.default_checkpoint_id`), with its path, policy type,
steps, batch size, seed and the trained episodes.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from teleop_flywheel.core.errors import UsageError
from teleop_flywheel.core.progress import progress
from teleop_flywheel.data.errors import DatasetError
from teleop_flywheel.data.provenance import default_registry
from teleop_flywheel.data.provenance.lineage import register_checkpoint
from teleop_flywheel.policies.lerobot_checkpoint import default_checkpoint_id
from teleop_flywheel.training.training_set import TrainingSet

POLICIES = ("act", "diffusion")
INSTALL = "pip install 'teleop_flywheel[lerobot]' (LeRobot 0.4.x with torch, ~8 GB)"
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
# Set from the manifest or from this command's own options; after `--` they would contradict them.
OWNED = {
    "--dataset.repo_id": "the manifest's dataset", "--dataset.root": "the manifest's dataset (or --dataset)",
    "--dataset.episodes": "the manifest's episodes", "--output_dir": "this command's --out",
    "--policy.type": "this command's --policy", "--steps": "this command's --steps",
    "--batch_size": "this command's --batch-size", "--seed": "this command's --seed",
    "--policy.path": "nothing: fine-tuning a checkpoint is lerobot-train's (`--policy.path`)",
    "--resume": "nothing: resuming is lerobot-train's (`--resume`)", "--config_path": "the options above",
}


@dataclass
class TrainResult:
    checkpoint: Path  # OUT/checkpoints/<step>/pretrained_model
    checkpoint_id: str
    steps: int
    seconds: float
    loss: float
    data_s: float  # mean seconds per step waiting for the batch (decode included), then updating
    update_s: float
    registry: Path


def lerobot_arguments(tset: TrainingSet, policy: str, out: Path, steps: int | None, batch_size: int | None,
                      seed: int | None, extra: list[str]) -> list[str]:
    """The arguments LeRobot's config parser gets: the manifest's data, our options, offline defaults,
    then the user's (later arguments win in draccus, so a user's offline default override stands)."""
    args = [f"--policy.type={policy}", f"--dataset.repo_id={tset.repo_id}", f"--dataset.root={tset.files}",
            f"--dataset.episodes={json.dumps(tset.episodes)}", f"--output_dir={out}",
            "--dataset.video_backend=pyav", "--policy.pretrained_backbone_weights=null",
            "--policy.push_to_hub=false", "--wandb.enable=false"]
    args += [f"--{name}={value}" for name, value in (("steps", steps), ("batch_size", batch_size), ("seed", seed))
             if value is not None]
    return args + list(extra)


def parse_config(args: list[str]) -> Any:
    """LeRobot's `TrainPipelineConfig` from `args`, validated as `lerobot-train` validates it; a
    parser error is one UsageError line (draccus prints a page of usage for it)."""
    import draccus
    import lerobot.policies  # noqa: F401  (importing it registers the policy configs `--policy.type` names)
    from lerobot.configs.train import TrainPipelineConfig

    captured = io.StringIO()
    try:
        with contextlib.redirect_stderr(captured):
            cfg = draccus.parse(config_class=TrainPipelineConfig, args=args)
    except SystemExit:
        errors = [ln for ln in captured.getvalue().splitlines() if "error:" in ln]
        what = errors[-1].split("error:", 1)[1].strip() if errors else captured.getvalue().strip()[-300:]
        raise UsageError(f"LeRobot's config parser: {what}", where="the arguments after --",
                         fix="see lerobot-train --help") from None
    except Exception as exc:  # draccus' decoding errors are its own classes
        raise UsageError(f"LeRobot's config parser: {exc}", where="the arguments after --",
                         fix="see lerobot-train --help") from exc
    try:
        cfg.validate()
    except (ValueError, FileExistsError) as exc:
        raise UsageError(f"LeRobot's config: {exc}", where="the arguments after --") from exc
    if not cfg.save_checkpoint:
        raise UsageError("--save_checkpoint=false leaves nothing to register", where="the arguments after --",
                         fix="leave it out")
    return cfg


@dataclass
class _Run:
    """What one training run is built from: LeRobot's dataset, policy, processors, optimizer and
    scheduler, the weighted loader, and the metrics, all prepared by the accelerator."""

    accelerator: Any
    dataset: Any
    model: Any
    preprocessor: Any
    postprocessor: Any
    optimizer: Any
    lr_scheduler: Any
    loader: Any
    tracker: Any


def train(tset: TrainingSet, policy: str, out: Path, *, steps: int | None = None, batch_size: int | None = None,
          seed: int | None = None, lerobot_args: list[str] | None = None, registry: Path | None = None,
          run_name: str | None = None) -> TrainResult:
    """Train on `tset` with LeRobot's machinery and the weighted sampler; register the last checkpoint."""
    for key, value in OFFLINE.items():  # read by huggingface_hub and datasets when they are imported
        os.environ.setdefault(key, value)
    cfg = parse_config(lerobot_arguments(tset, policy, out, steps, batch_size, seed, lerobot_args or []))
    run = _build(tset, cfg)
    checkpoint, seconds = _loop(run, cfg, out)
    run.accelerator.end_training()
    pretrained = checkpoint / "pretrained_model"
    ckpt_id, reg = _register(tset, cfg, pretrained, registry, run_name or out.name, lerobot_args)
    return TrainResult(pretrained, ckpt_id, cfg.steps, seconds, float(run.tracker.loss.val),
                       float(run.tracker.dataloading_s.avg), float(run.tracker.update_s.avg), reg)


def _build(tset: TrainingSet, cfg: Any) -> _Run:
    """LeRobot's dataset (checked to hold exactly the manifest's episodes), the policy fed what the
    policy node feeds, its processors and optimizer, and a loader drawing frames by the set's weights."""
    import numpy as np
    import torch
    from accelerate import Accelerator
    from lerobot.datasets.factory import make_dataset
    from lerobot.datasets.utils import dataset_to_policy_features
    from lerobot.optim.factory import make_optimizer_and_scheduler
    from lerobot.policies.factory import make_policy, make_pre_post_processors
    from lerobot.utils.logging_utils import AverageMeter, MetricsTracker
    from lerobot.utils.random_utils import set_seed

    from teleop_flywheel.policies.lerobot_checkpoint import node_feeds
    from teleop_flywheel.training.sampler import WeightedFrameSampler

    accelerator = Accelerator(step_scheduler_with_optimizer=False, cpu=cfg.policy.device == "cpu")
    if cfg.seed is not None:
        set_seed(cfg.seed, accelerator=accelerator)
    dataset = make_dataset(cfg)
    frame_episodes = np.asarray(dataset.hf_dataset.with_format("numpy")["episode_index"], dtype=np.int64)
    loaded = sorted(int(e) for e in np.unique(frame_episodes))
    if loaded != tset.episodes or sorted(dataset.episodes or []) != tset.episodes:
        raise DatasetError(f"{tset.root}: LeRobot loaded episodes {loaded[:20]} for the manifest's "
                           f"{tset.episodes[:20]}; the run would not be the manifest's")
    if not cfg.policy.input_features:
        # The inputs are what the policy node feeds at deployment (the follower state, the cameras):
        # LeRobot would take every observation.* feature, the follower's effort included, and the
        # node would refuse the checkpoint.
        cfg.policy.input_features = {k: ft for k, ft in dataset_to_policy_features(dataset.meta.features).items()
                                     if node_feeds(k, ft.type.value)}
    model = make_policy(cfg=cfg.policy, ds_meta=dataset.meta, rename_map=cfg.rename_map)
    preprocessor, postprocessor = make_pre_post_processors(policy_cfg=cfg.policy, pretrained_path=None,
                                                           dataset_stats=dataset.meta.stats)
    optimizer, lr_scheduler = make_optimizer_and_scheduler(cfg, model)
    sampler = WeightedFrameSampler(frame_episodes, tset.weights, num_samples=cfg.steps * cfg.batch_size,
                                   seed=cfg.seed or 0,
                                   drop_last_frames=int(getattr(cfg.policy, "drop_n_last_frames", 0) or 0))
    loader = torch.utils.data.DataLoader(
        dataset, batch_size=cfg.batch_size, sampler=sampler, num_workers=cfg.num_workers,
        pin_memory=accelerator.device.type == "cuda", drop_last=False,
        prefetch_factor=2 if cfg.num_workers > 0 else None)
    model, optimizer, loader, lr_scheduler = accelerator.prepare(model, optimizer, loader, lr_scheduler)
    meters = {"loss": AverageMeter("loss", ":.3f"), "grad_norm": AverageMeter("grdn", ":.3f"),
              "lr": AverageMeter("lr", ":0.1e"), "update_s": AverageMeter("updt_s", ":.3f"),
              "dataloading_s": AverageMeter("data_s", ":.3f")}
    tracker = MetricsTracker(cfg.batch_size, dataset.num_frames, dataset.num_episodes, meters,
                             accelerator=accelerator)
    return _Run(accelerator, dataset, model, preprocessor, postprocessor, optimizer, lr_scheduler, loader, tracker)


def _loop(run: _Run, cfg: Any, out: Path) -> tuple[Path, float]:
    """`cfg.steps` updates, a checkpoint every `save_freq` steps and at the last: (the last
    checkpoint's directory, seconds the loop took)."""
    from lerobot.datasets.utils import cycle
    from lerobot.scripts.lerobot_train import update_policy
    from lerobot.utils.train_utils import get_step_checkpoint_dir, save_checkpoint, update_last_checkpoint

    batches = cycle(run.loader)
    checkpoint = out
    start = time.perf_counter()
    with progress(cfg.steps, f"train {cfg.policy.type}", unit="step") as bar:
        for step in range(1, cfg.steps + 1):
            fetched = time.perf_counter()
            batch = run.preprocessor(next(batches))
            run.tracker.dataloading_s = time.perf_counter() - fetched
            run.tracker, _ = update_policy(run.tracker, run.model, batch, run.optimizer,
                                           cfg.optimizer.grad_clip_norm, accelerator=run.accelerator,
                                           lr_scheduler=run.lr_scheduler)
            run.tracker.step()
            bar.update(1)
            if step % cfg.save_freq == 0 or step == cfg.steps:
                checkpoint = get_step_checkpoint_dir(cfg.output_dir, cfg.steps, step)
                save_checkpoint(checkpoint_dir=checkpoint, step=step, cfg=cfg,
                                policy=run.accelerator.unwrap_model(run.model), optimizer=run.optimizer,
                                scheduler=run.lr_scheduler, preprocessor=run.preprocessor,
                                postprocessor=run.postprocessor)
                update_last_checkpoint(checkpoint)
    return Path(checkpoint), time.perf_counter() - start


def _register(tset: TrainingSet, cfg: Any, pretrained: Path, registry: Path | None, run_name: str,
              lerobot_args: list[str] | None) -> tuple[str, Path]:
    """The checkpoint in the lineage registry with the manifest that trained it and how: (its id, the registry)."""
    ckpt_id = default_checkpoint_id(pretrained)
    reg = registry or default_registry()
    register_checkpoint(reg, ckpt_id, tset.manifest_path, run_name, training={
        "path": str(pretrained.resolve()), "policy": cfg.policy.type, "steps": cfg.steps,
        "batch_size": cfg.batch_size, "seed": cfg.seed, "episodes": tset.episodes,
        "manifest_fingerprint": tset.manifest["fingerprint"], "sampler": "WeightedFrameSampler",
        "weight_rule": tset.weight_rule, "lerobot_args": list(lerobot_args or [])})
    return ckpt_id, reg
