"""Background work stays background: SVT-AV1 switches a root process that opens an encoder to
SCHED_FIFO 99 (every encoder thread it starts, and every DDS thread started later, then runs at
99); the dataset's encoder opens it without the right to do so (`core.priority.keep_scheduling`).
Each case runs in a process of its own, so the test process never becomes real-time itself."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

PROBE = """
import json, os, sys
import numpy as np
from pathlib import Path
from teleop_flywheel.core.priority import lower_priority
lower_priority(10)  # as the ingest worker runs: niced, SCHED_BATCH
if sys.argv[1] == "pyav":  # the codec opened as PyAV alone opens it
    import av
    container = av.open(str(Path(sys.argv[2]) / "raw.mp4"), "w")
    stream = container.add_stream("libsvtav1", rate=30)
    stream.width, stream.height, stream.pix_fmt = 64, 64, "yuv420p"
    stream.codec_context.open()
else:
    from teleop_flywheel.data.lerobot.format import VideoEncoder
    encoder = VideoEncoder(Path(sys.argv[2]) / "ours.mp4", 64, 64, 30, "libsvtav1")
    for i in range(4):
        encoder.add_i420(np.full((96, 64), 16 * i, np.uint8))
import rclpy  # a node started afterwards, as the ingest node's process or a test process does
rclpy.init()
node = rclpy.create_node("after_the_encoder")
policies = {tid: os.sched_getscheduler(int(tid)) for tid in os.listdir("/proc/self/task")}
print(json.dumps({"main": os.sched_getscheduler(0), "threads": len(policies),
                  "realtime": sum(p in (os.SCHED_FIFO, os.SCHED_RR) for p in policies.values()),
                  "batch": sum(p == os.SCHED_BATCH for p in policies.values())}))
"""


def probe(how: str, tmp_path: Path) -> dict[str, int]:
    out = subprocess.run([sys.executable, "-c", PROBE, how, str(tmp_path)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_svt_av1_opened_as_root_makes_the_process_realtime(tmp_path: Path) -> None:
    """The premise, kept honest: if a new SVT-AV1 stops doing this, this test says so."""
    if os.geteuid() != 0:
        pytest.skip("SVT-AV1 raises only a root process to SCHED_FIFO; this one is not root")
    got = probe("pyav", tmp_path)
    assert got["main"] == os.SCHED_FIFO and got["realtime"] >= 1, got


def test_the_dataset_encoder_leaves_no_thread_realtime(tmp_path: Path) -> None:
    got = probe("ours", tmp_path)
    assert got["realtime"] == 0 and got["main"] == os.SCHED_BATCH, got
    assert got["batch"] > 1, got  # the encoder's own threads and DDS's run at the worker's policy too
