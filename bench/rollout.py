"""Rollout benchmark: a LeRobot ACT checkpoint drives the simulated rig on the CPU while it records.

What the issue asks of the rig with a learned policy: its inference time per action, and episodes
the validator passes, with no FRAME_GAP caused by the policy's load. Measured in one run:
- the candidate: an ACT checkpoint at LeRobot's default size (ResNet-18 backbone, no pretrained
  weights, chunk 100, dim 512; random weights: the cost of inference does not depend on them),
  reading the follower state and one 640×480 camera, made with LeRobot's own factories and
  `save_pretrained`;
- the baseline: the scripted policy in the same session (`eval watch` runs the protocol's first
  checkpoint as the incumbent, trials interleaved), so both see the same machine.
`eval watch --once` walks the protocol unattended (`--trials` per checkpoint, `--seconds` each);
then every trial bag is read: `/policy/inference` (inference_ms per action, `late` when it took
longer than the policy's period and the action held) and the validator's verdicts per checkpoint.

Run with an interpreter that has LeRobot: `/path/to/lerobot-venv/bin/python bench/rollout.py
[--trials 6] [--seconds 10] [--out bench/results/rollout.json]`.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from teleop_flywheel.core.bag_topics import POLICY_INFERENCE
from teleop_flywheel.evaluation.report import read_trial
from teleop_flywheel.recording.mcap.reader import open_bag

W, H = 640, 480
POSE = [0.2, -0.2, 0.3, 0.1, 0.2, 0.5]
START = [0.45, -0.2, 0.3, 0.1, 0.2, 0.5]


def save_default_act(root: Path) -> Path:
    """LeRobot's default ACT on the follower state and one W×H camera, saved with its processors."""
    import torch
    from lerobot.configs.types import FeatureType, PolicyFeature
    from lerobot.policies.act.configuration_act import ACTConfig
    from lerobot.policies.act.modeling_act import ACTPolicy
    from lerobot.policies.factory import make_pre_post_processors

    torch.manual_seed(0)
    config = ACTConfig(input_features={"observation.state": PolicyFeature(FeatureType.STATE, (6,)),
                                       "observation.images.front": PolicyFeature(FeatureType.VISUAL, (3, H, W))},
                       output_features={"action": PolicyFeature(FeatureType.ACTION, (6,))},
                       pretrained_backbone_weights=None, device="cpu")
    units = {"mean": torch.tensor([0.0, 0, 0, 0, 0, 50]), "std": torch.tensor([30.0, 30, 30, 30, 60, 20])}
    image = {"mean": torch.full((3, 1, 1), 0.5), "std": torch.full((3, 1, 1), 0.25)}
    pre, post = make_pre_post_processors(config, dataset_stats={"observation.state": units, "action": units,
                                                               "observation.images.front": image})
    policy = ACTPolicy(config)
    for part in (policy, pre, post):
        part.save_pretrained(root)
    return root


def protocol(tmp: Path, trials: int, seconds: float) -> Path:
    waypoints = tmp / "scripted.yaml"
    waypoints.write_text(yaml.safe_dump({"waypoints": [POSE], "move_s": 0.6}))
    path = tmp / "eval.yaml"
    path.write_text(yaml.safe_dump({
        "format": "teleop_flywheel.eval_protocol/1", "name": "bench-rollout", "task": "reach the place pose",
        "checkpoints": [{"id": "scripted", "policy": "scripted", "policy_args": str(waypoints)}],
        "trials_per_condition": trials, "time_limit_s": seconds,
        "success": {"criterion": "ends at the place pose",
                    "machine_check": {"final_pose": POSE, "tolerance_rad": 0.15}},
        "conditions": [{"name": "near", "sim": {"start_pose": START}}]}))
    return path


