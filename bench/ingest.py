"""Ingest benchmark: stop -> the episode's frames in the dataset, with `teleop-flywheel
ingest` running beside the recorder (target: <= 2x the episode's convert time, <= 15 s for a 60 s
one-camera episode on 2 cores).

A 60 s episode (one 640x480 camera at 30 fps, joints at 100 Hz, a scripted hand reaching and
placing; `testing/synthetic_session`) is written into the watched folder **in real time**, the way
the recorder writes it (`testing/growing_bag`: chunk by chunk at the pace of its messages, then the
footer and metadata.yaml), while `teleop-flywheel ingest --poll 1` (its own process, nice 10, one
worker) watches a dataset that already holds one episode. At the stop the recorder's own judge
(`ValidatorProcess` in a `VerdictKeeper`, as the recorder node runs them) validates the bag and
writes verdict.json, and the operator keeps it the moment the verdict is shown. Measured from the
stop (the episode's last message):

- **verdict**: verdict.json written (the console shows it);
- **frames in the dataset**: info.json's total_frames includes the episode (the append committed);
- **refreshed**: ingest's state file lists the bag (validation record, card, sample weights and
  audit page rewritten);
- and what ingest cost while the episode recorded: its process's CPU seconds (encoder threads
  included) over the recording.

Two variants in the same run, each with its own dataset: `pre-encode` (ingest's default: it encodes
the camera while the episode is recorded, `data/convert/preencode.py`) and `after-stop` (`--no-pre-encode`:
everything after the keep, ingest before this change). Baseline in the same run: `convert()` of
the same bag into a copy of the same dataset, one worker (the episode's convert time).

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

from result_file import write_result

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parent.parent))


def _frames(ds: Path) -> int:
    try:
        return int(json.loads((ds / "meta" / "info.json").read_text())["total_frames"])
    except (OSError, ValueError, KeyError):
        return -1


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds so far of a process and every process below it, threads and
    reaped children included: ingest encodes in a process of its own (the encoder process, forked
    from a forkserver that is ingest's child), whose CPU its own counters never hold. Not
    `cpu_accounting.TreeCPU`: it samples twice a second and leaves out reaped children, so the
    short-lived encoder processes went mostly uncounted (8.1 CPU-s against 17.7 over one episode)."""
    stats = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stats[int(entry.name)] = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue  # exited meanwhile
    below, frontier = {pid}, [pid]
    while frontier:
        parent = frontier.pop()
        for child, fields in stats.items():
            if int(fields[1]) == parent and child not in below:
                below.add(child)
                frontier.append(child)
    ticks = sum(sum(map(int, stats[p][11:15])) for p in below)  # utime, stime, cutime, cstime
    return ticks / os.sysconf("SC_CLK_TCK")


def _run_variant(source: Path, base: Path, root: Path, pre_encode: bool) -> dict[str, Any]:
    """One real-time episode into a watched folder; the times from its stop."""
    from teleop_flywheel.recording.recorder.verdict import VerdictKeeper
    from teleop_flywheel.ros.nodes.recorder_verdict import ValidatorProcess
    from teleop_flywheel.testing.growing_bag import grow

    watch, ds = root / "bags", root / "ds"
    watch.mkdir(parents=True)
    shutil.copytree(base, ds)
    before = _frames(ds)
    cmd = [sys.executable, "-m", "teleop_flywheel.cli", "ingest", str(watch), "--dataset", str(ds), "--poll", "1",
           "--grace", "30"] + ([] if pre_encode else ["--no-pre-encode"])
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout or []), daemon=True)
    reader.start()
    judge = ValidatorProcess("", ["front"])
    keeper = VerdictKeeper(watch, judge, ["front"])
    out: dict[str, Any] = {}
    try:
        deadline = time.monotonic() + 300  # imports done and the first look taken, however loaded the machine
        while not any("watching" in line for line in lines) and time.monotonic() < deadline:
            time.sleep(0.1)
        origin: list[float] = []

        def pace(log_ns: int) -> None:  # each chunk is written when its last message has been recorded
            if not origin:
                origin.extend([time.monotonic(), log_ns / 1e9])
            time.sleep(max(0.0, origin[0] + (log_ns / 1e9 - origin[1]) - time.monotonic()))

        bag = watch / source.name
        cpu0 = _cpu_s(proc.pid)
        grow(source, bag, pace)
        t_stop = time.monotonic()  # the footer and metadata.yaml are written right after the last message
        out["ingest_cpu_s_while_recording"] = round(_cpu_s(proc.pid) - cpu0, 1)
        out["recording_s"] = round(t_stop - origin[0], 1)
        keeper.submit(bag)
        t_verdict = t_frames = t_done = None
        while time.monotonic() - t_stop < 600 and t_done is None:
            if t_verdict is None and (bag / "verdict.json").is_file():
                t_verdict = time.monotonic() - t_stop
                out["verdict"] = keeper.status()["verdict"].get("verdict")
                keeper.keep()  # the operator presses k as the verdict appears
            if t_frames is None and _frames(ds) > before:
                t_frames = time.monotonic() - t_stop
            state = ds.with_name(ds.name + ".ingest.json")
            if state.is_file() and source.name in state.read_text():  # taken (and refreshed)
                t_done = time.monotonic() - t_stop
            time.sleep(0.05)
        out["stop_to_verdict_s"] = None if t_verdict is None else round(t_verdict, 2)
        out["stop_to_frames_s"] = None if t_frames is None else round(t_frames, 2)
        out["stop_to_refreshed_s"] = None if t_done is None else round(t_done, 2)
        out["frames"] = _frames(ds) - before
    finally:
        proc.terminate()
        proc.wait(60)
        reader.join(10)
        keeper.close()
        judge.close()
    out["ingest_log"] = [line.rstrip() for line in lines[-6:]]
    return out


def main() -> int:
    from teleop_flywheel.data.convert import converter as conv
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

        ref = root / "ref"
        shutil.copytree(base, ref)
        t = time.perf_counter()
        res = conv.convert([episode], ref, workers=1, progress=False)
        result["convert_s"] = round(time.perf_counter() - t, 2)
        result["frames"] = _frames(ref) - _frames(base)
        assert res.converted and result["frames"] > 0, (res, result)  # appended to this dataset, not a sibling

        for name, pre in (("pre_encode", True), ("after_stop", False)):
            result[name] = _run_variant(episode, base, root / name, pre)
            assert result[name]["frames"] == result["frames"], result[name]
    for name in ("pre_encode", "after_stop"):
        v = result[name]
        if v["stop_to_frames_s"] is not None:
            v["ratio_to_convert"] = round(v["stop_to_frames_s"] / result["convert_s"], 2)
    result["stop_to_frames_s"] = result["pre_encode"]["stop_to_frames_s"]
    result["ratio_to_convert"] = result["pre_encode"].get("ratio_to_convert")
    result["targets"] = {"ratio_to_convert": "<= 2", "stop_to_frames_s": "<= 15 (60 s, one camera, 2 cores)"}
    result["load_average_before"], result["load_average_after"] = load_before, os.getloadavg()
    write_result(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
