"""Every error the evaluation floor raises on purpose: a protocol file, a staged-rollout plan, or
trials that cannot make one table. Callers catch them by name without importing the module that
raised them. Each is a `FlywheelError` (exit 2) naming the file and the field or trial at fault,
with a `fix` where one is known.
"""
from __future__ import annotations

from teleop_flywheel.core.errors import FlywheelError


class ProtocolError(FlywheelError, ValueError):
    """A protocol file that cannot be used; the message names the file and the field."""

    fix = 'config/eval_example.yaml shows every field'


class RolloutError(FlywheelError, ValueError):
    """A plan that cannot be used, or episodes that contradict it; names the file (exit 2)."""

    fix = "write a plan with `teleop-flywheel rollout plan` (docs/evaluation.md#staged-rollout)"


class EvalError(FlywheelError, ValueError):
    """Trials that cannot make one table (no metadata, another protocol, the same recording twice)."""
