"""Low priority for background work (ingest, its conversions) that shares a machine with a rig.

`lower_priority(n)`: at least niceness `n` for this process (and what it starts after), SCHED_BATCH
unless `batch=False` (the scheduler then treats it as CPU-bound, never a latency-sensitive task), and — when this process
leads its own session — its session's autogroup niced too. The autogroup is what counts under the
kernel's `sched_autogroup` (the default on desktop and server distributions): CPU time is first
shared between sessions, and each of a session's processes runs in its own (`teleop-flywheel run`
gives every node one), so a niced process in a session of its own is what keeps the recorder's
and the arms' CPU share. Idempotent: a second call with the same `n` changes nothing.

`keep_scheduling()`: nothing run inside it can make a thread of this process real-time. SVT-AV1
(FFmpeg's `libsvtav1`, LeRobot's codec) switches the thread that opens an encoder to SCHED_FIFO 99
whenever it runs as root, and the encoder threads it then starts inherit that: a conversion meant
to yield to the rig would preempt the arm drivers instead, and so would every process it starts
(and, measured, every DDS thread the process starts later, though its own thread was put back).
"""
from __future__ import annotations

import ctypes
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def lower_priority(nice: int, *, batch: bool = True) -> None:
    if nice <= 0:
        return
    try:
        if os.getpriority(os.PRIO_PROCESS, 0) < nice:
            os.setpriority(os.PRIO_PROCESS, 0, min(19, nice))
    except OSError:
        pass
    if batch:
        try:
            os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
        except (AttributeError, OSError):
            pass
    if os.getsid(0) == os.getpid():
        try:
            Path("/proc/self/autogroup").write_text(str(min(19, nice)))
        except OSError:
            pass


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


_CAP_V3, _CAP_SYS_NICE = 0x20080522, 23  # linux/capability.h
_LIBC = ctypes.CDLL(None, use_errno=True)


def _capabilities() -> tuple[_CapHeader, ctypes.Array[_CapData]] | None:
    """This thread's capability sets (capget), or None where the call is refused."""
    header, data = _CapHeader(_CAP_V3, 0), (_CapData * 2)()
    return (header, data) if _LIBC.capget(ctypes.byref(header), data) == 0 else None


@contextmanager
def keep_scheduling() -> Iterator[None]:
    """Run the code inside without the right to make anything real-time: CAP_SYS_NICE leaves this
    thread's effective set (threads started inside inherit that), so SVT-AV1's attempt fails and it
    says so (`Failed to set thread priority`); the capability comes back afterwards. A process
    without the capability (not root) cannot be raised anyway and is left alone."""
    caps = _capabilities()
    if caps is None or not caps[1][0].effective & (1 << _CAP_SYS_NICE):
        yield
        return
    header, data = caps
    data[0].effective &= ~(1 << _CAP_SYS_NICE)
    dropped = _LIBC.capset(ctypes.byref(header), data) == 0
    try:
        yield
    finally:
        if dropped:
            data[0].effective |= 1 << _CAP_SYS_NICE
            _LIBC.capset(ctypes.byref(header), data)
