"""Shipped configuration, importable as package data `teleop_flywheel.config` (see core/resources.py)."""
