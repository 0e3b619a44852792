"""Vocabularies and pure logic shared by every floor: SO-101 model, topics, labels, episode
metadata, clock, calibration, blending, safety, errors, config lookup. No ROS, no I/O devices."""
