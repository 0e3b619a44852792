"""Vocabularies and pure logic shared by every floor: SO-101 model, topics, labels, episode
metadata, clock, calibration, blending, safety, errors, config lookup, a progress bar. No ROS, no I/O
devices."""
