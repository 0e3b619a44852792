"""Ingest benchmark (issue 15): stop -> the episode's frames in the dataset, with `teleop-flywheel
ingest` running beside the recorder (target: <= 2x the episode's convert time, <= 15 s for a 60 s
one-camera episode on 2 cores).

A 60 s episode (one 640x480 camera at 30 fps, joints at 100 Hz, a scripted hand reaching and
placing; `testing/synthetic_session`) is written as the recorder writes it, then appears in the
watched folder the way a stopped episode does — closed, with its `verdict.json` and the
operator's keep — while `teleop-flywheel ingest --poll 1` (its own process, nice 10, one worker)
is watching a dataset that already holds one episode. Measured from that instant:

- **frames in the dataset**: info.json's total_frames includes the episode (the append committed);
- **refreshed**: ingest's state file lists the bag (validation record, card, sample weights and
  audit page rewritten).

Baseline in the same run: `convert()` of the same bag into a copy of the same dataset, one worker
(the episode's convert time). The recorder's own stop -> verdict time is `bench/verdict.py`'s
(read from `bench/results/verdict.json` when present): stop -> dataset = verdict + the above.

Usage: `python bench/ingest.py [--seconds 60] [--out bench/results/ingest.json]`
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parent.parent))


def _frames(ds: Path) -> int:
    try:
        return int(json.loads((ds / "meta" / "info.json").read_text())["total_frames"])
    except (OSError, ValueError, KeyError):
        return -1


def main() -> int:
    from teleop_flywheel.data import convert as conv
    from teleop_flywheel.recording.verdict import KEEP, mark_decision, verdict_doc, write_verdict
    from teleop_flywheel.testing.synthetic_session import SessionSpec, write_session

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--width", type=int, default=640)
    parser.add_argument("--height", type=int, default=480)
    parser.add_argument("--out", type=Path, default=HERE.parent / "results" / "ingest.json")
    args = parser.parse_args()
    load_before = os.getloadavg()
    result: dict[str, Any] = {"episode_s": args.seconds, "camera": f"{args.width}x{args.height} JPEG q90 @ 30 fps",
                              "cpus": os.cpu_count(), "codec": "libsvtav1"}
    with tempfile.TemporaryDirectory(prefix="bench_ingest_") as tmp:
        root = Path(tmp)
        # The dataset's first episode has the same camera set and size: the episode appends to it, not to a
        # sibling dataset of its own camera set.
        seed_bag = write_session(root / "first" / "seed_ep", SessionSpec(
            duration_s=5.0, stamp_clock="ros", motion="reach", seed=1, width=args.width, height=args.height,
            cameras=("front",))).bag
        base = root / "base"
        conv.convert([seed_bag], base, workers=1, progress=False)
        spec = SessionSpec(duration_s=args.seconds, stamp_clock="ros", motion="reach", seed=2, width=args.width,
                           height=args.height, cameras=("front",))
        episode = write_session(root / "incoming" / "episode_60s", spec).bag
        doc = verdict_doc(episode.name, {"report": {"episode_id": "bench", "reasons": []}, "seconds": 0.0})
        write_verdict(episode, doc)
        mark_decision(episode, KEEP)

        ref = root / "ref"
        shutil.copytree(base, ref)
        t = time.perf_counter()
        res = conv.convert([episode], ref, workers=1, progress=False)
        result["convert_s"] = round(time.perf_counter() - t, 2)
        result["frames"] = _frames(ref) - _frames(base)
        assert res.converted and result["frames"] > 0, (res, result)  # appended to this dataset, not a sibling

        watch, ds = root / "bags", root / "ds"
        watch.mkdir()
        shutil.copytree(base, ds)
        before = _frames(ds)
        proc = subprocess.Popen([sys.executable, "-m", "teleop_flywheel.cli", "ingest", str(watch), "--dataset", str(ds),
                                 "--poll", "1", "--grace", "30"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.extend(proc.stdout or []), daemon=True)
        reader.start()
        try:
            deadline = time.monotonic() + 300  # imports done and the first look taken, however loaded the machine
            while not any("watching" in line for line in lines) and time.monotonic() < deadline:
                time.sleep(0.1)
            time.sleep(1.5)  # one poll period: it is looking at the empty folder when the episode appears
            t0 = time.monotonic()
            os.rename(episode, watch / episode.name)  # the stopped, judged and kept episode appears
            state = ds.with_name(ds.name + ".ingest.json")
            t_frames = t_done = None
            while time.monotonic() - t0 < 600 and t_done is None:
                if t_frames is None and _frames(ds) > before:
                    t_frames = time.monotonic() - t0
                if state.is_file() and episode.name in state.read_text():  # taken (and refreshed)
                    t_done = time.monotonic() - t0
                time.sleep(0.05)
        finally:
            proc.terminate()
            proc.wait(60)
            reader.join(10)
        result["ingest_log"] = [line.rstrip() for line in lines[-6:]]
        result["stop_to_frames_s"] = None if t_frames is None else round(t_frames, 2)
        result["stop_to_refreshed_s"] = None if t_done is None else round(t_done, 2)
    if result["stop_to_frames_s"] is not None:
        result["ratio_to_convert"] = round(result["stop_to_frames_s"] / result["convert_s"], 2)
    verdict = HERE.parent / "results" / "verdict.json"
    if verdict.is_file():
        v = json.loads(verdict.read_text()).get("idle", {})
        result["verdict_s_from_bench_verdict"] = v.get("stop_to_verdict_s")
        if v.get("stop_to_verdict_s") is not None and result["stop_to_frames_s"] is not None:
            result["stop_to_frames_with_verdict_s"] = round(v["stop_to_verdict_s"] + result["stop_to_frames_s"], 2)
    result["targets"] = {"ratio_to_convert": "<= 2", "stop_to_frames_s": "<= 15 (60 s, one camera, 2 cores)"}
    result["load_average_before"], result["load_average_after"] = load_before, os.getloadavg()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
