"""Camera frame sources (no ROS): V4L2 through OpenCV, and a synthetic scene for the simulator.

Every frame carries the time it was captured on CLOCK_MONOTONIC (`Frame.stamp_ns`), taken from
the source — the V4L2 driver's buffer timestamp, or the synthetic camera's capture instant —
never from the moment a consumer got around to reading it. `open_source` picks the backend here,
above `source.py`'s vocabulary that the backends build on.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from teleop_flywheel.hw.camera.source import CameraConfig, Frame, FrameSource, encode_jpeg

__all__ = ["CameraConfig", "Frame", "FrameSource", "encode_jpeg", "open_source"]


def open_source(config: CameraConfig, arm_state: Callable[[], Mapping[str, float]] | None = None,
                timecode_clock: Callable[[int], int] | None = None, history: Any = None) -> FrameSource:
    """The source `config.source` names; `arm_state` (joint → rad now) or `history` (a
    `synthetic.JointHistory`: the pose at each exposure) feed the synthetic scene, `timecode_clock`
    maps its monotonic capture instant to the time written into its pixels."""
    if config.source == "synthetic":
        from teleop_flywheel.hw.camera.synthetic import SyntheticSource

        return SyntheticSource(config, arm_state, timecode_clock=timecode_clock, history=history)
    from teleop_flywheel.hw.camera.v4l2 import V4L2Source

    return V4L2Source(config)
