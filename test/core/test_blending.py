"""Authority blending: ramp profile, reversal, continuity at takeover/hand-back, stale inputs, labels."""
from __future__ import annotations

import math
from itertools import pairwise

import pytest

from teleop_flywheel.core.blending import AuthorityBlender, raised_cosine

MS = 1_000_000
TICK = 5 * MS  # 200 Hz


def _feed(b: AuthorityBlender, t: int, human: float, policy: float) -> None:
    b.human([human] * 6, t)
    b.policy([policy] * 6, t)


def test_blend_duration_is_validated() -> None:
    with pytest.raises(ValueError, match="20–1000 ms"):
        AuthorityBlender(blend_ms=5)
    with pytest.raises(ValueError, match="20–1000 ms"):
        AuthorityBlender(blend_ms=1500)
    assert AuthorityBlender().blend_ms == 150


def test_ramp_follows_raised_cosine_within_a_tick() -> None:
    b = AuthorityBlender(blend_ms=150)
    t0 = 1_000 * MS
    b.pedal(True, t0)
    for k in range(0, 40):
        t = t0 + k * TICK
        expected = raised_cosine(min(k * TICK / (150 * MS), 1.0))
        assert b.alpha(t) == pytest.approx(expected, abs=1e-9)
    assert b.alpha(t0 + 150 * MS) == 1.0
    assert b.alpha(t0 + 75 * MS) == pytest.approx(0.5)
    # The profile's shape, by hand: (1 − cos(π/4))/2 at a quarter of the ramp (a linear ramp: 0.25),
    # (1 − cos(3π/4))/2 at three quarters, and zero slope at both ends.
    assert b.alpha(t0 + 37_500_000) == pytest.approx(0.1464466, abs=1e-6)
    assert b.alpha(t0 + 112_500_000) == pytest.approx(0.8535534, abs=1e-6)
    assert b.alpha(t0 + 1 * MS) < 1e-3 and 1.0 - b.alpha(t0 + 149 * MS) < 1e-3
    b.pedal(False, t0 + 500 * MS)
    assert b.alpha(t0 + 500 * MS + 75 * MS) == pytest.approx(0.5)
    assert b.alpha(t0 + 700 * MS) == 0.0


def test_reversal_mid_ramp_continues_from_current_alpha() -> None:
    b = AuthorityBlender(blend_ms=150)
    t0 = 10 * MS
    b.pedal(True, t0)
    t_rev = t0 + 50 * MS
    a_rev = b.alpha(t_rev)
    b.pedal(False, t_rev)
    assert b.alpha(t_rev) == pytest.approx(a_rev)
    alphas = [b.alpha(t_rev + k * MS) for k in range(0, 60)]
    assert max(abs(x - y) for x, y in pairwise(alphas)) < 0.02  # no jump
    assert b.alpha(t_rev + 50 * MS) == pytest.approx(0.0, abs=1e-9)  # back down in the time it took up


def test_late_pedal_event_starts_the_ramp_at_the_next_tick_not_in_the_past() -> None:
    # A loaded machine delivers the pedal edge 100 ms after its source stamp: α must not leap to
    # where the ramp would be by now; the intervention still starts at the source stamp.
    b = AuthorityBlender(blend_ms=150)
    t_sent = 2_000 * MS
    _feed(b, t_sent, 1.0, 0.0)
    assert b.tick(t_sent).alpha == 0.0
    b.pedal(True, t_sent - 100 * MS)
    assert b.interventions[-1].start_ns == t_sent - 100 * MS
    assert b.tick(t_sent + TICK).alpha == pytest.approx(raised_cosine(TICK / (150 * MS)))
    assert b.alpha(t_sent + 150 * MS) == 1.0


def test_edge_received_late_ramps_from_when_it_is_known() -> None:
    # The node learns of an edge 80 ms after its kernel stamp (between two ticks it sent): the
    # intervention starts at the stamp, the ramp when the edge is known — α does not leap.
    b = AuthorityBlender(blend_ms=150)
    _feed(b, 0, 1.0, 0.0)
    assert b.tick(0).alpha == 0.0
    b.pedal(True, 10 * MS, received_ns=90 * MS)
    assert b.interventions[-1].start_ns == 10 * MS
    assert b.tick(95 * MS).alpha == pytest.approx(raised_cosine(5 / 150))
    b.pedal(False, 400 * MS, received_ns=450 * MS)
    assert b.interventions[-1].end_ns == 400 * MS
    assert b.tick(450 * MS).alpha == 1.0 and b.tick(525 * MS).alpha == pytest.approx(0.5)


