"""One root for every error the project raises on purpose.

Each specific error also keeps its natural built-in base (ValueError for bad input, RuntimeError
for a failed operation, OSError for the disk), so callers that catch those keep working, while
the CLI catches `FlywheelError` once and prints its one-line message instead of a traceback.
"""
from __future__ import annotations


class FlywheelError(Exception):
    """An expected failure whose message names the file/port/node and the reason."""
