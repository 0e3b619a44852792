"""Low priority for background work (ingest, its conversions) that shares a machine with a rig.

`lower_priority(n)`: at least niceness `n` for this process (and what it starts after), SCHED_BATCH
(the scheduler treats it as CPU-bound, never a latency-sensitive task), and — when this process
leads its own session — its session's autogroup niced too. The autogroup is what counts under the
kernel's `sched_autogroup` (the default on desktop and server distributions): CPU time is first
shared between sessions, and each of a session's processes runs in its own (`teleop-flywheel run`
gives every node one), so a niced process in a session of its own is what keeps the recorder's
and the arms' CPU share. Idempotent: a second call with the same `n` changes nothing.
"""
from __future__ import annotations

import os
from pathlib import Path


def lower_priority(nice: int) -> None:
    if nice <= 0:
        return
    try:
        if os.getpriority(os.PRIO_PROCESS, 0) < nice:
            os.setpriority(os.PRIO_PROCESS, 0, min(19, nice))
    except OSError:
        pass
    try:
        os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
    except (AttributeError, OSError):
        pass
    if os.getsid(0) == os.getpid():
        try:
            Path("/proc/self/autogroup").write_text(str(min(19, nice)))
        except OSError:
            pass
