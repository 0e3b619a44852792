"""Hardware without ROS: the Feetech servo bus (codec, bus, simulator), cameras, the foot pedal
and the arm driver that ties a bus to a calibration and a safety guard."""