def test_mode_switches_open_and_close_interventions() -> None:
    # An intervention is exactly "policy mode with the pedal down": leaving policy mode ends it;
    # entering policy mode with the pedal held starts one; the pedal in teleop mode marks a correction.
    b = AuthorityBlender(mode="policy")
    b.pedal(True, 100 * MS)
    b.set_mode("teleop", 200 * MS)
    assert [(i.id, i.start_ns, i.end_ns) for i in b.interventions] == [(1, 100 * MS, 200 * MS)]
    assert b.alpha(400 * MS) == 1.0 and not b.takeover
    assert [(c.id, c.start_ns, c.end_ns) for c in b.corrections] == [(1, 200 * MS, None)]  # held on in teleop
    b.pedal(False, 500 * MS)
    b.pedal(True, 600 * MS)
    assert len(b.interventions) == 1
    b.set_mode("policy", 700 * MS)  # the pedal is held: the human keeps authority, as a takeover
    assert [(c.id, c.start_ns, c.end_ns) for c in b.corrections] == [(1, 200 * MS, 500 * MS), (2, 600 * MS, 700 * MS)]
    assert b.takeover and b.interventions[-1].id == 2 and b.interventions[-1].end_ns is None
    assert b.alpha(900 * MS) == 1.0
    b.pedal(False, 1_000 * MS)
    assert b.interventions[-1].end_ns == 1_000 * MS and b.alpha(1_150 * MS) == 0.0
    b.set_mode("teleop", 2_000 * MS)  # no takeover running: nothing to end, α ramps up
    assert len(b.interventions) == 2 and b.alpha(2_075 * MS) == pytest.approx(0.5)


def test_command_is_continuous_at_takeover_and_hand_back() -> None:
    b = AuthorityBlender(blend_ms=150)
    commands = []
    for k in range(200):
        t = k * TICK
        policy = math.sin(k * 0.01)
        human = policy + 0.3  # the leader is 0.3 rad off the policy at takeover
        _feed(b, t, human, policy)
        if k == 50:
            b.pedal(True, t)
        if k == 120:
            b.pedal(False, t)
        commands.append(b.tick(t).command[0])
    steps = [abs(y - x) for x, y in pairwise(commands)]
    normal = max(steps[:45])  # what a tick moves before any handover
    # A hard switch would step 0.3 rad in one tick; the blend spreads it over 30 ticks.
    assert max(steps) < normal + 0.3 * (math.pi / 2) * TICK / (150 * MS) + 1e-6
    assert max(steps) < 0.05


def test_interventions_and_labels() -> None:
    b = AuthorityBlender()
    _feed(b, 0, 1.0, 0.0)
    b.pedal(True, 100 * MS)
    out = b.tick(110 * MS)
    assert out.intervention_id == 1 and out.trigger is None
    b.label("wrong_grasp", 200 * MS)
    b.pedal(False, 1_000 * MS)
    b.pedal(True, 2_000 * MS)
    b.pedal(False, 3_000 * MS)
    b.label("too_slow", 4_000 * MS)  # right after the intervention: applies to it
    b.pedal(True, 5_000 * MS)
    b.pedal(False, 6_000 * MS)  # never labelled
    assert [(i.id, i.trigger) for i in b.interventions] == [(1, "wrong_grasp"), (2, "too_slow"), (3, None)]
    assert all(i.end_ns is not None for i in b.interventions)
    with pytest.raises(ValueError, match="labelling window"):
        b.label("other", 6_000 * MS + 11_000 * MS)
    with pytest.raises(ValueError, match="unknown trigger"):
        b.label("bored", 6_100 * MS)


def test_stale_policy_holds_and_stale_leader_holds() -> None:
    b = AuthorityBlender(stale_ms=100)
    _feed(b, 0, 0.5, 0.2)
    assert b.tick(10 * MS).command == [0.2] * 6
    out = b.tick(300 * MS)  # policy silent for 300 ms while it has authority
    assert out.holding and out.reason == "policy stale" and out.command == [0.2] * 6
    b.policy([0.25] * 6, 310 * MS)
    b.pedal(True, 310 * MS)
    b.human([0.3] * 6, 310 * MS)
    b.policy([0.25] * 6, 470 * MS)
    out = b.tick(470 * MS)  # fully human now, leader silent for 160 ms
    assert out.holding and out.reason == "leader stale"


