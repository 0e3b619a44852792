"""Audit time from numeric columns: the seed's 50 episodes / ~12,000 frames, and 1,000,000 frames.

Targets (SPEC §9): < 1 s and < 10 s. Each time is also given as a ratio to a floor measured in the
same run: reading the same columns with pyarrow alone (what any audit must at least pay).
Run: python bench/audit.py [--repeat 3]  -> bench/results/audit.json
"""
from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import pyarrow.parquet as pq

from teleop_flywheel.data.lerobot.dataset import LeRobotDataset
from teleop_flywheel.data.reports.audit import audit
from teleop_flywheel.testing.synthetic_dataset import SyntheticSpec, write

CASES = {
    "seed_50_episodes": (SyntheticSpec(episodes=50, min_length=183, max_length=306, seed=0), 1.0),
    "1M_frames": (SyntheticSpec(episodes=4000, min_length=200, max_length=300, seed=1), 10.0),
}
COLUMNS = ["episode_index", "observation.state", "action", "frame_index", "index"]


def best_of(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "audit.json")
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, (spec, target) in CASES.items():
            made = write(Path(tmp) / name, spec)
            files = sorted((made.root / "data").rglob("*.parquet"))
            floor = best_of(lambda files=files: [pq.read_table(f, columns=COLUMNS) for f in files], args.repeat)
            report = None

            def run(root: Path = made.root) -> None:
                nonlocal report
                report = audit(LeRobotDataset.open(root))

            seconds = best_of(run, args.repeat)
            cmd = [sys.executable, "-m", "teleop_flywheel.cli", "audit", str(made.root), "--json"]
            cli = best_of(partial(subprocess.run, cmd, check=True, capture_output=True), args.repeat)
            idle = best_of(lambda: subprocess.run([sys.executable, "-c", "import pandas, pyarrow.parquet"],
                                                  check=True), args.repeat)
            results[name] = {
                "episodes": report.episodes, "frames": report.frames, "audit_s": round(seconds, 4),
                "target_s": target, "meets_target": seconds < target,
                "pyarrow_read_floor_s": round(floor, 4), "ratio_to_read_floor": round(seconds / floor, 2),
                "cli_process_s": round(cli, 3), "python_pandas_startup_s": round(idle, 3),
            }
            print(f"{name}: {report.frames} frames, audit {seconds:.3f} s (target < {target:g} s), "
                  f"pyarrow read floor {floor:.3f} s, ratio {seconds / floor:.1f}x; whole CLI process {cli:.2f} s "
                  f"(of which interpreter + pandas/pyarrow import {idle:.2f} s)")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"benchmark": "audit", "machine": platform.platform(),
                                    "repeat": args.repeat, "results": results}, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
