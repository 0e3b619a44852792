"""CommandGuard: each safety rule shown acting on its own (pure, no ROS)."""
from __future__ import annotations

from itertools import pairwise

import pytest

from teleop_flywheel.core.safety import TURN_RAD, CommandGuard, JointLimits, limit_step, nearest_turn

NAMES = ["a", "b"]
MS = 1_000_000


def test_limits_clamp_target() -> None:
    guard = CommandGuard(NAMES, JointLimits.from_dict({"a": (-1.0, 1.0)}))
    guard.command(NAMES, [5.0, -7.0], 0)
    assert guard.step([0.0, 0.0], 1) == [1.0, -7.0]
    assert guard.stats.clamped == 1


def test_speed_limit_in_rad_per_second_whatever_the_tick_rate() -> None:
    """A far target is approached at max_speed over monotonic time, at 200 Hz as at 50 Hz."""
    for period_ms in (5, 20):
        guard = CommandGuard(NAMES, JointLimits.unbounded(), max_speed=2.0)
        guard.command(NAMES, [1.5, -0.005], 0)
        outs = [guard.step([0.0, 0.0], i * period_ms * MS) for i in range(1001 // period_ms)]
        assert outs[0] == [0.0, 0.0]  # the first step has no elapsed time: it holds
        speeds = [abs(b[0] - a[0]) / (period_ms / 1e3) for a, b in pairwise(outs)]
        assert max(speeds) == pytest.approx(2.0)
        assert outs[500 // period_ms][0] == pytest.approx(1.0)  # 0.5 s at 2 rad/s
        assert outs[-1] == pytest.approx([1.5, -0.005])
        assert guard.stats.rate_limited > 0
    assert limit_step(0.0, -3.0, 0.5) == -0.5


def test_a_stalled_loop_earns_no_jump() -> None:
    guard = CommandGuard(NAMES, JointLimits.unbounded(), max_speed=2.0, max_dt_ns=50 * MS)
    guard.command(NAMES, [3.0, 3.0], 0)
    guard.step([0.0, 0.0], 0)
    assert guard.step([0.0, 0.0], 2000 * MS) == pytest.approx([0.1, 0.1])  # 2 s late: 50 ms worth


def test_goal_stays_within_max_relative_of_present() -> None:
    """LeRobot's max_relative_target: a blocked joint is never asked for more than the bound."""
    guard = CommandGuard(NAMES, JointLimits.unbounded(), max_speed=2.0, max_relative=0.3)
    guard.command(NAMES, [1.0, 0.1], 0)
    out = [guard.step([0.0, 0.0], i * 5 * MS) for i in range(200)]  # the arm never moves
    assert out[-1] == pytest.approx([0.3, 0.1])
    assert guard.stats.relative_limited > 0
    # Free again, far from its goal: the goal is pulled to within the bound, then moves on at speed.
    assert guard.step([0.9, 0.1], 1000 * MS) == pytest.approx([0.6, 0.1])
    assert guard.step([0.9, 0.1], 1100 * MS) == pytest.approx([0.7, 0.1])


def test_watchdog_holds_last_sent_and_drops_old_target() -> None:
    guard = CommandGuard(NAMES, JointLimits.unbounded(), max_speed=10.0, watchdog_ns=100 * MS)
    guard.command(NAMES, [1.0, 1.0], 0)
    guard.step([0.0, 0.0], 0)
    assert guard.step([0.0, 0.0], 10 * MS) == pytest.approx([0.1, 0.1])
    assert not guard.stale(100 * MS)
    assert guard.stale(101 * MS)
    held = guard.step([0.0, 0.0], 150 * MS)
    assert held == pytest.approx([0.1, 0.1])
    assert guard.step([0.0, 0.0], 160 * MS) == pytest.approx([0.1, 0.1])
    # a fresh command for one joint moves only that joint; the stale target is not resumed
    guard.command(["a"], [0.0], 200 * MS)
    assert guard.step([0.0, 0.0], 170 * MS) == pytest.approx([0.0, 0.1])


def test_holds_present_before_first_command_and_after_reset() -> None:
    guard = CommandGuard(NAMES, JointLimits.unbounded(), watchdog_ns=MS)
    assert guard.step([0.3, 0.4], 0) == [0.3, 0.4]
    guard.command(NAMES, [1.0, 1.0], 0)
    guard.reset([0.2, 0.2])
    assert not guard.has_command
    assert guard.step([9.0, 9.0], 1) == [0.2, 0.2]


def test_bad_parameters_rejected() -> None:
    for kw in ("max_speed", "max_relative", "watchdog_ns"):
        with pytest.raises(ValueError, match=kw):
            CommandGuard(NAMES, JointLimits.unbounded(), **{kw: 0})
    with pytest.raises(ValueError, match="'a'"):
        JointLimits.from_dict({"a": (1.0, -1.0)})


def test_restart_from_keeps_target_and_watchdog() -> None:
    guard = CommandGuard(NAMES, JointLimits.unbounded(), max_speed=10.0, watchdog_ns=100 * MS)
    guard.command(NAMES, [1.0, 1.0], 0)
    guard.step([0.0, 0.0], 0)
    guard.restart_from([0.5, 0.5])
    assert guard.step([0.5, 0.5], MS) == [0.5, 0.5]  # moves from the restart point, after time passes
    assert guard.step([0.5, 0.5], 11 * MS) == pytest.approx([0.6, 0.6])
    assert guard.stale(101 * MS)


def test_hold_stops_a_rate_limited_move_where_it_is() -> None:
    guard = CommandGuard(NAMES, JointLimits.unbounded(), max_speed=10.0)
    guard.command(NAMES, [1.0, 1.0], 0)
    guard.step([0.0, 0.0], 0)
    assert guard.step([0.0, 0.0], 10 * MS) == pytest.approx([0.1, 0.1])
    assert guard.step([0.0, 0.0], 20 * MS) == pytest.approx([0.2, 0.2])
    guard.hold()
    assert guard.step([0.0, 0.0], 30 * MS) == pytest.approx([0.2, 0.2])
    assert guard.step([0.0, 0.0], 40 * MS) == pytest.approx([0.2, 0.2])
    guard.command(NAMES, [1.0, 1.0], 40 * MS)  # a fresh command moves on from there
    assert guard.step([0.0, 0.0], 50 * MS) == pytest.approx([0.3, 0.3])


def test_a_command_with_nan_is_dropped_whole_and_does_not_feed_the_watchdog() -> None:
    """A broken sender's NaN is not a sign of life: its last good target goes stale and holds."""
    guard = CommandGuard(NAMES, JointLimits.unbounded(), max_speed=10.0, watchdog_ns=100 * MS)
    assert guard.command(NAMES, [1.0, 1.0], 0)
    guard.step([0.0, 0.0], 0)
    for k in range(1, 30):  # NaN (and inf) every 10 ms for 290 ms
        assert not guard.command(NAMES, [float("nan") if k % 2 else float("inf"), 0.5], k * 10 * MS)
    assert guard.stats.rejected == 29 and guard.stats.commands == 1
    assert guard.last_command_ns == 0 and guard.stale(150 * MS)
    assert guard.step([0.0, 0.0], 10 * MS) == pytest.approx([0.1, 0.1])  # b kept its good target, not 0.5
    assert guard.step([0.0, 0.0], 150 * MS) == pytest.approx([0.1, 0.1])  # stale: held where it was sent
    assert guard.step([0.0, 0.0], 300 * MS) == pytest.approx([0.1, 0.1])


def test_a_full_turn_joint_takes_the_short_way_within_its_range() -> None:
    """wrist_roll: a target a turn away as read is the same pose; the short way leaves the range
    here, so it stops at the range's end instead of turning the long way round."""
    turn = TURN_RAD
    limits = JointLimits.from_dict({"wrist_roll": (-turn / 2, turn / 2), "a": (-turn / 2, turn / 2)})
    guard = CommandGuard(["wrist_roll", "a"], limits, max_speed=2.0)
    guard.step([-3.10, -3.10], 0)
    guard.command(["wrist_roll", "a"], [3.12, 3.12], 0)  # 0.06 rad apart across the seam
    out = [guard.step([-3.10, -3.10], k * 10 * MS) for k in range(1, 400)]
    assert out[-1][0] == pytest.approx(-turn / 2) and min(o[0] for o in out) >= -turn / 2
    assert out[-1][1] == pytest.approx(3.12)  # a joint with end stops goes where it is told
    guard.command(["wrist_roll"], [3.12 + 0.5], 0)  # a turn on from -2.66, inside the range: followed there
    out = [guard.step([-3.10, -3.10], (400 + k) * 10 * MS) for k in range(1, 100)]
    assert out[-1][0] == pytest.approx(3.62 - turn) and max(o[0] for o in out) <= 3.62 - turn + 1e-9
    assert nearest_turn(3.0 + turn, 2.9) == pytest.approx(3.0)
    assert nearest_turn(-3.1, 3.1) == pytest.approx(-3.1 + turn)
