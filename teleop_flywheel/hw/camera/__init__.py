"""Camera frame sources (no ROS): V4L2 through OpenCV, and a synthetic scene for the simulator.

Every frame carries the time it was captured on CLOCK_MONOTONIC (`Frame.stamp_ns`), taken from
the source — the V4L2 driver's buffer timestamp, or the synthetic camera's capture instant —
never from the moment a consumer got around to reading it.
"""
from teleop_flywheel.hw.camera.source import CameraConfig, CameraError, Frame, FrameSource, encode_jpeg, open_source

__all__ = ["CameraConfig", "CameraError", "Frame", "FrameSource", "encode_jpeg", "open_source"]
