"""`teleop-flywheel doctor [DATASET] [--repair] [--port PORT ...] [--json]`: is a dataset consistent, and
if not, why and what can be repaired; are the arms' USB adapters set up for the loop rate.

It reports (`data/lerobot/consistency.py`): the version layout (`data/lerobot/commit/`: the
pointer `DATASET` and `DATASET.versions/`) and what an interrupted commit left beside it, orphan
data/video files, info totals or stats that disagree with the episodes table, and what cannot be
repaired (an unreadable table, a referenced file missing or cut, a pointer that is not the
dataset's). With `--repair` (the consent) it applies the repairs that lose nothing — remove the
leftovers, move orphans to `<DATASET>.orphans/`, recompute totals and stats, as one new version —
under the dataset's lock, so never beside a running convert.

`--port PORT` (repeatable: the leader's and the follower's) reads each port's adapter from sysfs
(`hw/bringup/usb_adapter.py`, no bus opened): the driver, an FTDI's latency timer, the sync-read
rate to expect. An FTDI whose timer is not 1 ms is a problem (~55 reads/s at Linux's default 16 ms:
the arm loop cannot hold its rate); `find-port --port PORT` gives the udev rule that fixes it.

The frame contract (`data/reports/frame_contract.py`) is checked on every dataset that can be read: the
lag of the state behind the action, and whether the actions are the state copied, shifted by a frame
either way, or lagging beyond a bound — not repairable here (re-convert the bags).

Exit status: 0 consistent (after repair, if asked), 1 problems remain (or the frame contract is broken),
2 not a dataset / usage.
"""
from __future__ import annotations

import os

from teleop_flywheel.core.errors import UsageError
from teleop_flywheel.hw.bringup.usb_adapter import Adapter, describe


def adapters(ports: list[str]) -> list[Adapter]:
    """Each port's adapter; a port that is neither there nor known to sysfs is a usage error."""
    found = [describe(port) for port in ports]
    for a in found:
        if a.kind == "unknown" and not os.path.exists(a.port):
            raise UsageError("no such serial port", where=a.port,
                             fix="teleop-flywheel find-port names the arm's port; is its USB cable plugged in?")
    return found

