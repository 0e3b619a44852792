"""Scheduling both ways (`core.priority`). Background work stays background: SVT-AV1 switches a
root process that opens an encoder to SCHED_FIFO 99 (every encoder thread it starts, and every DDS
thread started later, then runs at 99); the dataset's encoder opens it without the right to do so
(`keep_scheduling`). The rig's loops get SCHED_FIFO and locked memory where permitted
(`request_realtime`), and where refused the process says so once, with the limit and the fix.
Each case runs in a process of its own, so the test process never becomes real-time itself."""
from __future__ import annotations

import ctypes
import json
import os
import resource
import subprocess
import sys
from collections.abc import Callable
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
    from teleop_flywheel.data.lerobot.v3_layout import VideoEncoder
    encoder = VideoEncoder(Path(sys.argv[2]) / "ours.mp4", 64, 64, 30, "libsvtav1")
    for i in range(4):
        encoder.add_i420(np.full((96, 64), 16 * i, np.uint8))
import rclpy  # a node started afterwards, as the ingest node's process or a test process does
rclpy.init()
node = rclpy.create_node("after_the_encoder")

def tree(pid):  # this process and every process under it (the encoder runs in one: encoder_process.py)
    out = [pid]
    for task in os.listdir(f"/proc/{pid}/task"):
        for kid in open(f"/proc/{pid}/task/{task}/children").read().split():
            out += tree(int(kid))
    return out

policies = {(pid, tid): os.sched_getscheduler(int(tid)) for pid in tree(os.getpid())
            for tid in os.listdir(f"/proc/{pid}/task")}
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
    assert got["batch"] > 1, got  # the encoder's own threads (in its process) and DDS's run at the worker's policy


REALTIME_PROBE = """
import gc, json, os, sys, threading
from teleop_flywheel.core.priority import keep_scheduling, request_realtime

def policy(tid=0):
    return {"policy": os.sched_getscheduler(tid) & ~os.SCHED_RESET_ON_FORK,
            "priority": os.sched_getparam(tid).sched_priority}

def in_new_thread():
    out = {}
    t = threading.Thread(target=lambda: out.update(policy()))
    t.start()
    t.join()
    return out

def locked_kb():
    line = next(l for l in open("/proc/self/status") if l.startswith("VmLck:"))
    return int(line.split()[1])

case = sys.argv[1]
if case.startswith("nobody"):  # the interpreter lives under /root (mode 700): drop once it runs
    os.setgroups([])
    os.setgid(65534)
    os.setuid(65534)
before = threading.Event()
earlier = threading.Thread(target=before.wait)  # a thread that was there before the request
earlier.start()
if case == "higher":
    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(60))
if case == "kept":
    with keep_scheduling():
        got = [request_realtime(50, lock_memory=False)]
    got.append(request_realtime(50, lock_memory=False))
else:
    priority = 0 if case == "zero" else 50
    got = [request_realtime(priority, whole_process=case == "process") for _ in range(2)]
out = {"got": [[g.requested, g.priority, g.memory_locked, g.refused] for g in got], "self": policy(),
       "earlier": policy(earlier.native_id), "started_after": in_new_thread(), "locked_kb": locked_kb(),
       "uid": os.getuid(), "frozen": gc.get_freeze_count()}
before.set()
earlier.join()
os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))  # nothing real-time outlives the probe
print(json.dumps(out))
"""


def realtime_probe(case: str, preexec: Callable[[], None] | None = None) -> tuple[dict, str]:
    out = subprocess.run([sys.executable, "-c", REALTIME_PROBE, case], capture_output=True, text=True, timeout=60,
                         preexec_fn=preexec, cwd="/")
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1]), out.stderr


def limits(rtprio: tuple[int, int], drop: tuple[int, ...] = ()) -> Callable[[], None]:
    """preexec_fn: the child's real-time limit, a memory-lock limit too small to lock anything
    (64 KiB), and `drop`ped capabilities out of its bounding set (so exec does not give them back)."""

    def setup() -> None:
        resource.setrlimit(resource.RLIMIT_RTPRIO, rtprio)
        resource.setrlimit(resource.RLIMIT_MEMLOCK, (65536, 65536))
        prctl = ctypes.CDLL(None, use_errno=True).prctl
        for cap in drop:
            prctl(24, cap, 0, 0, 0)  # PR_CAPBSET_DROP

    return setup


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="granted only to a privileged process; this one is not root")


def can_give_rtprio(n: int) -> bool:
    """A child can be given a hard RLIMIT_RTPRIO of `n` (raising a hard limit needs CAP_SYS_RESOURCE)."""
    hard = resource.getrlimit(resource.RLIMIT_RTPRIO)[1]
    cap_eff = next(line for line in Path("/proc/self/status").read_text().splitlines() if line.startswith("CapEff:"))
    return hard == resource.RLIM_INFINITY or hard >= n or bool(int(cap_eff.split()[1], 16) & (1 << 24))


