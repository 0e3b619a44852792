"""The bus never returns a stale, torn or invented value, whatever the servos do.

`AdversarialServos` (teleop_flywheel/testing) answers on a real pty, with the wire's timing, with
replies that carry the request they answer; every value the bus returns as valid must be the
answer to the newest request the servo saw, and a write the bus confirms must have been made.
Calls must end within their deadline with typed errors only, and the bus must recover once the
line is clean again.
"""
from __future__ import annotations

import random
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from teleop_flywheel.hw.errors import BusTimeout, ServoError
from teleop_flywheel.hw.feetech.bus import FeetechBus
from teleop_flywheel.testing.adversarial_servo import AdversarialServos, Behaviour, Plan

IDS = (1, 2, 3, 4, 5, 6)
TIMEOUT_S = 0.01
SLACK_S = 0.25  # scheduling on a loaded 2-core machine, beyond the bus's own bound
# An outside review's adversary: replies up to ~50 ms late (past the 20 ms timeout), copies a few ms
# after their original (after the host's next request, at the arm driver's 5 ms period).
LATE_S = (0.025, 0.05)
DUPLICATE_S = (0.003, 0.006)
ARM_PERIOD_S = 0.005


def _scripted(behaviours: list[Behaviour]) -> Plan:
    def plan(_sid: int, counter: int) -> Behaviour:
        return behaviours[counter % len(behaviours)]
    return plan


def _random_plan(seed: int, late: float, duplicate: float, silent: float = 0.0) -> Plan:
    """Per request (all servos of a sync read alike): late, duplicated, lost or on time."""
    rng = random.Random(seed)
    kinds = [Behaviour.LATE, Behaviour.DUPLICATE, Behaviour.SILENT, Behaviour.OK]
    weights = [late, duplicate, silent, 1.0 - late - duplicate - silent]
    schedule = rng.choices(kinds, weights, k=997)
    return lambda _sid, counter: schedule[counter % len(schedule)]


def _check_call(bus: FeetechBus, servos: AdversarialServos, op: str) -> str:
    """One bus call; returns its outcome, asserting no wrong value and the deadline."""
    t0 = time.monotonic()
    try:
        if op == "read":
            value, _stamp = bus.read(3, 56, 2)
            assert value == servos.latest[3] % 65536, f"stale read: got {value}, newest request {servos.latest[3]}"
            outcome = "value"
        else:
            reading = bus.sync_read(56, 2, IDS)
            stale = {
                sid: (v, servos.latest[sid]) for sid, v in reading.values.items() if v != servos.latest[sid] % 65536
            }
            assert not stale, f"stale or torn sync read (got, newest): {stale}"
            outcome = "value"
    except (BusTimeout, ServoError):
        outcome = "error"
    elapsed = time.monotonic() - t0
    assert elapsed <= bus.call_bound_s + SLACK_S, f"{op} took {elapsed:.3f} s (bound {bus.call_bound_s:.3f} s)"
    return outcome


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(behaviours=st.lists(st.sampled_from(list(Behaviour)), min_size=1, max_size=12),
       ops=st.lists(st.sampled_from(["read", "sync"]), min_size=4, max_size=12),
       late_ms=st.sampled_from([5, 15, 30, 60]), copy_ms=st.sampled_from([0, 2, 6]),
       return_delay_us=st.sampled_from([0, 500]), seed=st.integers(0, 1000))
def test_no_wrong_value_is_ever_returned(behaviours: list[Behaviour], ops: list[str], late_ms: int, copy_ms: int,
                                         return_delay_us: int, seed: int) -> None:
    with AdversarialServos(IDS, _scripted(behaviours), late_s=(late_ms / 1e3, late_ms / 1e3),
                           duplicate_s=(0.0, copy_ms / 1e3), return_delay_s=return_delay_us / 1e6,
                           seed=seed) as servos, \
            FeetechBus(servos.port, timeout_s=TIMEOUT_S, retries=2) as bus:
        for op in ops:
            _check_call(bus, servos, op)
        # The line is clean again: once the servos' backlog of late replies has gone out, the
        # bus answers again.
        servos.plan = lambda _sid, _n: Behaviour.OK
        deadline = time.monotonic() + 2.0
        while _check_call(bus, servos, "sync") != "value":
            assert time.monotonic() < deadline, "no recovery within 2 s of a clean line"
        assert [_check_call(bus, servos, op) for op in ("sync", "read")] == ["value", "value"]


