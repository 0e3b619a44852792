"""Validator checks: event topics need no messages, the seed's dead-air examples are
rejected (leading and trailing), warnings are a third outcome that never changes a verdict or the
exit code, the follower's tracking lag, unlabelled corrections, a servo that stopped answering."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from teleop_flywheel.cli.verbs import validate as validate_verb
from teleop_flywheel.core.bag_topics import FOLLOWER_STATE
from teleop_flywheel.data.validate import validator as val
from teleop_flywheel.data.validate.reasons import (
    CORRUPT,
    DEAD_AIR,
    MISSING_STREAM,
    SERVO_FAULT,
    TRACKING_LAG,
    UNLABELLED_INTERVENTION,
)
from teleop_flywheel.recording.mcap import cdr
from teleop_flywheel.recording.mcap.metadata import find_mcap
from teleop_flywheel.recording.mcap.reader import open_bag
from teleop_flywheel.testing.mutations import rewrite
from teleop_flywheel.testing.synthetic_session import SessionSpec, write_session


def _check(bag: Path, **overrides: object) -> val.EpisodeReport:
    cfg = val.ValidateConfig.load()
    for k, v in overrides.items():
        setattr(cfg, k, v)
    return val.validate_bag((str(bag), cfg))


def test_pedal_topic_without_a_press_is_no_missing_stream(tmp_path: Path) -> None:
    """/pedal/joy publishes only on presses: a session where nobody pressed it is complete."""
    bag = write_session(tmp_path / "nopress", SessionSpec(duration_s=3.0, pedal_topic=True)).bag
    r = _check(bag)
    assert MISSING_STREAM not in r.codes, r.line()
    assert r.passed, r.line()
    # the check still checks: the same topic treated as a stream is missing
    strict = _check(bag, event_topics=[])
    assert MISSING_STREAM in strict.codes and "/pedal/joy has 0 messages" in strict.line()


@pytest.mark.parametrize(("dead", "expect"), [((0.0, 2.5), "leading"), ((0.0, 1.0), None),
                                               ((5.4, 9.0), "trailing")])
def test_dead_air_defaults_reject_the_seeds_examples(tmp_path: Path, dead: tuple[float, float],
                                                     expect: str | None) -> None:
    """The seed: 76 leading frames (2.5 s) of a recording light on while nobody moved is 'not acceptable';
    a short settle is fine. The demo's episodes have < 0.1 s (checked by hand: 0.007 s)."""
    bag = write_session(tmp_path / "dead", SessionSpec(duration_s=8.0, dead_air=dead, seed=3)).bag
    r = _check(bag)
    kinds = [x.numbers["kind"] for x in r.reasons if x.code == DEAD_AIR]
    assert kinds == ([expect] if expect else []), r.line()


