"""The recorder over one long episode (issue 38): an hour at the demo's rates by default.

A child process runs the recorder node's logic without ROS (`EpisodeRecorder`, the recorder's bag
writer with its fsync'd chunks) over one episode: the demo's camera (`front`, a 320x240 JPEG at 30
fps) and three JointState streams at 100 Hz (leader and follower state, follower command), stamped
on a simulated clock and written as fast as the recorder takes them (the content's time is what
grows the bag; the wall time only shortens the run). Every simulated `--every` seconds the child
reports its resident memory (VmRSS) and the bag's size; every `--read-every` seconds the parent
also reads the growing bag with Foxglove's own streaming reader (`mcap.reader.NonSeekingReader`: every message up to the
last whole record, the file still open for writing). At the end the child is killed (SIGKILL: no
footer, no summary, no metadata.yaml written at stop), and `teleop-flywheel recover` repairs the
bag; the recovered bag is read whole with Foxglove's seeking reader (`make_reader`, the summary
`recover` wrote) and its messages counted against those written before the kill.

Targets: memory flat (the last report's RSS within 1.1x of the first's, after the first minute);
the bag readable while it grows (every report's read returns messages, up to the last whole
chunk); `recover` in seconds (< 10 s for the hour).

Usage: `python bench/long_recording.py [--minutes 60] [--every 60] [--read-every 1200]
[--out bench/results/long_recording.json]`
(`--minutes 2` for a quick run; its result is written with `"minutes": 2`).
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from result_file import RESULTS, load_average, write_result

JOINTS = ("/leader/joint_states", "/follower/joint_states", "/follower/joint_command")
CAMERA = "/cameras/front/image/compressed"
JOINT_HZ, CAMERA_FPS = 100, 30
NAMES = ["shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper"]


def child(out: Path, minutes: float, every: float) -> None:
    """Record one episode of `minutes` simulated minutes; a JSON line per `every` simulated seconds."""
    import cv2  # noqa: PLC0415 - the child's own imports
    import numpy as np  # noqa: PLC0415

    from teleop_flywheel.recording.mcap.cdr import compressed_image_cdr, joint_state_cdr  # noqa: PLC0415
    from teleop_flywheel.recording.recorder.episode_recorder import (  # noqa: PLC0415
        EpisodeFields,
        EpisodeRecorder,
        RecorderConfig,
    )

    rec = EpisodeRecorder(RecorderConfig(output_dir=out, cameras=("front",)))
    entries = {t: rec.add_topic(t, "sensor_msgs/msg/JointState", []) for t in JOINTS}
    entries[CAMERA] = rec.add_topic(CAMERA, "sensor_msgs/msg/CompressedImage", [])
    rec.start(EpisodeFields(task="pick the brick", operator="ana"))
    rng = np.random.default_rng(0)
    frames = [cv2.imencode(".jpg", rng.integers(0, 255, (240, 320, 3), dtype=np.uint8) // 4 + 96)[1].tobytes()
              for _ in range(8)]
    t0 = time.time_ns()
    step = 10**9 // JOINT_HZ
    seq = {t: 0 for t in entries}
    written = 0
    next_report = every
    ticks = int(minutes * 60 * JOINT_HZ)
    for k in range(ticks):
        stamp = t0 + k * step
        for topic in JOINTS:
            seq[topic] += 1
            rec.write(entries[topic], joint_state_cdr(stamp, NAMES, [0.01 * (k % 100)] * 6),
                      {"source_timestamp": stamp, "received_timestamp": stamp + 1_000_000,
                       "publication_sequence_number": seq[topic]})
            written += 1
        if k == 0 or k * CAMERA_FPS // JOINT_HZ != (k - 1) * CAMERA_FPS // JOINT_HZ:  # 30 frames a second
            seq[CAMERA] += 1
            rec.write(entries[CAMERA], compressed_image_cdr(stamp, frames[seq[CAMERA] % len(frames)]),
                      {"source_timestamp": stamp, "received_timestamp": stamp + 8_000_000,
                       "publication_sequence_number": seq[CAMERA]})
            written += 1
        if (k + 1) / JOINT_HZ >= next_report or k + 1 == ticks:
            next_report += every
            bag = rec.bag_path
            assert bag is not None
            size = sum(p.stat().st_size for p in bag.glob("*.mcap"))
            rss = next(int(line.split()[1]) for line in Path("/proc/self/status").read_text().splitlines()
                       if line.startswith("VmRSS:"))
            print(json.dumps({"sim_s": round((k + 1) / JOINT_HZ, 1), "written": written, "rss_kb": rss,
                              "bag_bytes": size, "bag": str(bag)}), flush=True)
    print(json.dumps({"done": True, "written": written}), flush=True)
    time.sleep(3600)  # killed here, the episode never stopped


def read_growing(mcap: Path) -> int:
    """Messages Foxglove's streaming reader gets from a bag still being written (up to the last whole record)."""
    from mcap.exceptions import McapError  # noqa: PLC0415
    from mcap.reader import NonSeekingReader  # noqa: PLC0415

    count = 0
    with mcap.open("rb") as f:
        try:
            for _ in NonSeekingReader(f).iter_messages(log_time_order=False):  # in file order: no buffering
                count += 1
        except (McapError, EOFError, ValueError):
            pass  # the record being written: the end of what is readable now
    return count