def test_the_arm_loop_never_takes_a_late_or_duplicated_reply_for_a_fresh_one() -> None:
    """The arm driver's loop (a sync read of 56/6 from six servos, then a goal sync write, every
    5 ms) with late replies and copies arriving after its next request went out."""
    plan = _random_plan(seed=23, late=0.08, duplicate=0.25)
    returned, stale = 0, []
    with AdversarialServos(IDS, plan, late_s=LATE_S, duplicate_s=DUPLICATE_S) as servos, \
            FeetechBus(servos.port) as bus:
        next_tick = time.monotonic()
        for _ in range(400):
            try:
                reading = bus.sync_read(56, 6, IDS)
            except BusTimeout:
                pass
            else:
                returned += 1
                old = {sid: servos.latest[sid] - v for sid, v in reading.values.items() if v != servos.latest[sid]}
                if old:
                    stale.append(old)
            bus.sync_write(42, 2, {sid: 2048 for sid in IDS})
            next_tick += ARM_PERIOD_S
            time.sleep(max(0.0, next_tick - time.monotonic()))
    assert not stale, f"{len(stale)} of {returned} readings answered an earlier request (requests behind): {stale}"
    assert returned >= 300 and bus.stats.stale_bytes > 0, (returned, bus.stats)


def test_a_write_is_never_confirmed_by_the_ack_of_an_earlier_one() -> None:
    """A lost WRITE must not be taken as made because an earlier WRITE's late ack arrived
    while the bus waited for its own."""
    plan = _random_plan(seed=8, late=0.15, duplicate=0.15, silent=0.15)
    confirmed, unmade = 0, []
    with AdversarialServos((3,), plan, late_s=LATE_S, duplicate_s=DUPLICATE_S) as servos, \
            FeetechBus(servos.port, timeout_s=TIMEOUT_S, retries=1) as bus:
        for value in range(1, 81):
            try:
                bus.write(3, 42, value, 2)
            except BusTimeout:
                continue
            confirmed += 1
            made = int.from_bytes(servos.table[3][42:44], "little")
            if made != value:
                unmade.append((value, made))
    assert not unmade, f"{len(unmade)} of {confirmed} confirmed writes were never made (confirmed, made): {unmade}"
    assert confirmed >= 40, confirmed


@pytest.mark.parametrize("behaviour", [Behaviour.LATE, Behaviour.DUPLICATE])
def test_every_late_or_duplicate_reply_is_refused(behaviour: Behaviour) -> None:
    def plan(_sid: int, counter: int) -> Behaviour:
        return behaviour if counter in (3, 12, 21) else Behaviour.OK

    with AdversarialServos((3,), plan, late_s=(0.03, 0.03), duplicate_s=(0.0, 0.004)) as servos, \
            FeetechBus(servos.port, timeout_s=TIMEOUT_S) as bus:
        outcomes = [_check_call(bus, servos, "read") for _ in range(30)]
    assert outcomes.count("value") >= 10, outcomes


def test_continuous_noise_ends_each_call_within_its_deadline_then_recovers() -> None:
    with AdversarialServos(IDS) as servos, FeetechBus(servos.port, timeout_s=TIMEOUT_S) as bus:
        assert _check_call(bus, servos, "sync") == "value"
        servos.noise_on()
        t0 = time.monotonic()
        results = [_check_call(bus, servos, "sync") for _ in range(10)]
        assert time.monotonic() - t0 <= 10 * (bus.call_bound_s + SLACK_S)
        assert bus.stats.skipped_bytes > 0
        servos.noise_off()
        time.sleep(0.05)
        assert [_check_call(bus, servos, "sync") for _ in range(3)][-1] == "value", results


def test_error_bits_are_typed_and_values_still_fresh() -> None:
    with AdversarialServos(IDS, _scripted([Behaviour.ERROR])) as servos, \
            FeetechBus(servos.port, timeout_s=TIMEOUT_S) as bus:
        with pytest.raises(ServoError, match="servo 3 reports overload"):
            bus.read(3, 56, 2)
        reading = bus.sync_read(56, 2, IDS)
        assert reading.errors == {sid: 0x20 for sid in IDS}
        assert all(reading.values[sid] == servos.latest[sid] for sid in IDS)
