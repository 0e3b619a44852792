"""`rendering.ExpectedLoad` and `rendering.Contact` on synthetic follower samples: what free motion
teaches the fit, and when a body joint resists (and never pulls toward an obstacle)."""
from __future__ import annotations

import math
import random
from dataclasses import replace

import pytest

from teleop_flywheel.hw.arm.rendering import (
    FREE_TRACK,
    MIN_CEILING,
    SETTLE_SAMPLES,
    STALL_SAMPLES,
    WARMUP,
    Contact,
    ContactGains,
    ExpectedLoad,
    Felt,
    features,
)

LIFT = 1  # shoulder_lift: gravity and speed both load it
LEARNED_NS = (SETTLE_SAMPLES + WARMUP) * 5_000_000  # the last sample `learned()` feels: one every 5 ms


def free_load(positions: list[float], velocities: list[float]) -> float:
    """A follower's shoulder_lift load in free motion: gravity by the pose, lag by the speed."""
    return -0.22 * math.cos(positions[1]) + 0.2 * velocities[1]


def sample(rng: random.Random) -> tuple[list[float], list[float]]:
    positions = [rng.uniform(-1.0, 1.0) for _ in range(6)]
    velocities = [rng.uniform(-1.0, 1.0) for _ in range(6)]
    return positions, velocities


def test_the_fit_learns_gravity_and_lag_from_free_readings() -> None:
    rng = random.Random(1)
    model = ExpectedLoad()
    for _ in range(WARMUP):
        positions, velocities = sample(rng)
        model.learn(features(positions, velocities, LIFT), free_load(positions, velocities))
    for _ in range(50):
        positions, velocities = sample(rng)
        assert model.predict(features(positions, velocities, LIFT)) == pytest.approx(
            free_load(positions, velocities), abs=0.01)


def learned(gains: ContactGains | None = None) -> Contact:
    """A Contact that learned free motion: the follower where the leader is, loaded as free motion loads it."""
    contact = Contact(gains or ContactGains(), [0, 1, 2, 3, 4], keep=0.5)
    rng = random.Random(2)
    stamp = 0
    while not contact.ready:
        positions, velocities = sample(rng)
        efforts = [free_load(positions, velocities)] * 6
        stamp += 5_000_000
        felt = Felt(tuple(positions), tuple(efforts), tuple(velocities), stamp)
        assert contact.render(felt, positions, set()) == {}
        assert contact.render(felt, positions, set()) == {}, "a sample seen twice is learned once"
    assert stamp == LEARNED_NS, "ready after WARMUP samples learned (once settled), not WARMUP ticks"
    return contact


def pushed(excess: float, beyond: float, speed: float = 0.0) -> tuple[Felt, list[float]]:
    """The follower at a pose, still (or its shoulder_lift moving at `speed` rad/s), its
    shoulder_lift `excess` beyond the free load; the leader `beyond` rad past it on that joint
    (positive: in the direction the follower pushes)."""
    positions = [0.1, 0.3, -0.2, 0.0, 0.0, 0.0]
    velocities = [0.0] * 6
    velocities[LIFT] = speed
    efforts = [free_load(positions, velocities)] * 6
    efforts[LIFT] += excess
    leader = list(positions)
    leader[LIFT] += beyond * math.copysign(1.0, excess)
    return Felt(tuple(positions), tuple(efforts), tuple(velocities), 0), leader


def test_a_joint_resists_an_excess_load_with_a_ceiling_growing_up_to_the_limit() -> None:
    """The ceiling is the gain times the excess above where the joint would let go (half the
    threshold): the threshold says the follower meets something, it is not taken off what the
    hand feels of it; capped, and never below MIN_CEILING."""
    contact = learned(ContactGains(load=0.15, gain=0.4, ceiling=150))
    felt, leader = pushed(0.25, 0.05)
    assert contact.render(felt, leader, set()) == {LIFT: (felt.positions[LIFT], 70)}, "0.4 x (0.25 - 0.075)"
    felt, leader = pushed(-0.6, 0.05)
    assert contact.render(felt, leader, set()) == {LIFT: (felt.positions[LIFT], 150)}, "either way; capped"
    weak = learned(ContactGains(load=0.15, gain=0.05, ceiling=150))
    felt, leader = pushed(0.16, 0.05)
    assert weak.render(felt, leader, set())[LIFT][1] == MIN_CEILING


