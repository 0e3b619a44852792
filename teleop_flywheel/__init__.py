"""teleop_flywheel: SO-101 teleoperation, blended takeover, raw recording and a data engine.

Floors (each imports only the ones above it in this list; `test/test_architecture.py` enforces it):
`core` (vocabularies, clock, calibration, blending, safety) · `hw` (servo bus, cameras, pedal, arm
driver) · `policies` · `recording` (one writer, one reader, one CDR codec) · `evaluation` · `data`
(the engine) · `testing` (synthetic fixtures) · `ros` (thin nodes and sessions: the only floor that
imports rclpy or ROS messages) · `cli`.

Importing the package keeps numpy's BLAS on one thread (unless `OPENBLAS_NUM_THREADS` is already
set): our matrices are small (a camera-lag fit is ~600×50) and our parallelism is processes, one
per episode. OpenBLAS's threads spin for a core that a busy rig machine does not have: with two
other processes on the two cores, the camera-lag estimate of a 20 s episode took 18.7 s threaded
against 1.6 s on one thread. Only a numpy imported after the package is affected.
"""
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

__version__ = "0.1.0"