def test_warnings_are_a_third_outcome(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A warned episode passes, its line says WARN and why, validation.json carries it, exit code 0."""
    folder = tmp_path / "bags"
    write_session(folder / "warned", SessionSpec(duration_s=6.0, stamp_clock="ros", seed=0))  # smooth: lag unknown
    write_session(folder / "unset", SessionSpec(duration_s=3.0, outcome="unset", seed=1))
    parser = argparse.ArgumentParser()
    validate_verb.add_arguments(parser)
    assert validate_verb.run(parser.parse_args([str(folder), "--workers", "1"])) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if " warned" in x)
    assert " WARN warned " in line and "warning: CAMERA_LAG_UNKNOWN(" in line
    assert "1/2 rejected" in out and "1 passed with warnings: CAMERA_LAG_UNKNOWN 1" in out
    assert validate_verb.run(parser.parse_args([str(folder), "--workers", "1", "--json"])) == 0
    doc = json.loads(capsys.readouterr().out)
    by_name = {e["name"]: e for e in doc["episodes"]}
    assert by_name["warned"]["status"] == "WARN" and by_name["warned"]["passed"] is True
    assert by_name["warned"]["warnings"][0]["code"] == "CAMERA_LAG_UNKNOWN"
    assert by_name["unset"]["status"] == "FAIL"
    assert doc["summary"]["warned"] == 1 and doc["summary"]["warnings"] == {"CAMERA_LAG_UNKNOWN": 1}


def test_tracking_lag_is_measured_and_warned_above_the_bound(tmp_path: Path) -> None:
    """The simulated follower is a first-order lag of 50 ms behind the command (no camera: what a
    camera costs the validator is not what this measures)."""
    bag = write_session(tmp_path / "track", SessionSpec(duration_s=20.0, motion="reach", stamp_clock="ros",
                                                         seed=4, cameras=())).bag
    r = _check(bag)
    lags = [x for x in r.tracking_lag_ms if x is not None]
    assert len(lags) == 6 and all(40 <= x <= 60 for x in lags), r.tracking_lag_ms
    assert TRACKING_LAG not in [w.code for w in r.warnings]
    slow = _check(bag, tracking_lag_max_ms=30.0)
    assert slow.passed and [w.code for w in slow.warnings] == [TRACKING_LAG], slow.line()
    assert "6 joints over" in slow.warnings[0].detail


def test_unlabelled_correction_is_unlabelled_intervention(tmp_path: Path) -> None:
    bag = write_session(tmp_path / "corr", SessionSpec(duration_s=4.0, corrections=((1.0, 2.0, None),))).bag
    r = _check(bag)
    assert UNLABELLED_INTERVENTION in r.codes and "correction 1 (teleop mode)" in r.line()
    ok = write_session(tmp_path / "corr_ok", SessionSpec(duration_s=4.0, corrections=((1.0, 2.0, "other"),))).bag
    assert UNLABELLED_INTERVENTION not in _check(ok).codes


def test_a_servo_that_stopped_answering_is_a_servo_fault_not_a_corrupt_bag(tmp_path: Path) -> None:
    """The arm driver leaves a servo that stopped answering out of its JointState (the others go on)
    and holds the arm: a follower stream whose last reads lack servos 1 and 2 is SERVO_FAULT naming
    them, never CORRUPT — the bag is intact (seen in bench/rollout.py on a loaded machine)."""

    bag = write_session(tmp_path / "trial", SessionSpec(duration_s=3.0, cameras=(), seed=5)).bag
    assert _check(bag).passed
    n = len(open_bag(bag).raw(FOLLOWER_STATE).data)

    def silent(topic: str, i: int, data: bytes) -> bytes:
        if topic == FOLLOWER_STATE and i >= n - 3:
            js = cdr.decode_joint_states([data])
            return cdr.joint_state_cdr(int(js.stamps_ns[0]), js.names[2:], js.position[0, 2:])
        return data

    r = _check(rewrite(payload=silent)(find_mcap(bag)[1], tmp_path / "silent"))
    assert CORRUPT not in r.codes, r.line()
    assert SERVO_FAULT in r.codes, r.line()
    assert "shoulder_pan" in r.line() and "shoulder_lift" in r.line() and "stopped answering" in r.line()


def test_leader_feedback_is_checked_where_recorded_and_not_required_before(tmp_path: Path) -> None:
    """/leader/feedback (what the leader rendered) is judged like the leader's joint states where a bag
    has it — its gaps, its declared type — and a bag recorded before it existed is not judged by its absence."""
    with_fb = write_session(tmp_path / "fb", SessionSpec(duration_s=4.0, seed=11, feedback="gripper")).bag
    assert "/leader/feedback" in open_bag(with_fb).topics
    assert _check(with_fb).passed, _check(with_fb).line()
    old = write_session(tmp_path / "old", SessionSpec(duration_s=4.0, seed=11)).bag
    assert "/leader/feedback" not in open_bag(old).topics and _check(old).passed, _check(old).line()
    stalled = write_session(tmp_path / "stall", SessionSpec(duration_s=4.0, seed=11, feedback="off",
                                                            feedback_stall=(1.5, 0.5))).bag
    r = _check(stalled)
    gaps = [x for x in r.reasons if x.code == "FRAME_GAP"]
    assert [g.numbers["stream"] for g in gaps] == ["/leader/feedback"], r.line()
    assert 0.49 < gaps[0].numbers["gap_s"] < 0.52
    wrong = rewrite(types={"/leader/feedback": "std_msgs/msg/String"})(with_fb, tmp_path / "wrong")
    r = _check(wrong)
    assert "SCHEMA_MISMATCH" in r.codes and "/leader/feedback declared as std_msgs/msg/String" in r.line()


def test_leader_feedback_without_its_ceilings_is_a_schema_mismatch(tmp_path: Path) -> None:
    """The contract's effort (the torque ceilings) is what says how hard the leader pulled: a
    /leader/feedback without it is not the contract, and convert would have nothing to write."""
    bag = write_session(tmp_path / "fb", SessionSpec(duration_s=3.0, seed=12, feedback="gripper")).bag

    def no_ceilings(topic: str, _i: int, data: bytes) -> bytes:
        if topic != "/leader/feedback":
            return data
        js = cdr.decode_joint_states([data], topic)
        return cdr.joint_state_cdr(int(js.stamps_ns[0]), list(js.names), js.position[0])

    r = _check(rewrite(payload=no_ceilings)(bag, tmp_path / "bare"))
    assert "SCHEMA_MISMATCH" in r.codes and "/leader/feedback: a message lacks the six torque ceilings" in r.line()


def test_a_message_stamped_after_the_episode_s_end_is_no_gap(tmp_path: Path) -> None:
    """The leader publishes one more /leader/feedback off its tick when it drops the feedback at the
    hold that ends a take: stamped 0.16 s after the episode's last follower state (seen in the demo).
    Silence is measured over the episode [first, last follower state]: that message opens none."""
    bag = write_session(tmp_path / "fb", SessionSpec(duration_s=3.0, seed=13, feedback="off")).bag
    last = len(open_bag(bag).raw("/leader/feedback")) - 1
    end = int(open_bag(bag).stamps(FOLLOWER_STATE).max())

    def late(topic: str, i: int, data: bytes) -> bytes:
        if topic != "/leader/feedback" or i != last:
            return data
        js = cdr.decode_joint_states([data], topic)
        return cdr.joint_state_cdr(end + 160_000_000, list(js.names), js.position[0], effort=js.effort[0])

    r = _check(rewrite(payload=late)(bag, tmp_path / "late"))
    assert "FRAME_GAP" not in r.codes, r.line()
    stalled = write_session(tmp_path / "stall", SessionSpec(duration_s=3.0, seed=13, feedback="off",
                                                            feedback_stall=(2.85, 1.0))).bag
    r = _check(stalled)  # silent for its last 0.15 s: still a gap, to the episode's end
    assert [x.numbers["stream"] for x in r.reasons if x.code == "FRAME_GAP"] == ["/leader/feedback"], r.line()
    assert "after its last message, to the episode's end" in r.line()
