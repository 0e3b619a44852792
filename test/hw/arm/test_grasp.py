"""`grasp.Grasp` on the traces a gripper's readings make, tick by tick (5 ms): jaws getting going
from rest, jaws stopping on an object, jaws resting on one."""
from __future__ import annotations

from teleop_flywheel.hw.arm.grasp import Grasp, stopped

TICK_S = 0.005
ACCEL = 15.0  # rad/s²: the driver's default Acceleration (100 steps/s²·100)


def test_jaws_accelerating_from_rest_under_load_are_not_a_grasp() -> None:
    """Closing (toward lower radians) from rest: the load is at the limit by the acceleration's lag
    while the speed is still below the stall speed for several ticks."""
    grasp = Grasp(0.2)
    present, goal = 1.0, 0.4
    for k in range(6):
        speed = ACCEL * TICK_S * k  # 0 … 0.375 rad/s: below STALLED_RAD_S throughout
        out = grasp.goal(goal, present, effort=-0.5, velocity=-speed)
        assert out == goal and not grasp.holding, f"tick {k}: taken for a grasp at {speed:.3f} rad/s"
        present -= speed * TICK_S


def test_jaws_at_rest_told_to_move_are_not_a_grasp_the_reading_before_they_move() -> None:
    """Open and unloaded, then the goal jumps: the next reading shows the load (the position loop
    pushes at once) and no speed yet (the servo's acceleration ramp), the one after the jaws moving.
    Before, that one loaded reading at rest was a grasp: the follower held its goal back for a tick
    and a leader rendered the grasp in the trigger for a tick of free motion."""
    grasp = Grasp(0.2)
    present, goal = 1.0, 0.4
    grasp.goal(present, present, effort=0.0, velocity=0.0)
    out = grasp.goal(goal, present, effort=-0.5, velocity=0.0)
    assert out == goal and not grasp.holding, "a goal that jumped, taken for a grasp"
    out = grasp.goal(goal, present, effort=-0.5, velocity=-0.075)
    assert out == goal and not grasp.holding
    assert not stopped(0.0, 0.0, 0.0, pressing_before=False)
    assert stopped(0.0, 0.0, 0.0, pressing_before=True), "still and pressing twice: on something"
    assert stopped(0.0, 0.0, 0.5, pressing_before=False), "moving, then still: stopped on something at once"


def test_jaws_a_hand_closes_in_free_air_are_not_a_grasp() -> None:
    """At a hand's pace (0.4 rad/s, steady) the half-torque gripper lags its goal by a load at the
    limit: slower than the old stall speed (0.5 rad/s), it crept shut under the force limit."""
    grasp = Grasp(0.2)
    present = 1.0
    for k in range(20):
        out = grasp.goal(present - 0.04, present, effort=-0.21, velocity=-0.4)
        assert out == present - 0.04 and not grasp.holding, f"tick {k}: taken for a grasp"
        present -= 0.4 * TICK_S


def test_jaws_stopping_on_an_object_or_resting_on_one_are_a_grasp() -> None:
    stopping = Grasp(0.2)
    for speed in (1.0, 0.6, 0.3, 0.05, 0.0):
        out = stopping.goal(0.4, 0.8, effort=-0.5, velocity=-speed)
    assert stopping.holding and 0.4 < out < 0.8, "the goal kept just beyond the jaws"
    resting = Grasp(0.2)
    resting.goal(0.4, 0.8, effort=-0.5, velocity=0.0)
    assert not resting.holding, "one tick says nothing of how the speed changes"
    resting.goal(0.4, 0.8, effort=-0.5, velocity=0.0)
    assert resting.holding, "at rest, loaded, not gaining speed: on something"
