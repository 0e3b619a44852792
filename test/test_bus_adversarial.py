"""The bus never returns a stale, torn or invented value, whatever the servos do.

`AdversarialServos` (teleop_flywheel/testing) answers on a real pty with replies that carry the
request they answer; every value the bus returns as valid must be the answer to the newest
request the servo saw. Calls must end within their deadline with typed errors only, and the
bus must recover once the line is clean again.
"""
from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from teleop_flywheel.hw.feetech.bus import BusTimeout, FeetechBus, ServoError
from teleop_flywheel.testing.adversarial_servo import AdversarialServos, Behaviour

IDS = (1, 2, 3, 4, 5, 6)
TIMEOUT_S = 0.01
SLACK_S = 0.25  # scheduling on a loaded 2-core machine, beyond the bus's own bound


def _scripted(behaviours: list[Behaviour]):
    def plan(_sid: int, counter: int) -> Behaviour:
        return behaviours[counter % len(behaviours)]
    return plan


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
            stale = {sid: (v, servos.latest[sid]) for sid, v in reading.values.items() if v != servos.latest[sid] % 65536}
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
       late_ms=st.sampled_from([5, 15, 30, 60]), seed=st.integers(0, 1000))
def test_no_wrong_value_is_ever_returned(behaviours: list[Behaviour], ops: list[str], late_ms: int, seed: int) -> None:
    with AdversarialServos(IDS, _scripted(behaviours), late_s=late_ms / 1e3, seed=seed) as servos, \
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


@pytest.mark.parametrize("behaviour", [Behaviour.LATE, Behaviour.DUPLICATE])
def test_every_late_or_duplicate_reply_is_refused(behaviour: Behaviour) -> None:
    """The failure the old bus had: a late reply taken as the answer to the next request."""
    def plan(_sid: int, counter: int) -> Behaviour:
        return behaviour if counter in (3, 12, 21) else Behaviour.OK

    with AdversarialServos((3,), plan, late_s=0.03) as servos, FeetechBus(servos.port, timeout_s=TIMEOUT_S) as bus:
        outcomes = [_check_call(bus, servos, "read") for _ in range(30)]
    assert outcomes.count("value") >= 10, outcomes
    assert bus.stats.fences > 0


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
