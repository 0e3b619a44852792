"""What an arm does when its driver stops: park, then let go (the default); hold; or let go.

A driver stops on Ctrl-C, SIGTERM or its supervisor's death (the parent-death signal is SIGTERM).
Letting go at once — what LeRobot's `disconnect` does — drops a raised SO-101: shoulder_lift carries
22 % of its servo's torque in gravity, and a limp joint falls to its stop (1.8 rad, measured on the
simulator). So by default the driver parks: it moves the arm to its rest pose through the command
guard (the soft start: the speed limit, goal − present bounded) and lets go only once every body
joint is there (the gripper is sent to its rest value but not waited for: an object in its jaws
may stop it). Why park and not hold by default: a holding arm keeps its servos powered with no driver
watching them (no fault latched, no temperature read, no watchdog) until somebody cuts the supply;
at rest the arm is safe limp and nothing is left running unwatched.

The rest pose is `ArmConfig.rest_pose`, else the pose the arm was found in at its first connect with
every servo limp: a pose in which the unpowered arm stayed put (on the simulator, and on a desk, the
folded arm on its stops). The arm holds instead of parking — torque left on, one line saying why —
when no rest pose is known (the driver found the arm holding, from an earlier run that kept it), when
the arm is held for a fault or an e-stop (moving it would undo the operator's stop or press a servo
that protected itself), or when the rest pose is not reached within `PARK_TIMEOUT_S` (blocked, or a
bus error): never a drop.
"""
from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from teleop_flywheel.core.clock import NS_PER_S, now_ns
from teleop_flywheel.core.so101 import BODY_JOINTS, JOINT_NAMES
from teleop_flywheel.hw.errors import BusError

if TYPE_CHECKING:
    from teleop_flywheel.hw.arm.driver import ArmDriver

PARK_TIMEOUT_S = 8.0  # the longest move (~3 rad at 2 rad/s) with room; well within a node's stop bound
PARK_RATE_HZ = 100.0
ARRIVED_RAD = 0.1  # every body joint this close to its rest goal (gravity sags shoulder and elbow ~0.05 rad)
# The gripper is sent to its rest value but not waited for: an object in its jaws may stop it, and
# limp it holds nothing up.
BODY = [JOINT_NAMES.index(name) for name in BODY_JOINTS]


def park(driver: ArmDriver, rest: Sequence[float] | None) -> str:
    """Move the arm to `rest` through its guard; "" once there, else why it was not parked (the
    arm then holds where it is). Call on the thread that owns the bus, after `run()` returned."""
    if rest is None:
        return "no rest pose known (the arm was found holding at start; set rest_pose)"
    if driver.state.holding:
        return f"held ({driver.state.holding})"
    bounds = [driver.guard.limits.bounds.get(name) for name in JOINT_NAMES]
    goal = [min(b[1], max(b[0], r)) if b else r for r, b in zip(rest, bounds, strict=True)]
    deadline = now_ns() + int(PARK_TIMEOUT_S * NS_PER_S)
    try:
        while now_ns() < deadline:
            driver.command(JOINT_NAMES, goal, now_ns())
            reading = driver.tick()
            if driver.state.holding:
                return f"held while parking ({driver.state.holding})"
            sent = driver.guard.sent or []
            if (len(reading.names) == len(JOINT_NAMES)
                    and all(abs(s - g) < 1e-9 for s, g in zip(sent, goal, strict=True))
                    and all(abs(reading.positions[i] - goal[i]) < ARRIVED_RAD for i in BODY)):
                return ""
            time.sleep(1.0 / PARK_RATE_HZ)
    except BusError as exc:
        return f"bus error while parking ({exc})"
    return f"the rest pose was not reached within {PARK_TIMEOUT_S:g} s"
