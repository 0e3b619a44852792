"""The SO-101 description, importable as package data `teleop_flywheel.urdf` (see core/resources.py)."""