def read_whole(mcap: Path) -> int:
    from mcap.reader import make_reader  # noqa: PLC0415

    with mcap.open("rb") as f:
        summary = make_reader(f).get_summary()
        assert summary is not None and summary.statistics is not None
        return int(summary.statistics.message_count)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--every", type=float, default=60.0, help="simulated seconds between memory reports")
    parser.add_argument("--read-every", type=float, default=1200.0,
                        help="simulated seconds between reads of the growing bag (each reads it from its start)")
    parser.add_argument("--out", type=Path, default=RESULTS / "long_recording.json")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.minutes, args.every)
        return
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": str(root)}
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        proc = subprocess.Popen([sys.executable, __file__, "--child", tmp, "--minutes", str(args.minutes),
                                 "--every", str(args.every)], stdout=subprocess.PIPE, text=True, env=env)
        reports: list[dict[str, Any]] = []
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                report = json.loads(line)
                if report.get("done"):
                    written = report["written"]
                    break
                if report["sim_s"] % args.read_every < args.every / 2 or report["sim_s"] >= 60 * args.minutes:
                    t0 = time.perf_counter()
                    report["readable_messages"] = read_growing(next(Path(report["bag"]).glob("*.mcap")))
                    report["read_s"] = round(time.perf_counter() - t0, 3)
                reports.append(report)
            else:
                raise SystemExit(f"the recorder exited ({proc.wait()}) before the episode's end")
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        recorded_s = time.perf_counter() - started
        bag = Path(reports[-1]["bag"])
        t0 = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "teleop_flywheel.cli", "recover", str(bag)], env=env,
                              capture_output=True, text=True)
        recover_s = time.perf_counter() - t0
        if done.returncode != 0:
            raise SystemExit(f"recover failed ({done.returncode}): {done.stderr.strip()[-500:]}")
        recovered = read_whole(next(bag.glob("*.mcap")))
        size = sum(p.stat().st_size for p in bag.glob("*.mcap"))
    steady = reports[1:] if len(reports) > 2 else reports
    rss_ratio = steady[-1]["rss_kb"] / steady[0]["rss_kb"]
    result = {
        "benchmark": "long_recording", "minutes": args.minutes, "streams": {
            "joints": f"{len(JOINTS)} x JointState @ {JOINT_HZ} Hz", "camera": f"320x240 JPEG @ {CAMERA_FPS} fps"},
        "wall_s": round(recorded_s, 1), "messages_written": written, "bag_mb": round(size / 1e6, 1),
        "reports": reports, "rss_mb_first": round(steady[0]["rss_kb"] / 1e3, 1),
        "rss_mb_last": round(steady[-1]["rss_kb"] / 1e3, 1), "rss_ratio_last_to_first": round(rss_ratio, 3),
        "readable_while_growing": all(r["readable_messages"] > 0 for r in reports if "readable_messages" in r),
        "recover_s": round(recover_s, 2), "messages_recovered": recovered, "messages_lost": written - recovered,
        "load_average": load_average(),
        "met": rss_ratio <= 1.1 and all(r["readable_messages"] > 0 for r in reports if "readable_messages" in r)
        and recover_s < 10,
    }
    write_result(args.out, result)


if __name__ == "__main__":
    main()