def summarise(bags: list[Path], verdicts: dict[str, dict[str, Any]]) -> dict[str, Any]:
    inference: list[float] = []
    late = 0
    codes: Counter[str] = Counter()
    passed = 0
    for bag_dir in bags:
        inf = open_bag(bag_dir).joint_state(POLICY_INFERENCE)
        inference += list(inf.position[:, inf.names.index("inference_ms")])
        late += int(inf.position[:, inf.names.index("late")].sum())
        verdict = verdicts[bag_dir.name]
        passed += bool(verdict["passed"])
        codes.update(verdict["codes"])
    x = np.asarray(inference)
    chunks = x[x > 5.0]  # the actions that ran the network; the rest pop the queued chunk
    return {
        "trials": len(bags), "actions": len(x), "late_actions": late,
        "inference_ms": {"p50": round(float(np.percentile(x, 50)), 2), "p99": round(float(np.percentile(x, 99)), 1),
                         "max": round(float(x.max()), 1)},
        "network_inferences": len(chunks),
        "network_inference_ms": ({"p50": round(float(np.percentile(chunks, 50)), 1),
                                  "p99": round(float(np.percentile(chunks, 99)), 1)} if len(chunks) else None),
        "passed": passed, "rejection_codes": dict(codes), "frame_gaps": codes.get("FRAME_GAP", 0),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=6, help="trials per checkpoint")
    ap.add_argument("--seconds", type=float, default=10.0, help="each trial's time limit")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "rollout.json"))
    args = ap.parse_args()
    try:
        import lerobot  # noqa: F401
    except ImportError:
        print("bench/rollout.py: needs LeRobot 0.4.x (run it with a LeRobot venv's python)", file=sys.stderr)
        return 2
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    with tempfile.TemporaryDirectory(prefix="bench-rollout-") as tmp_s:
        tmp = Path(tmp_s)
        save_default_act(tmp / "checkpoints" / "act_default" / "pretrained_model")
        params = tmp / "camera.yaml"
        params.write_text(yaml.safe_dump({"camera_front": {"ros__parameters": {"width": W, "height": H}}}))
        out = tmp / "watch"
        load_before = os.getloadavg()
        res = subprocess.run([sys.executable, "-m", "teleop_flywheel.cli", "eval", "watch", str(tmp / "checkpoints"),
                              "--protocol", str(protocol(tmp, args.trials, args.seconds)), "--once", "--out", str(out),
                              "--registry", str(tmp / "lineage.json"), "--param-file", str(params)],
                             capture_output=True, text=True, timeout=3600, stdin=subprocess.DEVNULL)
        if res.returncode not in (0, 1):
            print(res.stdout[-3000:], res.stderr[-3000:], file=sys.stderr)
            return 1
        bags = sorted(p for d in out.iterdir() if (d / "bags").is_dir()
                      for p in (d / "bags").iterdir() if p.is_dir() and p.name != "discarded")
        validation = subprocess.run([sys.executable, "-m", "teleop_flywheel.cli", "validate", *map(str, bags),
                                     "--json"], capture_output=True, text=True, timeout=1200)
        verdicts = {Path(e["path"]).name: e for e in json.loads(validation.stdout)["episodes"]}
        by_checkpoint: dict[str, list[Path]] = {}
        for bag_dir in bags:
            by_checkpoint.setdefault(read_trial(bag_dir).checkpoint, []).append(bag_dir)
        results = {ck: summarise(b, verdicts) for ck, b in sorted(by_checkpoint.items())}
    candidate = next(k for k in results if k != "scripted")
    act = results[candidate]
    result = {
        "policy": "ACT at LeRobot's default size (ResNet-18, chunk 100, dim 512), random weights, CPU",
        "camera": f"{W}x{H}", "trial_s": args.seconds, "cpus": os.cpu_count(),
        "load_average_before": [round(x, 1) for x in load_before],
        "act": act, "scripted": results["scripted"], "act_checkpoint": candidate,
        "met": act["passed"] == act["trials"] and act["frame_gaps"] <= results["scripted"]["frame_gaps"],
        "target": "every ACT trial's episode passes the validator, no more FRAME_GAP than the scripted policy's",
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
