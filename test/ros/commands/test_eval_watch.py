"""`teleop-flywheel eval watch`: a checkpoint that appears is evaluated unattended in the simulator.

Where LeRobot is installed, a tiny randomly initialised ACT checkpoint (LeRobot's own factories and
`save_pretrained`, one camera, the follower state) is put where `train` writes them; `eval watch
--once` runs it against the scripted incumbent on the simulated rig (2 conditions × 2 trials,
short time limits: a CI budget), the policy node tagging its commands with the checkpoint's id,
and the table with N goes to lineage (`lineage which`) and the HTML index. Elsewhere that test is
skipped with the reason; the argument checks always run.
"""
from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml
from support.cli import run_cli
from support.lerobot_act import NEEDS_LEROBOT, save_act

from teleop_flywheel.core.bag_topics import POLICY_COMMAND, POLICY_INFERENCE
from teleop_flywheel.data.provenance.lineage import Registry
from teleop_flywheel.evaluation.report import follower_poses, read_trial
from teleop_flywheel.evaluation.watch import slug
from teleop_flywheel.policies.lerobot_checkpoint import default_checkpoint_id
from teleop_flywheel.recording.mcap.reader import open_bag

POSE = [0.2, -0.2, 0.3, 0.1, 0.2, 0.5]
STARTS = {"near": [0.45, -0.2, 0.3, 0.1, 0.2, 0.5], "far": [-0.2, 0.1, 0.0, 0.3, -0.2, 0.3]}  # both outside the check
W, H = 256, 192  # the smallest 4:3 frame the synthetic camera's timecode fits in


def _cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "teleop_flywheel.cli", *args], text=True, capture_output=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def _protocol(tmp_path: Path) -> Path:
    waypoints = tmp_path / "incumbent.yaml"
    waypoints.write_text(yaml.safe_dump({"waypoints": [POSE], "move_s": 0.6}))
    path = tmp_path / "eval.yaml"
    path.write_text(yaml.safe_dump({
        "format": "teleop_flywheel.eval_protocol/1", "name": "watch-ci", "task": "reach the place pose",
        "checkpoints": [{"id": "scripted-incumbent", "policy": "scripted", "policy_args": str(waypoints)}],
        "trials_per_condition": 2, "time_limit_s": 3,
        "success": {"criterion": "ends at the place pose",
                    "machine_check": {"final_pose": POSE, "tolerance_rad": 0.15}},
        "conditions": [{"name": "near", "sim": {"start_pose": STARTS["near"]}},
                       {"name": "far", "sim": {"start_pose": STARTS["far"], "camera_latency_ms": 30,
                                               "joint_noise_rad": 0.002}}]}))
    return path


def test_watch_arguments_are_checked_before_anything_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # In this process (each command process would import the stack again): nothing here starts a session.
    proto = _protocol(tmp_path)
    code, _out, err = run_cli(capsys, "eval", "watch", str(tmp_path / "nope"), "--protocol", str(proto))
    assert code == 2 and "eval watch: error:" in err
    assert re.search(r"no such folder, \S*/nope", err)
    unjudged = tmp_path / "unjudged.yaml"
    data = yaml.safe_load(proto.read_text())
    data["success"] = {"criterion": "a person says so"}
    unjudged.write_text(yaml.safe_dump(data))
    code, _out, err = run_cli(capsys, "eval", "watch", str(tmp_path), "--protocol", str(unjudged))
    assert code == 2 and "success.machine_check is needed" in err and "unjudged.yaml" in err
    empty = tmp_path / "empty"
    empty.mkdir()
    code, out, _err = run_cli(capsys, "eval", "watch", str(empty), "--protocol", str(proto), "--once",
                              "--registry", str(tmp_path / "lineage.json"))
    assert code == 0 and "nothing to evaluate" in out


@NEEDS_LEROBOT
def test_watch_once_evaluates_a_new_act_checkpoint_unattended_in_the_simulator(tmp_path: Path) -> None:
    checkpoints = tmp_path / "outputs" / "train"
    ckpt = save_act(checkpoints / "act_tiny" / "checkpoints" / "000002" / "pretrained_model",
                    {"observation.state": ("STATE", (6,)), "observation.images.front": ("VISUAL", (3, H, W))})
    ckpt_id = default_checkpoint_id(ckpt)
    assert ckpt_id.startswith("lerobot:act_tiny-000002:")
    params = tmp_path / "camera.yaml"
    params.write_text(yaml.safe_dump({"camera_front": {"ros__parameters": {"width": W, "height": H}}}))
    registry, out = tmp_path / "lineage.json", tmp_path / "watch"
    t0 = time.monotonic()
    res = _cli("eval", "watch", str(checkpoints), "--protocol", str(_protocol(tmp_path)), "--once", "--out", str(out),
               "--registry", str(registry), "--param-file", str(params))
    took = time.monotonic() - t0
    assert res.returncode in (0, 1), res.stderr[-3000:]
    assert f"evaluating {ckpt_id}" in res.stdout and "8/8 trials recorded" in res.stdout, res.stderr[-3000:]
    # The walk's bags: the candidate's commands tagged with its id, its inference time recorded.
    bags = sorted(p for p in (out / slug(ckpt_id) / "bags").iterdir() if p.is_dir()
                  and p.name != "discarded")
    trials = [read_trial(b) for b in bags]
    assert sorted((t.checkpoint, t.condition) for t in trials) == sorted(
        (ck, c) for ck in ("scripted-incumbent", ckpt_id) for c in STARTS for _ in range(2))
    inference_ms: list[float] = []
    for b, t in zip(bags, trials, strict=True):
        bag = open_bag(b)
        assert set(bag.joint_state(POLICY_COMMAND).frame_ids) == {t.checkpoint}
        first, last = follower_poses(b)
        assert max(abs(x - y) for x, y in zip(first, STARTS[t.condition], strict=True)) < 0.1  # gravity sags
        assert bag.episode.extra["machine_check"].startswith("pass" if t.outcome == "success" else "fail")
        if t.checkpoint == ckpt_id:
            inf = bag.joint_state(POLICY_INFERENCE)
            inference_ms += list(inf.position[:, inf.names.index("inference_ms")])
    assert inference_ms
    print(f"tiny ACT ({W}x{H} camera) inference on CPU: p50 {np.percentile(inference_ms, 50):.1f} ms, "
          f"p99 {np.percentile(inference_ms, 99):.1f} ms over {len(inference_ms)} actions; "
          f"eval watch took {took:.0f} s")
    # The table with N, in lineage and the index.
    figures = Registry.load(registry).evaluations[ckpt_id][0]
    assert {(c["checkpoint"], c["condition"], c["n"], c["planned"]) for c in figures["cells"]} == {
        (ck, c, 2, 2) for ck in ("scripted-incumbent", ckpt_id) for c in STARTS}
    assert figures["incumbent"] == "scripted-incumbent" and figures["comparisons"]
    assert (res.returncode == 1) == figures["flagged"]
    assert (out / "index.html").is_file() and ckpt_id in (out / "index.html").read_text()
    which = _cli("lineage", "--registry", str(registry), "which", ckpt_id)
    assert which.returncode == 0 and "NOT REGISTERED" in which.stdout
    assert re.search(rf"{re.escape(ckpt_id)}\s+near\s+N=2", which.stdout), which.stdout
    # Evaluated once: the next look has nothing to do.
    again = _cli("eval", "watch", str(checkpoints), "--protocol", str(_protocol(tmp_path)), "--once", "--out", str(out),
                 "--registry", str(registry))
    assert again.returncode == 0 and "nothing to evaluate" in again.stdout
