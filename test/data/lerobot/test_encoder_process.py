"""A stalled video encoder ends `convert` and `ingest` with one line, not a silent hang.

The stall is real and made by the kernel: the process writing a camera's mp4 (found by its open file
in /proc) is stopped with SIGSTOP, as SVT-AV1's flush deadlock leaves it (threads asleep, no CPU).
The command must stop within its `--encode-timeout`, name the bag and camera, exit 1, kill what it
stopped, and leave the dataset exactly as it was (the append is never published) with nothing
beside it.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from support.procs import alive

from teleop_flywheel.data.convert import converter as conv
from teleop_flywheel.data.errors import EncoderStalled
from teleop_flywheel.data.lerobot import commit
from teleop_flywheel.data.lerobot.consistency import problems
from teleop_flywheel.data.lerobot.v3_layout import VideoEncoder
from teleop_flywheel.recording.recorder.verdict import KEEP, mark_decision, verdict_doc, write_verdict
from teleop_flywheel.testing.synthetic_session import SessionSpec, write_session

STALL_S = 5.0  # the watchdog's time: an encode on a machine at load 10 still moves far more often


def descendants(pid: int) -> list[int]:
    """Cheap enough to poll (the kernel's own lists, not a walk of /proc)."""
    out, todo = [], [pid]
    while todo:
        top = todo.pop()
        kids = []
        with contextlib.suppress(OSError):
            for task in os.listdir(f"/proc/{top}/task"):
                kids += [int(k) for k in Path(f"/proc/{top}/task/{task}/children").read_text().split()]
        out += kids
        todo += kids
    return out


def writer_of(root: int, suffix: str, under: Path) -> tuple[int, str] | None:
    """(pid, path) of a process in `root`'s tree with a file `*suffix` open whose path starts with `under`."""
    for pid in [root, *descendants(root)]:
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    target = os.readlink(f"/proc/{pid}/fd/{fd}")
                    if target.endswith(suffix) and target.startswith(str(under)):
                        return pid, target
    return None


def stop_the_encoder(proc: subprocess.Popen[str], suffix: str, under: Path) -> tuple[int, str]:
    """SIGSTOP the process that has the first file `under*suffix` open."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        found = writer_of(proc.pid, suffix, under)
        if found is not None:
            os.kill(found[0], signal.SIGSTOP)
            return found
        time.sleep(0.005)
    raise AssertionError(f"no process wrote a {suffix} under {under} (exit {proc.poll()})")


def listing(folder: Path) -> dict[str, str]:
    """Every file beside and inside the dataset (through no pointer): what a stalled run may not change."""
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file()
            and not p.is_symlink()
            else os.readlink(p) if p.is_symlink() else "dir"
            for p in sorted(folder.rglob("*")) if not p.name.endswith(".lock")}


@pytest.mark.parametrize("command", ["convert", "ingest"])
def test_a_stopped_encoder_ends_the_command_with_one_line_and_changes_nothing(tmp_path: Path, command: str) -> None:
    spec = dict(width=320, height=240, cameras=("wrist", "front"))
    first = write_session(tmp_path / "bags" / "a", SessionSpec(seed=41, duration_s=2.5, **spec)).bag
    bag = write_session(tmp_path / "watch" / "b", SessionSpec(seed=42, duration_s=5.0, **spec)).bag
    home = tmp_path / "data"
    ds = home / "ds"
    conv.convert([first], ds, codec="h264", workers=1, progress=False, refresh_after=False)
    before = listing(home)
    if command == "convert":
        argv = ["convert", str(bag), "--dataset", str(ds), "--workers", "1"]
    else:
        write_verdict(bag, verdict_doc(bag.name, {"report": {"episode_id": "x", "reasons": []}, "seconds": 1.0}))
        mark_decision(bag, KEEP)
        argv = ["ingest", str(bag.parent), "--dataset", str(ds), "--once", "--no-pre-encode", "--no-audit",
                "--nice", "0", "--no-quarantine"]
    proc = subprocess.Popen([sys.executable, "-m", "teleop_flywheel.cli", *argv, "--codec", "h264",
                             "--encode-timeout", str(STALL_S)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    stopped = None
    try:
        stopped, path = stop_the_encoder(proc, ".mp4", commit.staging_path(ds) / ".work")
        t0 = time.monotonic()
        _out, err = proc.communicate(timeout=STALL_S + 60)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        if stopped is not None and alive(stopped):
            os.kill(stopped, signal.SIGKILL)
            os.kill(stopped, signal.SIGCONT)
    camera = Path(path).stem
    lines = err.strip().splitlines()
    assert proc.returncode == 1, err
    assert STALL_S <= took < STALL_S + 30, took
    assert lines[-1].startswith(f"teleop-flywheel {command}: error: {bag.name} (episode "), lines
    assert f"camera {camera}: " in lines[-1] and "no progress" in lines[-1], lines[-1]
    assert "--encode-timeout" in lines[-1], lines[-1]
    assert not alive(stopped), "the stopped encoder was left running"
    assert listing(home) == before, "a stalled run changed or left files beside the dataset"
    assert problems(ds) == []


def test_a_flush_that_never_ends_is_killed_and_its_file_removed(tmp_path: Path) -> None:
    """The incident's place: frames taken, then the flush in `close` hangs."""
    path = tmp_path / "v.mp4"
    enc = VideoEncoder(path, 64, 48, 30, "libsvtav1", stall_s=2.0)
    for i in range(60):  # the file is opened at the first packet out; SVT-AV1 still holds frames to flush
        enc.add_i420(np.full((72, 64), i * 4, np.uint8))
    deadline = time.monotonic() + 30
    while (found := writer_of(os.getpid(), "v.mp4", tmp_path)) is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert found is not None and found[0] != os.getpid(), "the encode does not run in a process of its own"
    os.kill(found[0], signal.SIGSTOP)
    t0 = time.monotonic()
    try:
        with pytest.raises(EncoderStalled, match=r"v\.mp4: the video encoder made no progress finishing for 2 s"):
            enc.close()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(found[0], signal.SIGKILL)
    assert 2.0 <= time.monotonic() - t0 < 10
    assert not path.exists() and not alive(found[0])


def test_an_encoder_that_dies_is_an_error_naming_its_file(tmp_path: Path) -> None:
    path = tmp_path / "v.mp4"
    enc = VideoEncoder(path, 64, 48, 30, "h264", stall_s=30.0)
    for i in range(60):
        enc.add_i420(np.full((72, 64), i * 4, np.uint8))
    deadline = time.monotonic() + 30
    while (found := writer_of(os.getpid(), "v.mp4", tmp_path)) is None and time.monotonic() < deadline:
        time.sleep(0.01)  # h264 opens the file at its first packet out
    assert found is not None
    os.kill(found[0], signal.SIGKILL)
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match=r"v\.mp4: the video encoder process ended while (encoding|finishing) "
                                           r"\(exit code -9\)"):
        for _ in range(100):
            enc.add_i420(np.zeros((72, 64), np.uint8))
        enc.close()
    assert time.monotonic() - t0 < 10 and not path.exists()


def _encode_one(path: str) -> None:
    enc = VideoEncoder(Path(path), 64, 48, 30, "h264", stall_s=30.0)
    enc.add_i420(np.zeros((72, 64), np.uint8))
    enc.close()


def test_an_encoder_in_a_forked_process_starts_its_own_server(tmp_path: Path) -> None:
    """A process forked from one whose forkserver runs (the test process's: conftest) can encode: the
    server is not its child, and multiprocessing fails every start through it (ChildProcessError)."""
    import multiprocessing  # noqa: PLC0415

    proc = multiprocessing.get_context("fork").Process(target=_encode_one, args=(str(tmp_path / "f.mp4"),))
    proc.start()
    proc.join(60)
    assert proc.exitcode == 0 and (tmp_path / "f.mp4").stat().st_size > 0
