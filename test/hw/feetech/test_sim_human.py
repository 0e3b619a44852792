"""The simulator's scripted human: on a leader, an operator at work (reaches with pauses, grasps),
whose starts, stops and grasps time a camera from its images; asked to move an arm for `calibrate`,
a slow sweep of every joint through its travel."""
from __future__ import annotations

import math

import numpy as np

from teleop_flywheel.hw.feetech.sim import SimulatedArm
from teleop_flywheel.hw.feetech.sim.servo import JOINT_RANGES, SERVO_IDS, STEPS_PER_RAD, default_human, reaching_human

T = np.arange(0.0, 20.0, 0.01)


def stills(poses: np.ndarray, at_least_s: float = 0.1) -> int:
    """Stretches of at least `at_least_s` in which no joint moves."""
    still = np.r_[np.abs(np.diff(poses, axis=0)).max(axis=1) < 1e-6, False]
    runs, n = 0, 0
    for s in still:
        n = n + 1 if s else 0
        runs += n == round(at_least_s / 0.01)
    return runs


def test_the_operator_at_work_reaches_pauses_and_grasps() -> None:
    poses = np.array([reaching_human(3)(t) for t in T])
    assert stills(poses) >= 12, "a pause after every reach (0.5-1 s moves, 0.1-0.4 s pauses): ~15 in 20 s"
    moving = np.abs(np.diff(poses[:, :5], axis=0)) > 1e-6  # the gripper stays shut, or open, across some moves
    assert (moving.all(axis=1) | ~moving.any(axis=1)).mean() > 0.99, "the body's joints start and stop together"
    lo, hi = np.array([JOINT_RANGES[s] for s in SERVO_IDS]).T
    assert (poses >= lo).all() and (poses <= hi).all()
    grip = poses[:, 5]
    assert grip.max() - grip.min() > 0.9 * STEPS_PER_RAD, "the gripper closes and opens"
    # The same seed moves the same way, whatever order it is asked in (the plan grows as time runs).
    again = reaching_human(3)
    late = again(17.3)
    assert again(2.0) == list(poses[200]) and again(17.3) == late == list(poses[1730])
    assert not np.allclose(np.array([reaching_human(4)(t) for t in T]), poses)


def test_the_sweep_is_never_still() -> None:
    """The sweep `calibrate` asks for (every joint through most of its travel) has no pause at all."""
    poses = np.array([default_human(t) for t in T])
    assert stills(poses, 0.05) == 0
    assert all(math.isfinite(x) for x in poses.ravel())


def test_a_leader_s_human_reaches_and_one_asked_to_calibrate_sweeps() -> None:
    assert SimulatedArm("leader").human_motion == "reach"
    assert SimulatedArm("follower", human=True).human_motion == "sinusoid"
    assert SimulatedArm("leader", human=True).human_motion == "sinusoid"
    assert SimulatedArm("leader", human_motion="sinusoid").human_motion == "sinusoid"
