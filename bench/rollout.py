"""Rollout benchmark: a LeRobot ACT checkpoint drives the simulated rig on the CPU while it records takeovers.

What the issue asks of the rig with a learned policy: its inference time per action, and episodes
the validator passes — takeovers included — with no FRAME_GAP caused by the policy's load. Measured
in one run:
- the candidate: an ACT checkpoint at LeRobot's default size (ResNet-18 backbone, no pretrained
  weights, chunk 100, dim 512; random weights: the cost of inference does not depend on them),
  reading the follower state and one camera at the policy's input size (`--input`, default
  224×224, `manifest materialize`'s training resolution) while the camera delivers `--camera`
  (default 640×480: the policy node scales each frame), on one torch thread (the `lerobot`
  plugin's default), made with LeRobot's own factories and `save_pretrained`;
- the baseline: the scripted policy in the same session (`eval watch` runs the protocol's first
  checkpoint as the incumbent, trials interleaved), so both see the same machine.
`eval watch --once` walks the protocol unattended: `--trials` per condition and checkpoint,
`--seconds` each, under two conditions — `policy` (the policy alone) and `takeover` (a scripted
operator presses the simulator's pedal at TAKEOVER_AT_S, labels the takeover, drives with the
simulated leader and hands back TAKEOVER_HOLD_S later). Then every trial bag is read: its
`/policy/inference` (inference_ms per action, `late` when it took longer than the policy's period
and the action held), its interventions and blend weight, and the validator's verdict.

Run with an interpreter that has LeRobot: `/path/to/lerobot-venv/bin/python bench/rollout.py
[--trials 3] [--seconds 10] [--input 224x224] [--camera 640x480] [--keep DIR]
[--out bench/results/rollout.json]`.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from lerobot_bench import require_lerobot
from result_file import RESULTS, load_average, write_result

from teleop_flywheel.core.bag_topics import POLICY_INFERENCE
from teleop_flywheel.evaluation.report import read_trial
from teleop_flywheel.recording.mcap.reader import open_bag

POSE = [0.2, -0.2, 0.3, 0.1, 0.2, 0.5]
START = [0.45, -0.2, 0.3, 0.1, 0.2, 0.5]
SCRIPTED_MOVE_S = 1.2  # the baseline reaches the pose and holds it: under the validator's 2 s of trailing dead air
TAKEOVER_AT_S, TAKEOVER_HOLD_S, TAKEOVER_LABEL = 3.0, 1.5, "wrong_grasp"
CONDITIONS = ("policy", "takeover")


def size(text: str) -> tuple[int, int]:
    w, _, h = text.partition("x")
    if not (w.isdigit() and h.isdigit()):
        raise argparse.ArgumentTypeError(f"{text!r}: give WIDTHxHEIGHT, e.g. 224x224")
    return int(w), int(h)


def save_default_act(root: Path, width: int, height: int) -> Path:
    """LeRobot's default ACT on the follower state and one width×height camera, saved with its processors."""
    import torch
    from lerobot.configs.types import FeatureType, PolicyFeature
    from lerobot.policies.act.configuration_act import ACTConfig
    from lerobot.policies.act.modeling_act import ACTPolicy
    from lerobot.policies.factory import make_pre_post_processors

    torch.manual_seed(0)
    config = ACTConfig(input_features={"observation.state": PolicyFeature(FeatureType.STATE, (6,)),
                                       "observation.images.front": PolicyFeature(FeatureType.VISUAL,
                                                                                 (3, height, width))},
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
    waypoints.write_text(yaml.safe_dump({"waypoints": [POSE], "move_s": SCRIPTED_MOVE_S}))
    takeover = {"at_s": TAKEOVER_AT_S, "hold_s": TAKEOVER_HOLD_S, "label": TAKEOVER_LABEL}
    path = tmp / "eval.yaml"
    path.write_text(yaml.safe_dump({
        "format": "teleop_flywheel.eval_protocol/1", "name": "bench-rollout", "task": "reach the place pose",
        "checkpoints": [{"id": "scripted", "policy": "scripted", "policy_args": str(waypoints)}],
        "trials_per_condition": trials, "time_limit_s": seconds, "interventions_allowed": True,
        "success": {"criterion": "ends at the place pose",
                    "machine_check": {"final_pose": POSE, "tolerance_rad": 0.15}},
        "conditions": [{"name": "policy", "sim": {"start_pose": START}},
                       {"name": "takeover", "sim": {"start_pose": START, "takeover": takeover}}]}))
    return path


def summarise(bags: list[Path], verdicts: dict[str, dict[str, Any]]) -> dict[str, Any]:
    inference: list[float] = []
    late = 0
    codes: Counter[str] = Counter()
    passed = interventions = took_over = took_over_passed = 0
    recorded_s = 0.0
    episodes: list[dict[str, Any]] = []
    for bag_dir in bags:
        bag, trial = open_bag(bag_dir), read_trial(bag_dir)
        inf = bag.joint_state(POLICY_INFERENCE)
        inference += list(inf.position[:, inf.names.index("inference_ms")])
        late += int(inf.position[:, inf.names.index("late")].sum())
        verdict = verdicts[bag_dir.name]
        passed += bool(verdict["passed"])
        codes.update(verdict["codes"])
        episodes.append({"bag": bag_dir.name, "condition": trial.condition, "outcome": trial.outcome,
                         "interventions": trial.interventions, "codes": verdict["codes"],
                         "frame_gaps": sorted({r["numbers"]["stream"] for r in verdict.get("reasons", [])
                                               if r["code"] == "FRAME_GAP" and "stream" in r.get("numbers", {})})})
        interventions += trial.interventions
        recorded_s += trial.cycle_s
        alpha = bag.authority().stream(["alpha"]).values[:, 0]
        if trial.interventions and alpha.max() > 0.5 and TAKEOVER_LABEL in trial.triggers:
            took_over += 1  # a labelled takeover, the blend weight recorded rising to the human
            took_over_passed += bool(verdict["passed"])
    x = np.asarray(inference)
    return {
        "trials": len(bags), "recorded_s": round(recorded_s, 1), "actions": len(x), "late_actions": late,
        "inference_ms": {"p50": round(float(np.percentile(x, 50)), 2), "p99": round(float(np.percentile(x, 99)), 1),
                         "max": round(float(x.max()), 1)} if len(x) else None,
        "passed": passed, "rejection_codes": dict(codes), "frame_gaps": codes.get("FRAME_GAP", 0),
        # the scripted trials end when their pose is held, the ACT's run to the limit: gaps per minute compare
        "frame_gap_episodes_per_min": round(60 * codes.get("FRAME_GAP", 0) / recorded_s, 2) if recorded_s else None,
        "interventions": interventions, "takeover_trials": took_over, "takeover_trials_passed": took_over_passed,
        "episodes": episodes,
    }


def walk_error(stderr: str) -> str:
    """Why the walk stopped: its own error line (`teleop-flywheel run: error: …`), else any error
    line, else the last line it printed."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    return next((line for line in lines if line.startswith("teleop-flywheel run: error:")),
                next((line for line in lines if ": error: " in line), lines[-1] if lines else ""))


def run(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    width, height = args.input
    save_default_act(tmp / "checkpoints" / "act_default" / "pretrained_model", width, height)
    params = tmp / "camera.yaml"
    params.write_text(yaml.safe_dump({"camera_front": {"ros__parameters": {"width": args.camera[0],
                                                                           "height": args.camera[1]}}}))
    out = tmp / "watch"
    load_before = load_average()
    t0 = time.monotonic()
    watch = subprocess.run([sys.executable, "-m", "teleop_flywheel.cli", "eval", "watch", str(tmp / "checkpoints"),
                            "--protocol", str(protocol(tmp, args.trials, args.seconds)), "--once", "--out", str(out),
                            "--registry", str(tmp / "lineage.json"), "--param-file", str(params)],
                           capture_output=True, text=True, timeout=3600, stdin=subprocess.DEVNULL)
    walk_s = time.monotonic() - t0
    (tmp / "eval_watch.log").write_text(watch.stdout + watch.stderr)
    load_after = load_average()
    bags = sorted(p for d in out.iterdir() if (d / "bags").is_dir()
                  for p in (d / "bags").iterdir() if p.is_dir() and p.name != "discarded") if out.is_dir() else []
    if not bags:
        raise SystemExit(f"bench/rollout.py: eval watch recorded nothing:\n{watch.stdout[-3000:]}\n"
                         f"{watch.stderr[-3000:]}")
    validation = subprocess.run([sys.executable, "-m", "teleop_flywheel.cli", "validate", *map(str, bags), "--json"],
                                capture_output=True, text=True, timeout=1200)
    verdicts = {Path(e["path"]).name: e for e in json.loads(validation.stdout)["episodes"]}
    by_checkpoint: dict[str, list[Path]] = {}
    for bag_dir in bags:
        by_checkpoint.setdefault(read_trial(bag_dir).checkpoint, []).append(bag_dir)
    results = {ck: summarise(b, verdicts) for ck, b in sorted(by_checkpoint.items())}
    candidate = next((k for k in results if k != "scripted"), "")
    planned = 2 * len(CONDITIONS) * args.trials
    act, scripted = results.get(candidate), results.get("scripted")
    complete = len(bags) == planned
    met = bool(complete and act and scripted and act["passed"] == act["trials"] and act["frame_gaps"] == 0
               and act["takeover_trials"] == args.trials)
    return {
        "policy": "ACT at LeRobot's default size (ResNet-18, chunk 100, dim 512), random weights, CPU",
        "policy_input": f"{width}x{height}", "camera": f"{args.camera[0]}x{args.camera[1]}",
        "torch_threads": 1, "trial_s": args.seconds, "trials_per_condition": args.trials,
        "conditions": {"policy": "the policy alone",
                       "takeover": f"pedal down at {TAKEOVER_AT_S:g} s, label {TAKEOVER_LABEL}, hand back "
                                   f"{TAKEOVER_HOLD_S:g} s later"},
        "cpus": os.cpu_count(), "load_average_before": load_before, "load_average_after": load_after,
        "walk": {"planned": planned, "recorded": len(bags), "complete": complete, "seconds": round(walk_s),
                 "error": "" if complete else walk_error(watch.stderr)},
        "act": act, "scripted": scripted, "act_checkpoint": candidate, "met": met,
        "target": "every ACT trial's episode passes the validator, takeovers included, with no FRAME_GAP",
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=3, help="trials per condition and checkpoint (default 3: 60 s "
                                                          "of ACT at --seconds 10)")
    ap.add_argument("--seconds", type=float, default=10.0, help="each trial's time limit")
    ap.add_argument("--input", type=size, default=(224, 224), help="the ACT's camera input, WxH (default 224x224)")
    ap.add_argument("--camera", type=size, default=(640, 480), help="what the camera delivers, WxH (default 640x480)")
    ap.add_argument("--keep", type=Path, help="keep the checkpoint, protocol and bags here (must not exist)")
    ap.add_argument("--out", default=str(RESULTS / "rollout.json"))
    args = ap.parse_args()
    if not require_lerobot("bench/rollout.py"):
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="bench-rollout-"))
    try:
        result = run(args, tmp)
    finally:
        if args.keep:
            shutil.move(tmp, args.keep)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    write_result(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
