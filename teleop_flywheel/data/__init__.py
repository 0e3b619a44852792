"""The data engine (no ROS): validate, align, convert to LeRobot v3.0, audit, curate, manifests,
lineage, data cards, flywheel statistics, parallel execution."""
