"""CPU seconds of a process and everything it started, and of its threads, from /proc (utime +
stime): what `rig_cpu.py` measures nodes, drivers and floors with."""
from __future__ import annotations

import os
import statistics
import threading
import time
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2:].split()  # fields from state (3) on


def _children_of() -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (fields := _stat(int(entry))) is not None:
            out.setdefault(int(fields[1]), []).append(int(entry))
    return out


def _uptime_ticks() -> int:
    return int(float(Path("/proc/uptime").read_text().split()[0]) * CLK_TCK)


class TreeCPU:
    """CPU seconds each named process and its descendants spend in a window, sampled twice a
    second so that a worker started (or ended) inside the window is counted from its start (or
    up to its last sample)."""

    def __init__(self, roots: dict[str, int]) -> None:
        self.roots = roots
        self._first: dict[int, tuple[str, int]] = {}  # pid -> (root name, cpu ticks at first sight)
        self._last: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._start_ticks = 0
        self.wall_s = 0.0

    def _sample(self) -> None:
        children = _children_of()
        for name, root in self.roots.items():
            todo = [root]
            while todo:
                pid = todo.pop()
                todo += children.get(pid, [])
                fields = _stat(pid)
                if fields is None:
                    continue
                cpu = int(fields[11]) + int(fields[12])
                if pid not in self._first:
                    born_inside = int(fields[19]) > self._start_ticks
                    self._first[pid] = (name, 0 if born_inside else cpu)
                self._last[pid] = cpu

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            self._sample()

    def __enter__(self) -> TreeCPU:
        self._start_ticks = _uptime_ticks()
        self._t0 = time.monotonic()
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._sample()
        self.wall_s = time.monotonic() - self._t0
        self._stop.set()
        self._thread.join()

    def seconds(self) -> dict[str, dict[str, float]]:
        """Per root: its own CPU seconds and its descendants'."""
        out = {name: {"own_s": 0.0, "started_s": 0.0} for name in self.roots}
        for pid, (name, first) in self._first.items():
            key = "own_s" if pid == self.roots[name] else "started_s"
            out[name][key] += (self._last[pid] - first) / CLK_TCK
        return out


def spread(values: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(values), 4), "min": round(min(values), 4),
            "max": round(max(values), 4)}


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds so far of `pid`'s threads, by kind: its main thread (a node's executor, a floor's
    loop), its other Python threads (a driver's bus loop), and the DDS threads (named `dds.*`)."""
    out = {"main": 0.0, "other python threads": 0.0, "dds threads": 0.0}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            comm = Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
            fields = Path(f"/proc/{pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        kind = "main" if int(tid) == pid else ("dds threads" if comm.startswith("dds.") else "other python threads")
        out[kind] += (int(fields[11]) + int(fields[12])) / CLK_TCK
    return out


def realtime_priority(pid: int) -> int:
    """The highest SCHED_FIFO/RR priority among `pid`'s threads (0: none real-time)."""
    best = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            if os.sched_getscheduler(int(tid)) & ~os.SCHED_RESET_ON_FORK in (os.SCHED_FIFO, os.SCHED_RR):
                best = max(best, os.sched_getparam(int(tid)).sched_priority)
        except OSError:
            continue
    return best
