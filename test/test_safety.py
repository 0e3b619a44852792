"""CommandGuard: each safety rule shown acting on its own (pure, no ROS)."""
from __future__ import annotations

import pytest

from teleop_flywheel.core.safety import CommandGuard, JointLimits, limit_step

NAMES = ["a", "b"]
MS = 1_000_000


def test_limits_clamp_target() -> None:
    guard = CommandGuard(NAMES, JointLimits.from_dict({"a": (-1.0, 1.0)}))
    guard.command(NAMES, [5.0, -7.0], 0)
    assert guard.step([0.0, 0.0], 1) == [1.0, -7.0]
    assert guard.stats.clamped == 1


def test_max_step_rate_limits_toward_target() -> None:
    guard = CommandGuard(NAMES, JointLimits.unbounded(), max_step=0.1)
    guard.command(NAMES, [1.0, -0.05], 0)
    outs = [guard.step([0.0, 0.0], i) for i in range(12)]
    assert outs[0] == pytest.approx([0.1, -0.05])
    assert outs[4] == pytest.approx([0.5, -0.05])
    assert outs[-1] == pytest.approx([1.0, -0.05])
    assert limit_step(0.0, -3.0, 0.5) == -0.5


def test_watchdog_holds_last_sent_and_drops_old_target() -> None:
    guard = CommandGuard(NAMES, JointLimits.unbounded(), max_step=0.1, watchdog_ns=100 * MS)
    guard.command(NAMES, [1.0, 1.0], 0)
    assert guard.step([0.0, 0.0], 10 * MS) == pytest.approx([0.1, 0.1])
    assert not guard.stale(100 * MS)
    assert guard.stale(101 * MS)
    held = guard.step([0.0, 0.0], 150 * MS)
    assert held == pytest.approx([0.1, 0.1])
    assert guard.step([0.0, 0.0], 160 * MS) == pytest.approx([0.1, 0.1])
    # a fresh command for one joint moves only that joint; the stale target is not resumed
    guard.command(["a"], [0.0], 200 * MS)
    assert guard.step([0.0, 0.0], 201 * MS) == pytest.approx([0.0, 0.1])


def test_holds_current_before_first_command_and_after_reset() -> None:
    guard = CommandGuard(NAMES, JointLimits.unbounded(), watchdog_ns=MS)
    assert guard.step([0.3, 0.4], 0) == [0.3, 0.4]
    guard.command(NAMES, [1.0, 1.0], 0)
    guard.reset([0.2, 0.2])
    assert not guard.has_command
    assert guard.step([9.0, 9.0], 1) == [0.2, 0.2]


def test_bad_parameters_rejected() -> None:
    with pytest.raises(ValueError, match="max_step"):
        CommandGuard(NAMES, JointLimits.unbounded(), max_step=0.0)
    with pytest.raises(ValueError, match="'a'"):
        JointLimits.from_dict({"a": (1.0, -1.0)})


def test_restart_from_keeps_target_and_watchdog() -> None:
    guard = CommandGuard(NAMES, JointLimits.unbounded(), max_step=0.1, watchdog_ns=100 * MS)
    guard.command(NAMES, [1.0, 1.0], 0)
    guard.restart_from([0.5, 0.5])
    assert guard.step([9.0, 9.0], MS) == pytest.approx([0.6, 0.6])
    assert guard.stale(101 * MS)


def test_hold_stops_a_rate_limited_move_where_it_is() -> None:
    guard = CommandGuard(NAMES, JointLimits.unbounded(), max_step=0.1)
    guard.command(NAMES, [1.0, 1.0], 0)
    assert guard.step([0.0, 0.0], 0) == pytest.approx([0.1, 0.1])
    assert guard.step([0.0, 0.0], 1) == pytest.approx([0.2, 0.2])
    guard.hold()
    assert guard.step([0.0, 0.0], 2) == pytest.approx([0.2, 0.2])
    assert guard.step([0.0, 0.0], 3) == pytest.approx([0.2, 0.2])
    guard.command(NAMES, [1.0, 1.0], 4)  # a fresh command moves on from there
    assert guard.step([0.0, 0.0], 4) == pytest.approx([0.3, 0.3])