@needs_root
def test_the_calling_thread_gets_sched_fifo_and_memory_is_locked() -> None:
    got, err = realtime_probe("thread")
    assert got["got"][0] == [50, 50, True, ""], got
    assert got["self"] == {"policy": os.SCHED_FIFO, "priority": 50}
    assert got["locked_kb"] > 0
    # Only the thread that asked: neither a thread already there nor one it starts is real-time.
    assert got["earlier"]["policy"] == os.SCHED_OTHER and got["started_after"]["policy"] == os.SCHED_OTHER, got
    assert err == ""


@needs_root
def test_the_whole_process_gets_sched_fifo_and_threads_started_later_inherit_it() -> None:
    got, _ = realtime_probe("process")
    fifo = {"policy": os.SCHED_FIFO, "priority": 50}
    assert got["got"][0][:2] == [50, 50] and got["self"] == got["earlier"] == got["started_after"] == fifo, got
    # Its heap as it was (the imports) is out of the collector's reach: a full collection, which
    # holds the GIL, walks only what was allocated since.
    assert got["frozen"] > 10_000, got


@needs_root
def test_a_thread_already_above_the_priority_is_not_lowered() -> None:
    got, _ = realtime_probe("higher")
    assert got["self"] == {"policy": os.SCHED_FIFO, "priority": 60} and got["got"][0][1] == 60, got


def test_priority_zero_asks_for_nothing() -> None:
    got, err = realtime_probe("zero")
    assert got["got"][0] == [0, 0, False, ""] and got["self"]["policy"] == os.SCHED_OTHER, got
    assert got["locked_kb"] == 0 and got["frozen"] == 0 and err == ""


@needs_root
def test_refused_for_an_unprivileged_user_it_says_so_once_with_the_limit_and_the_fix() -> None:
    got, err = realtime_probe("nobody", limits((0, 0)))
    assert got["uid"] == 65534
    assert got["self"]["policy"] == os.SCHED_OTHER and got["locked_kb"] == 0, got
    assert got["got"][0][:3] == [50, 0, False], got
    lines = err.strip().splitlines()
    assert len(lines) == 1, err  # asked twice, said once
    message = lines[0]
    assert "SCHED_FIFO 50 refused: RLIMIT_RTPRIO is 0" in message and "running at the normal policy" in message
    assert "RLIMIT_MEMLOCK is 64 KiB" in message
    assert "`@realtime - rtprio 99`" in message and "`@realtime - memlock unlimited`" in message
    assert "/etc/security/limits.conf" in message and "usermod -aG realtime" in message
    assert "LimitRTPRIO=99" in message and "LimitMEMLOCK=infinity" in message
    assert got["got"][0][3] == message  # what the caller puts on /diagnostics


@needs_root
@pytest.mark.skipif(not can_give_rtprio(20), reason="this process cannot give a child RLIMIT_RTPRIO 20")
def test_a_hard_limit_below_the_priority_gives_what_it_allows_and_says_so() -> None:
    """`@realtime hard rtprio 20` with a soft limit of 0: the soft limit is raised and 20 taken."""
    got, err = realtime_probe("nobody", limits((0, 20)))
    assert got["self"] == {"policy": os.SCHED_FIFO, "priority": 20} and got["got"][0][1] == 20, got
    assert "RLIMIT_RTPRIO is 20" in err and "running at SCHED_FIFO 20" in err


@needs_root
def test_root_without_the_capabilities_is_refused_as_in_a_container() -> None:
    """Root in a container without CAP_SYS_NICE and CAP_IPC_LOCK (Docker's default) and no limits."""
    got, err = realtime_probe("root", limits((0, 0), drop=(23, 14)))
    assert got["uid"] == 0 and got["self"]["policy"] == os.SCHED_OTHER and got["locked_kb"] == 0, got
    assert "lacks CAP_SYS_NICE" in err and "lacks CAP_IPC_LOCK" in err
    assert "docker run --ulimit rtprio=99 --ulimit memlock=-1" in err


@needs_root
@pytest.mark.skipif(not can_give_rtprio(99), reason="this process cannot give a child RLIMIT_RTPRIO 99")
def test_nothing_inside_keep_scheduling_becomes_realtime_even_where_the_limit_allows_it() -> None:
    """A root service given LimitRTPRIO=99 for its rig: the encoder inside keep_scheduling still
    cannot be raised; the same thread can once it is out."""
    got, err = realtime_probe("kept", limits((99, 99)))
    assert got["got"][0][1] == 0 and "refused" in got["got"][0][3], got
    assert got["got"][1][:2] == [50, 50] and got["self"] == {"policy": os.SCHED_FIFO, "priority": 50}, got
