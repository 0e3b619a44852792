"""Processes as the kernel sees them (/proc): who is whose child, what runs, what is still alive."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def node_cmd(module: str, **params: object) -> list[str]:
    """A node executable as its own process, with `-p name:=value` parameters."""
    cmd = [sys.executable, "-m", f"teleop_flywheel.ros.nodes.{module}", "--ros-args"]
    for k, v in params.items():
        cmd += ["-p", f"{k}:={v}"]
    return cmd


def cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def _stat(pid: int) -> list[str]:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return []
    return text[text.rindex(")") + 2:].split()  # fields after "pid (comm) "


def alive(pid: int) -> bool:
    """Running (a zombie waiting to be reaped has stopped running: not alive)."""
    fields = _stat(pid)
    return bool(fields) and fields[0] != "Z"


def children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat(int(entry.name))
            if len(fields) > 1 and int(fields[1]) == pid and fields[0] != "Z":
                out.append(int(entry.name))
    return sorted(out)


def running_with(text: str) -> list[int]:
    """Live processes whose command line mentions `text` (e.g. a session's private directory)."""
    me = os.getpid()
    return sorted(int(e.name) for e in Path("/proc").iterdir()
                  if e.name.isdigit() and int(e.name) != me and alive(int(e.name))
                  and any(text in part for part in cmdline(int(e.name))))


def process_name(argv: list[str]) -> str:
    """The session's name for a child: a node's `__node:=NAME`, or `sim_<role>` for sim-bus."""
    for arg in argv:
        if arg.startswith("__node:="):
            return arg.split(":=", 1)[1]
    if "sim-bus" in argv:
        return f"sim_{argv[argv.index('--arm') + 1]}"
    return " ".join(argv)


def wait_gone(pids: list[int], timeout_s: float) -> list[int]:
    """Those of `pids` still alive after `timeout_s` (polled; returns as soon as none is)."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = [p for p in pids if alive(p)]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


def wait_for(pred: Callable[[], Any], timeout: float = 30.0, what: str = "condition",
             proc: subprocess.Popen[str] | None = None, poll_s: float = 0.02) -> Any:
    """Poll `pred` until it returns something truthy (returned). An AssertionError naming `what`
    after `timeout` s — or at once if `proc` (the process that should make it true) has exited."""
    deadline = time.monotonic() + timeout
    while not (value := pred()):
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"process exited ({proc.returncode}) before {what}: "
                                 f"{proc.stderr.read() if proc.stderr else ''}")
        assert time.monotonic() < deadline, f"timed out after {timeout:g} s waiting for {what}"
        time.sleep(poll_s)
    return value


class HostClockWatch:
    """Did this host's wall clock step while a test ran? Seen independently of the code under test:
    CLOCK_REALTIME − CLOCK_MONOTONIC sampled at 20 Hz from a thread (the tightest of 3 brackets,
    wide brackets — a preempted read — ignored). A VM's clock sync can step it (seen here: +0.5 ms
    every 100 ms for a minute); the validator then rightly rejects CLOCK_STEP, and a test that
    expects a clean episode must know the host did it."""

    def __init__(self, bound_ms: float = 0.3) -> None:
        self.bound_ns = int(bound_ms * 1e6)
        self.max_jump_ns = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def _offset() -> int | None:
        best: tuple[int, int] | None = None
        for _ in range(3):
            a = time.monotonic_ns()
            w = time.time_ns()
            b = time.monotonic_ns()
            if best is None or b - a < best[0]:
                best = (b - a, w - (a + b) // 2)
        return best[1] if best is not None and best[0] < 200_000 else None

    def _run(self) -> None:
        last: tuple[int, int] | None = None
        while not self._stop.wait(0.05):
            off, now = self._offset(), time.monotonic_ns()
            if off is None:
                continue
            if last is not None:  # beyond what slewing (500 ppm) can do in the interval
                self.max_jump_ns = max(self.max_jump_ns, abs(off - last[0]) - (now - last[1]) // 2000)
            last = (off, now)

    @property
    def stepped(self) -> bool:
        return self.max_jump_ns > self.bound_ns

    def __enter__(self) -> HostClockWatch:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(2)
