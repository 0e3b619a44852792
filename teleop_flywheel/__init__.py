"""teleop_flywheel: SO-101 teleoperation, blended takeover, raw recording and a data engine.

Floors (each imports only the ones above it in this list; `test/test_architecture.py` enforces it):
`core` (vocabularies, clock, calibration, blending, safety) · `hw` (servo bus, cameras, pedal, arm
driver) · `policies` · `recording` (one writer, one reader, one CDR codec) · `evaluation` · `data`
(the engine) · `testing` (synthetic fixtures) · `ros` (thin nodes and sessions: the only floor that
imports rclpy or ROS messages) · `cli`.
"""

__version__ = "0.1.0"
