"""Foot pedal: Linux input events (struct input_event) to debounced pedal and label presses."""
