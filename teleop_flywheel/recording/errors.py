"""Every error the recorder raises on purpose: an episode that cannot be started, stopped or
discarded, a clock probe that gives no offset. Each is a `FlywheelError` whose message says why.

The bag format's errors stay in `recording/mcap/exceptions.py`: that room is a format library
(no ROS, built on by the recorder, read by data/ and ros/), and its errors are part of it, as the
`mcap` library keeps its own `mcap.exceptions`. `scan.Malformed` stays in the scan: raised and
caught there, it becomes the damaged-bag report a user reads, never an error of its own.
"""
from __future__ import annotations

from teleop_flywheel.core.errors import FlywheelError


class RecordingError(FlywheelError, RuntimeError):
    """An episode could not be started, stopped or discarded; the message says why."""


class ClockProbeError(FlywheelError, ValueError):
    """The probe could not produce an offset; the text says which probe and why."""
