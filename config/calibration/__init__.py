"""Shipped calibration files (package data)."""