def test_a_stalled_follower_is_felt_at_half_the_load_a_moving_one_needs() -> None:
    """A follower joint standing still while the hand is beyond it is blocked: its load, rising
    toward the threshold free motion needs, renders from half of it, the ceiling the same gain
    times the excess above where it lets go, and is kept down to half of that; a moving one with
    the same load does not render."""
    contact = learned(ContactGains(load=0.15, gain=1.0, ceiling=150))
    stamp = 10**12
    for k in range(STALL_SAMPLES):
        felt, leader = pushed(0.1175, 0.05)
        got = contact.render(replace(felt, stamp_ns=stamp + k), leader, set())
        assert (LIFT in got) is (k == STALL_SAMPLES - 1), f"sample {k}: renders once still for {STALL_SAMPLES}"
    assert got[LIFT][1] == 80, "1000 x gain x (0.1175 - 0.0375): all above where it lets go"
    felt, leader = pushed(0.05, 0.05)
    assert LIFT in contact.render(replace(felt, stamp_ns=stamp + STALL_SAMPLES), leader, {LIFT}), "kept to 0.0375"
    moving = learned()
    for k in range(3 * STALL_SAMPLES):
        felt, leader = pushed(0.11, 0.05, speed=0.3)
        assert moving.render(replace(felt, stamp_ns=stamp + k), leader, set()) == {}, "moving: free motion's threshold"


def test_no_joint_resists_below_the_threshold_or_pulls_toward_the_obstacle() -> None:
    contact = learned()
    felt, leader = pushed(0.1, 0.05)
    assert contact.render(felt, leader, set()) == {}, "within what free motion misses"
    felt, leader = pushed(0.4, -0.05)  # the hand back behind the follower: a spring would pull it on
    assert contact.render(felt, leader, set()) == {}
    felt, leader = pushed(0.1, 0.05)
    assert LIFT in contact.render(felt, leader, {LIFT}), "once rendering, kept down to half the threshold"


def test_a_follower_far_from_the_leader_or_pressing_is_not_learned_as_free() -> None:
    contact = Contact(ContactGains(), [0, 1, 2, 3, 4], keep=0.5)
    felt, leader = pushed(0.5, 2 * FREE_TRACK)  # a soft start's catch-up, loaded
    for k in range(WARMUP):
        contact.render(replace(felt, stamp_ns=k), leader, set())
    assert not contact.ready and contact.models[LIFT].samples == 0
    learned_contact = learned()
    samples = learned_contact.models[LIFT].samples
    felt, leader = pushed(0.4, 0.05)
    learned_contact.render(replace(felt, stamp_ns=-1), leader, set())
    assert learned_contact.models[LIFT].samples == samples, "a contact is not learned as normal"


def test_a_follower_catching_up_after_its_news_paused_is_not_judged_until_it_settled() -> None:
    """Its news paused past the command watchdog (the follower held while the hand moved on), a
    follower catches up: accelerating, loaded beyond free motion's fit, not meeting anything. A
    moving joint is judged again once it has tracked `SETTLE_SAMPLES` more; one standing still on
    something at once."""
    felt, leader = pushed(0.2, 0.05, speed=0.3)
    contact = learned()
    assert LIFT in contact.render(replace(felt, stamp_ns=LEARNED_NS + 5_000_000), leader, set()), "no gap: judged"
    contact = learned()
    after = LEARNED_NS + 200_000_000
    for k in range(SETTLE_SAMPLES + 2):  # the first after the gap, then SETTLE_SAMPLES tracking
        got = contact.render(replace(felt, stamp_ns=after + k * 5_000_000), leader, set())
        assert (LIFT in got) is (k == SETTLE_SAMPLES + 1), f"sample {k} after the gap"
    contact = learned()
    still, leader = pushed(0.2, 0.05)
    got = [LIFT in contact.render(replace(still, stamp_ns=after + k * 5_000_000), leader, set())
           for k in range(STALL_SAMPLES)]
    assert got == [False] * (STALL_SAMPLES - 1) + [True], "standing still: judged once stalled"
