"""Bring-up of a real SO-101 pair with this project's commands only: find the ports, give
factory-new servos their ids and baud, calibrate, find the cameras. Every command works against
`sim-bus` (which learns a factory-new servo, EEPROM locking and baud changes) and has a
non-interactive mode so tests and CI run it."""
