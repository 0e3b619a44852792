"""Loader benchmark: can LeRobot's DataLoader feed an ACT training step from our video, or does the step wait?

The seeds' "a fine-tune that is 70 % idle waiting on decode", measured. One set of synthetic episodes
(`synthetic_session`, one 640×480 camera at 30 fps) is converted three ways:
- `av1`: the converter's default (libsvtav1, preset `SVT_PRESET`, g=2, crf 30): what `convert` writes;
- `h264`: `convert --codec h264`;
- `av1_224`: `manifest materialize --resolution 224x224` of the `av1` dataset (re-encoded once at a
  training resolution).
For each form, in the same run and process (LeRobot 0.4.4, `video_backend="pyav"`, CPU):
- loader alone: samples/s that `DataLoader(batch_size=8, num_workers=2, shuffle=True)` delivers
  (ACT's action chunk as `delta_timestamps`, one frame per sample), after the workers' first batch;
- step alone: samples/s an ACT training step (forward, backward, AdamW; resnet18 backbone with no
  pretrained weights) consumes on one cached batch: the floor the loader must beat;
- the two together: the share of a training loop's time spent waiting in `next(loader)`.
The form to prefer is the one whose training loop waits least; a ratio loader/step ≥ 1 means the
step never waits on decode (on this 2-core machine the workers and the step share the cores).

Run with an interpreter that has LeRobot: `/path/to/lerobot-venv/bin/python bench/loader.py
[--episodes 4] [--seconds 30] [--batches 30] [--steps 4] [--out bench/results/loader.json]`.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from lerobot_bench import require_lerobot
from result_file import RESULTS, write_result

from teleop_flywheel.cli import main as cli
from teleop_flywheel.data.convert.converter import convert
from teleop_flywheel.data.lerobot import v3_layout
from teleop_flywheel.data.lerobot.commit import pinned
from teleop_flywheel.testing.synthetic_session import SessionSpec, write_session

BATCH = 8
WORKERS = 2


def build_forms(tmp: Path, episodes: int, seconds: float) -> dict[str, Path]:
    bags = []
    for i in range(episodes):
        bags.append(tmp / "bags" / f"episode_{i}")
        write_session(bags[-1], SessionSpec(duration_s=seconds, width=640, height=480, seed=i, motion="reach"))
    forms = {"av1": tmp / "av1", "h264": tmp / "h264", "av1_224": tmp / "av1_224"}
    for name, codec in (("av1", "libsvtav1"), ("h264", "h264")):
        res = convert(bags, forms[name], codec=codec, workers=1, progress=False)
        done = sum(len(ids) for ids in res.converted.values())
        if done != episodes:
            raise SystemExit(f"bench/loader.py: {name}: converted {done} of {episodes} episodes")
    manifest = tmp / "manifest.json"
    for argv in (["manifest", "create", str(forms["av1"]), "--out", str(manifest)],
                 ["manifest", "materialize", str(manifest), str(forms["av1_224"]), "--resolution", "224x224"]):
        if cli(argv) != 0:
            raise SystemExit(f"bench/loader.py: teleop-flywheel {' '.join(argv)} failed")
    return forms


def act_setup(root: Path) -> tuple[Any, Any, Any, Any]:
    """(dataset with ACT's action chunks, policy, preprocessor, optimizer) for the dataset at `root`."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset, LeRobotDatasetMetadata
    from lerobot.policies.act.configuration_act import ACTConfig
    from lerobot.policies.factory import make_policy, make_pre_post_processors

    meta = LeRobotDatasetMetadata("bench/loader", root=root)
    cfg = ACTConfig(pretrained_backbone_weights=None, device="cpu", push_to_hub=False)
    policy = make_policy(cfg, ds_meta=meta)
    pre, _post = make_pre_post_processors(cfg, dataset_stats=meta.stats)
    chunk = {"action": [i / meta.fps for i in range(cfg.chunk_size)]}
    ds = LeRobotDataset("bench/loader", root=root, delta_timestamps=chunk, video_backend="pyav")
    optimizer = cfg.get_optimizer_preset().build(policy.get_optim_params())
    return ds, policy, pre, optimizer


def step(policy: Any, pre: Any, optimizer: Any, batch: dict[str, Any]) -> None:
    policy.train()
    loss, _ = policy.forward(pre(batch))
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()


def measure(root: Path, batches: int, steps: int) -> dict[str, Any]:
    import torch

    ds, policy, pre, optimizer = act_setup(root)
    loader = torch.utils.data.DataLoader(ds, batch_size=BATCH, num_workers=WORKERS, shuffle=True,
                                         persistent_workers=True, generator=torch.Generator().manual_seed(0))
    it = iter(loader)
    t = time.perf_counter()
    first = next(it)
    first_batch_s = time.perf_counter() - t
    t = time.perf_counter()
    for _ in range(batches):
        next(it)
    loader_s = time.perf_counter() - t

    step(policy, pre, optimizer, first)  # allocations and autograd graph: not a steady-state step
    t = time.perf_counter()
    for _ in range(steps):
        step(policy, pre, optimizer, first)
    step_s = (time.perf_counter() - t) / steps

    waited = computed = 0.0
    for _ in range(steps):
        t0 = time.perf_counter()
        batch = next(it)
        t1 = time.perf_counter()
        step(policy, pre, optimizer, batch)
        t2 = time.perf_counter()
        waited += t1 - t0
        computed += t2 - t1
    image = next(k for k in first if k.startswith("observation.images."))
    loader_sps = batches * BATCH / loader_s
    step_sps = BATCH / step_s
    return {
        "frames": ds.num_frames,
        "image_shape": list(first[image].shape[1:]),
        "first_batch_s": round(first_batch_s, 2),
        "loader_samples_per_s": round(loader_sps, 1),
        "step_s": round(step_s, 3),
        "step_samples_per_s": round(step_sps, 1),
        "ratio_loader_to_step": round(loader_sps / step_sps, 2),
        "training_loop_waiting_share": round(waited / (waited + computed), 3),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--batches", type=int, default=30, help="loader batches timed after the first")
    ap.add_argument("--steps", type=int, default=4, help="training steps timed (alone, then with the loader)")
    ap.add_argument("--out", default=str(RESULTS / "loader.json"))
    args = ap.parse_args()
    if not require_lerobot("bench/loader.py"):
        return 2
    with tempfile.TemporaryDirectory(prefix="bench-loader-") as tmp_s:
        forms = build_forms(Path(tmp_s), args.episodes, args.seconds)
        results = {}
        for name, root in forms.items():
            with pinned(root) as files:  # LeRobot reads one version, leased while it reads
                results[name] = measure(files, args.batches, args.steps)
    best = min(results, key=lambda k: results[k]["training_loop_waiting_share"])
    out = {
        "batch_size": BATCH,
        "num_workers": WORKERS,
        "video_backend": "pyav",
        "policy": "ACT (resnet18, no pretrained weights), CPU",
        "camera": "640x480 @ 30 fps, one camera",
        "av1": f"libsvtav1 preset {v3_layout.svt_preset()}",
        "cpus": os.cpu_count(),
        "forms": results,
        "least_waiting": best,
        "target": "the training step never waits on decode (loader/step >= 1, waiting share ~0)",
    }
    write_result(args.out, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
