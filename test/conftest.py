"""Test-wide environment: DDS stays on this machine, every run gets its own domain."""
from __future__ import annotations

import os
import random

# Set before anything imports rclpy. A run's domain is fixed once so that child processes
# (simulators, recorders under test) started by a test join the same graph.
os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
os.environ.setdefault("ROS_DOMAIN_ID", str(random.Random(os.getpid()).randint(1, 100)))
os.environ.setdefault("RMW_IMPLEMENTATION", "rmw_fastrtps_cpp")
