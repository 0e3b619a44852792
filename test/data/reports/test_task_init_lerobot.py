"""`task init` on a dataset recorded by LeRobot's own `lerobot-record` (SO-101, v3.0): the
template's start boxes and duration are that dataset's audit.

The arms are this project's simulated SO-101 pair on pseudo-terminals (`sim-bus --human`: a
simulated hand moves the leader), calibrated with `teleop-flywheel calibrate`, then LeRobot's
recorder drives them through its own SO-101 drivers and writes the dataset. Runs where LeRobot is
installed (its separate venv); skipped elsewhere.
"""
from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from teleop_flywheel.cli import main as cli_main
from teleop_flywheel.core.calibration import load_calibration
from teleop_flywheel.core.so101 import JOINT_NAMES
from teleop_flywheel.core.task_spec import load_task_spec
from teleop_flywheel.data.lerobot.dataset import LeRobotDataset
from teleop_flywheel.data.reports.audit import audit
from teleop_flywheel.data.reports.task_init import DURATION_MARGIN

pytest.importorskip("lerobot.scripts.lerobot_record", reason="LeRobot is not installed here (separate venv)")

CLI = [sys.executable, "-m", "teleop_flywheel.cli"]


def realtime() -> list[str]:
    """`chrt -f 10` where permitted: LeRobot's driver gives a servo one try of a few milliseconds to
    answer, so its recorder must not be starved by whatever else loads the machine (the simulated
    servos already run SCHED_FIFO, as a real arm's do not need a CPU at all)."""
    probe = subprocess.run(["chrt", "-f", "10", "true"], capture_output=True) if shutil.which("chrt") else None
    return ["chrt", "-f", "10"] if probe is not None and probe.returncode == 0 else []


def test_task_init_on_a_lerobot_record_dataset(tmp_path: Path) -> None:
    sims, cal_dir = [], tmp_path / "calibration"
    try:
        for arm in ("follower", "leader"):
            # Its log to a file: a pipe nobody reads would fill and stall the simulated servos.
            with open(tmp_path / f"{arm}.log", "w") as log:
                sims.append(subprocess.Popen([*CLI, "sim-bus", "--arm", arm, "--human", "--link", str(tmp_path / arm)],
                                             stdout=log, stderr=subprocess.STDOUT))
            deadline = time.monotonic() + 30
            while not (tmp_path / arm).exists():  # the link appears once the pty serves
                assert sims[-1].poll() is None and time.monotonic() < deadline, (tmp_path / f"{arm}.log").read_text()
                time.sleep(0.05)
            kind = "robots/so101_follower" if arm == "follower" else "teleoperators/so101_leader"
            (cal_dir / kind).mkdir(parents=True)
            done = subprocess.run([*CLI, "calibrate", "--port", str(tmp_path / arm), "--arm", arm,
                                   "--out", str(tmp_path / f"{arm}.yaml"),
                                   "--lerobot-json", str(cal_dir / kind / f"{arm}.json"), "--non-interactive", "3"],
                                  capture_output=True, text=True, timeout=120)
            assert done.returncode == 0, done.stderr
        record = subprocess.run(
            [*realtime(), sys.executable, "-m", "lerobot.scripts.lerobot_record",
             "--robot.type=so101_follower", f"--robot.port={tmp_path / 'follower'}", "--robot.id=follower",
             f"--robot.calibration_dir={cal_dir / 'robots/so101_follower'}",
             "--teleop.type=so101_leader", f"--teleop.port={tmp_path / 'leader'}", "--teleop.id=leader",
             f"--teleop.calibration_dir={cal_dir / 'teleoperators/so101_leader'}",
             "--dataset.repo_id=local/brick", f"--dataset.root={tmp_path / 'ds'}",
             "--dataset.single_task=pick the brick", "--dataset.num_episodes=2", "--dataset.episode_time_s=3",
             "--dataset.reset_time_s=1", "--dataset.fps=30", "--dataset.push_to_hub=false", "--display_data=false",
             "--play_sounds=false"],
            capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
            env={**os.environ, "HF_HUB_OFFLINE": "1"})
        assert record.returncode == 0, record.stderr[-2000:]
    finally:
        for sim in sims:
            sim.terminate()
            sim.wait(10)

    out = tmp_path / "task.yaml"
    assert cli_main(["task", "init", str(tmp_path / "ds"), "--out", str(out),
                     "--calibration", str(tmp_path / "follower.yaml")]) == 0
    spec = load_task_spec(out)
    report = audit(LeRobotDataset.open(tmp_path / "ds"))
    assert report.episodes == 2 and spec.instruction == "pick the brick"
    # LeRobot's recorder wrote degrees (and 0..100 for the gripper); the template is in radians.
    starts = load_calibration(tmp_path / "follower.yaml").lerobot_to_rad(np.asarray(report.start_states))
    assert spec.start_region is not None and spec.start_region.box is not None
    for j, name in enumerate(JOINT_NAMES):
        lo, hi = float(starts[:, j].min()), float(starts[:, j].max())
        assert spec.start_region.box.bounds[name] == pytest.approx((lo, hi), abs=1e-6)
    spread = {s.joint.removesuffix(".pos"): s for s in report.start_spread}
    assert spec.start_region.box.bounds["elbow_flex"][0] == pytest.approx(math.radians(spread["elbow_flex"].min),
                                                                          abs=1e-6)
    median = report.length_seconds["median"]
    assert spec.duration_s == pytest.approx((median / DURATION_MARGIN, median * DURATION_MARGIN), abs=1e-3)
