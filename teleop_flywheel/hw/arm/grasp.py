"""Force-limited grasp: a commanded close stops pressing once the gripper's load crosses a limit.

A position-controlled gripper told to close fully on an object presses with all the torque it has
until its overload protection trips (or it burns). The servo's load is its position loop's effort,
proportional to how far the goal is beyond where the jaws are, so the goal is kept just beyond the
jaws: on contact (load at the limit, pressing, the jaws stopped — slow and not gaining speed
toward the goal since the last tick: jaws getting going from rest are slow and loaded too, by
the lag of their acceleration, and are not on anything; jaws still at the tick before count only
if they were pressing then too: a goal that jumped loads them a reading before they move) the
written goal becomes
`present + direction × squeeze`, and `squeeze` is scaled each tick so the load settles at
`HOLD_FRACTION` of the limit. A command that opens, or one that no longer reaches as deep, is
passed through; jaws that move again (the object is gone) end the contact.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from teleop_flywheel.core.calibration import RAD_PER_STEP

HOLD_FRACTION = 0.8  # of the limit: the load held on an object
# Jaws slower than this are on something. Not faster: the gripper runs at half torque, so jaws a
# hand closes at 0.4-0.5 rad/s in free air lag their goal by a load at the force limit.
STALLED_RAD_S = 0.1
ADJUST = (0.7, 1.3)  # bounds of one tick's squeeze correction (a noisy load moves it a little)
# Present_Velocity's resolution (1 step/s): a speed toward the goal that grew by more since the last
# tick is jaws accelerating (at the default Acceleration, 50 steps/s more per 5 ms tick), not stopped.
GAINING = RAD_PER_STEP


def stopped(velocity: float, toward: float, before: float | None, pressing_before: bool) -> bool:
    """Jaws on something: slower than `STALLED_RAD_S` and not gaining speed toward where they press
    (`toward`, rad/s) since the last reading (`before`; None: no reading yet, nothing said), and if
    they stood still then (within Present_Velocity's one step/s), pressing then too
    (`pressing_before`, by the caller's threshold): jaws at rest told to move show the load a
    reading before the speed (measured: a grasp rendered for a tick of free motion, 1 in 18 runs)."""
    return (abs(velocity) < STALLED_RAD_S and before is not None and toward <= before + GAINING
            and (abs(before) > GAINING or pressing_before))


@dataclass
class Grasp:
    """One gripper's contact state; `goal()` each tick with the guard's goal (radians)."""

    limit: float  # |effort| (fraction of max torque) that means contact; 0 = off
    direction: float = 0.0  # +1 / -1 while pressing on an object, 0 otherwise
    squeeze: float = 0.0  # rad beyond the jaws while in contact
    toward: float | None = None  # the jaws' speed toward the goal at the last tick (rad/s; None: no tick yet)
    pressed: bool = False  # at the last tick the jaws' load was at the limit, pressing

    @property
    def holding(self) -> bool:
        return self.direction != 0.0

    def goal(self, goal: float, present: float, effort: float, velocity: float) -> float:
        if self.limit <= 0:
            return goal
        depth = goal - present
        toward = velocity if depth > 0 else -velocity
        before, self.toward = self.toward, toward
        pressed = abs(effort) >= self.limit and effort * depth > 0
        pressed_before, self.pressed = self.pressed, pressed
        if not self.holding:
            if pressed and stopped(velocity, toward, before, pressed_before):
                self.direction = math.copysign(1.0, depth)
                self.squeeze = abs(depth) * HOLD_FRACTION * self.limit / abs(effort)
            else:
                return goal
        reach = depth * self.direction
        if reach <= 0 or abs(velocity) >= STALLED_RAD_S:  # opening, or nothing between the jaws any more
            self.direction = 0.0
            return goal
        if abs(effort) > 1e-3:
            ratio = HOLD_FRACTION * self.limit / abs(effort)
            self.squeeze *= min(max(ratio, ADJUST[0]), ADJUST[1])
        return present + self.direction * min(self.squeeze, reach)
