"""Fixtures of the tests of ros/."""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture
def context() -> Iterator[Any]:
    """An rclpy context of the test's own, shut down after it."""
    rclpy = pytest.importorskip("rclpy")
    ctx = rclpy.Context()
    rclpy.init(context=ctx, args=[])
    yield ctx
    ctx.shutdown()
