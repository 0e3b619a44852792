"""The error the fleet floor raises on purpose: a metrics address that is not HOST:PORT.

`AddressError` is a plain `ValueError`, not a `FlywheelError`: no command shows it as it is; the
metrics node turns it into the parameter error that names the node and the parameter
(`ros/nodes/metrics.py`).
"""
from __future__ import annotations


class AddressError(ValueError):
    """A metrics address that is not HOST:PORT."""