def test_teleop_mode_is_human_only_and_ignores_pedal() -> None:
    b = AuthorityBlender(mode="teleop")
    b.human([0.7] * 6, 0)
    b.pedal(True, 0)
    assert b.tick(1 * MS).command == [0.7] * 6 and b.interventions == []
    with pytest.raises(ValueError, match="mode must be"):
        AuthorityBlender(mode="autopilot")


def test_a_pedal_in_teleop_mode_marks_a_correction_and_never_changes_authority() -> None:
    b = AuthorityBlender(mode="teleop")
    commands = []
    for k in range(200):  # 1 s at 200 Hz; the pedal goes down at 0.2 s and up at 0.6 s
        t = k * TICK
        b.human([0.01 * k] * 6, t)
        if k == 40:
            b.pedal(True, t)
        if k == 120:
            b.pedal(False, t)
        out = b.tick(t)
        assert out.alpha == 1.0 and out.mode == "teleop" and out.intervention_id == 0 and not out.holding
        commands.append(out.command)
    assert commands == [[0.01 * k] * 6 for k in range(200)]  # the human's command, untouched throughout
    assert b.interventions == []
    assert [(c.id, c.start_ns, c.end_ns, c.trigger) for c in b.corrections] == [(1, 40 * TICK, 120 * TICK, None)]
    b.label("wrong_grasp", 130 * TICK)  # labelled like an intervention, within the window after its end
    assert b.corrections[0].trigger == "wrong_grasp" and b.last_span() == ("correction", b.corrections[0])
    b.pedal(True, 2_000 * MS)
    b.pedal(False, 2_500 * MS)  # never labelled
    with pytest.raises(ValueError, match="correction 2 ended .* beyond the 10 s labelling window"):
        b.label("other", 2_500 * MS + 11_000 * MS)
    assert [c.trigger for c in b.corrections] == ["wrong_grasp", None]


def test_a_label_goes_to_the_latest_span_of_either_kind() -> None:
    b = AuthorityBlender(mode="policy")
    _feed(b, 0, 0.5, 0.2)
    b.pedal(True, 100 * MS)
    b.pedal(False, 300 * MS)  # intervention 1
    b.set_mode("teleop", 400 * MS)
    b.pedal(True, 500 * MS)  # correction 1 running
    b.label("too_slow", 600 * MS)
    assert b.interventions[0].trigger is None and b.corrections[0].trigger == "too_slow"
    b.pedal(False, 700 * MS)
    b.set_mode("policy", 800 * MS)
    b.pedal(True, 900 * MS)  # intervention 2 running: it takes the next label
    b.label("wrong_object", 950 * MS)
    assert [i.trigger for i in b.interventions] == [None, "wrong_object"]
    assert [c.trigger for c in b.corrections] == ["too_slow"]
    with pytest.raises(ValueError, match="no intervention or correction"):
        AuthorityBlender().label("other", 0)


def test_a_ramp_between_far_commands_is_stretched_to_the_speed_limit() -> None:
    """An authority change towards a far target moves no faster than max_speed, on a smooth ramp:
    at 150 ms a 0.6 rad gap would ask for 6.3 rad/s, which the guard would then cut into a kink."""
    ms = 1_000_000
    for gap, max_speed in ((0.6, 2.0), (0.1, 2.0), (0.6, None)):
        b = AuthorityBlender(mode="policy", blend_ms=150.0, max_speed=max_speed)
        b.human([gap], 0)
        b.policy([0.0], 0)
        b.tick(0)
        b.pedal(True, 0)
        cmds = []
        for k in range(0, 2000):
            b.human([gap], k * ms)
            b.policy([0.0], k * ms)
            cmds.append(b.tick(k * ms).command[0])
        speed = max(abs(b1 - a1) / 1e-3 for a1, b1 in pairwise(cmds))
        done_ms = next(k for k, c in enumerate(cmds) if c >= gap - 1e-9)
        if max_speed is not None and gap * math.pi / 2 / 0.150 > 0.8 * max_speed:
            assert speed <= 0.8 * max_speed + 1e-6 and done_ms > 150, (speed, done_ms)
        else:
            assert done_ms == pytest.approx(150, abs=1) and speed == pytest.approx(gap * math.pi / 2 / 0.150, rel=0.01)
