"""A tiny, randomly initialised LeRobot ACT checkpoint, saved with LeRobot's own `save_pretrained`
(policy and processors), for the tests that run a real checkpoint where LeRobot is installed."""
from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

HAVE_LEROBOT = importlib.util.find_spec("lerobot") is not None
NEEDS_LEROBOT = pytest.mark.skipif(not HAVE_LEROBOT, reason="LeRobot (torch, ~8 GB) is not installed here; "
                                                            "pip install '.[lerobot]' to run the checkpoint tests")


def save_act(root: Path, inputs: dict[str, tuple[str, tuple[int, ...]]],
             action_mean: list[float] | None = None) -> Path:
    """A tiny random ACT policy + its processors, written with LeRobot's save_pretrained. With
    `action_mean` (LeRobot units) the action statistics pin every action within ~1e-3 of it."""
    import torch
    from lerobot.configs.types import FeatureType, PolicyFeature
    from lerobot.policies.act.configuration_act import ACTConfig
    from lerobot.policies.act.modeling_act import ACTPolicy
    from lerobot.policies.factory import make_pre_post_processors

    torch.manual_seed(0)
    feats = {k: PolicyFeature(FeatureType[t], shape) for k, (t, shape) in inputs.items()}
    config = ACTConfig(input_features=feats, output_features={"action": PolicyFeature(FeatureType.ACTION, (6,))},
                       chunk_size=4, n_action_steps=4, dim_model=32, n_heads=2, dim_feedforward=64,
                       n_encoder_layers=1, n_decoder_layers=1, n_vae_encoder_layers=1, latent_dim=8,
                       pretrained_backbone_weights=None, device="cpu")
    policy = ACTPolicy(config)
    # LeRobot units: degrees around 0 for the body joints, 0..100 for the gripper.
    units = {"mean": torch.tensor([0.0, 0, 0, 0, 0, 50]), "std": torch.tensor([30.0, 30, 30, 30, 60, 20])}
    stats: dict[str, dict[str, Any]] = {"observation.state": units, "action": units}
    if action_mean is not None:
        stats["action"] = {"mean": torch.tensor(action_mean, dtype=torch.float32), "std": torch.full((6,), 1e-4)}
    for key, (kind, shape) in inputs.items():
        if kind == "VISUAL":
            stats[key] = {"mean": torch.full((3, 1, 1), 0.5), "std": torch.full((3, 1, 1), 0.25)}
        elif kind == "ENV":
            stats[key] = {"mean": torch.zeros(shape), "std": torch.ones(shape)}
        elif kind == "STATE":
            stats.setdefault(key, units)
    pre, post = make_pre_post_processors(config, dataset_stats=stats)
    policy.save_pretrained(root)
    pre.save_pretrained(root)
    post.save_pretrained(root)
    return root
