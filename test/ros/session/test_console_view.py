"""The operator console's screen and keys (no ROS): what it shows of a session, what each key does."""
from __future__ import annotations

import json
import re

from teleop_flywheel.core.labels import TRIGGER_LABELS
from teleop_flywheel.ros.session.console_view import KEYS, ConsoleState


def test_view_shows_authority_streams_and_labels() -> None:
    st = ConsoleState(session="sim")
    st.on_authority(["alpha", "mode", "intervention_id", "trigger"], [0.42, 1.0, 3.0, 0.0])
    st.on_recorder_status(json.dumps({
        "state": "recording", "episode": "ep_0007", "elapsed_s": 12.5, "outcome": "unset",
        "topics": {"/follower/joint_states": {"rate_hz": 200.0, "count": 2500, "drops": 2}},
        "missing_topics": ["/cameras/wrist/image/compressed"], "disk_free_bytes": 5e9,
    }))
    st.on_diagnostic("follower_arm", "ERROR", "port /dev/ttyACM1 unplugged", {})
    text = "\n".join(st.render())
    assert "mode policy" in text and "alpha 0.42" in text
    assert "intervention 3" in text and "UNLABELLED" in text
    assert "ep_0007" in text and "recording" in text
    assert re.search(r"/follower/joint_states\s+200.0\s+2500\s+2", text)
    assert "/cameras/wrist/image/compressed" in text and "MISSING" in text
    assert "! follower_arm: ERROR port /dev/ttyACM1 unplugged" in text


def test_keys_cover_every_trigger_label_and_lifecycle() -> None:
    assert {arg for a, arg in KEYS.values() if a == "trigger"} == set(TRIGGER_LABELS)
    assert {a for a, _ in KEYS.values()} >= {"start", "stop", "discard", "keep", "attempts", "outcome", "mode",
                                             "quit", "pedal"}


def test_a_then_a_digit_sets_attempts_and_digits_alone_stay_labels() -> None:
    st = ConsoleState()
    assert st.key("3") == ("trigger", TRIGGER_LABELS[2])
    assert st.key("a") is None and "press a digit" in st.message
    assert st.key("3") == ("attempts", "3")
    assert st.key("3") == ("trigger", TRIGGER_LABELS[2])  # the pair is over
    assert st.key("a") is None
    assert st.key("x") == ("discard", "") and st.message == "attempts: cancelled"  # another key cancels, then acts
    assert st.key("k") == ("keep", "") and st.key("?") is None


def test_view_shows_the_verdict_what_to_do_and_the_clock_field() -> None:
    st = ConsoleState(session="sim")
    status = {"state": "idle", "episode": "", "attempts": 2, "outcome": "unset",
              "verdict": {"episode": "ep_0008", "verdict": "pending", "codes": [], "decision": None},
              "clock": {"cameras": {"front": {"latency_ms": 4.25}}, "ptp_offset_ns": None}}
    st.on_recorder_status(json.dumps(status))
    text = "\n".join(st.render(200))
    assert "verdict ep_0008: … validating" in text and "attempts: 2" in text
    assert "clock offset: front ? (recv 4.2 ms)" in text  # no estimate yet: the receive latency
    status["verdict"] = {"episode": "ep_0008", "verdict": "FAIL", "codes": ["FRAME_GAP", "OUTCOME_UNSET"],
                         "reasons": [{"code": "FRAME_GAP", "detail": "/cameras/front/image/compressed gap 4.0s"},
                                     {"code": "OUTCOME_UNSET", "detail": "outcome was never set"}],
                         "warnings": [{"code": "CAMERA_LAG_UNKNOWN", "detail": "too little motion"}], "decision": None}
    status["clock"] = {"cameras": {"front": {"latency_ms": 4.0, "lag": {"lag_ms": 31.5, "stderr_ms": 1.25, "r2": 0.9}}},
                       "ptp_offset_ns": 250_000}
    st.on_recorder_status(json.dumps(status))
    text = "\n".join(st.render(200))
    assert "verdict ep_0008: FAIL FRAME_GAP OUTCOME_UNSET" in text
    assert "  FRAME_GAP: /cameras/front/image/compressed gap 4.0s" in text
    assert "warning CAMERA_LAG_UNKNOWN: too little motion" in text
    assert "x discard and re-record   k keep" in text
    assert "front lag +31.5±1.2 ms (recv 4.0 ms), PTP +0.250 ms" in text
    # with the running pool of the camera instance's episodes (the verdict at stop): the pooled figure and N
    status["clock"]["cameras"]["front"]["pool"] = {"lag_ms": 2.4, "stderr_ms": 2.9, "episodes": 12}
    st.on_recorder_status(json.dumps(status))
    assert "camera front lag +2 ± 3 ms (12 episodes) (recv 4.0 ms)" in "\n".join(st.render(200))
    del status["clock"]["cameras"]["front"]["pool"]
    status["verdict"]["decision"] = "discard"
    st.on_recorder_status(json.dumps(status))
    assert "discarded (moved to discarded/)" in "\n".join(st.render(200))
    st.on_intervention(json.dumps({"id": 2, "start_ns": 1, "end_ns": None, "trigger": None, "kind": "correction"}))
    assert "last correction: #2 trigger=UNLABELLED (running)" in "\n".join(st.render(200))


def test_a_stop_on_a_flag_the_spec_disagrees_with_is_asked_about_first() -> None:
    st = ConsoleState(session="sim")
    spec = {"id": "0123abcd", "name": "place", "instruction": "Put the brick on the square.",
            "start": {"inside": False, "detail": "shoulder_pan +0.300 outside [-0.100, +0.100]"},
            "success": None, "last": {}}
    st.on_recorder_status(json.dumps({"state": "idle", "outcome": "unset", "task_spec": spec}))
    text = "\n".join(st.render(200))
    assert "spec place (0123abcd): Put the brick on the square." in text
    assert "start: OUTSIDE the start region (shoulder_pan +0.300 outside [-0.100, +0.100])" in text
    assert st.key("e") == ("stop", "")  # nothing to compare: a stop is a stop
    # Marked failure while the predicate holds: asked; any other key goes back to recording.
    spec["success"] = {"passed": True, "detail": "joints in region"}
    st.on_recorder_status(json.dumps({"state": "recording", "outcome": "failure", "task_spec": spec}))
    assert "success now: met, you marked failure: DISAGREE" in "\n".join(st.render(200))
    assert st.key("e") is None
    assert st.prompt() == ["? the spec says success (joints in region)",
                           "? you marked failure: [k]eep failure / mark success [y]   (other key: back to recording)"]
    assert st.prompt()[1] in st.render(200)
    assert st.key("f") is None and not st.prompt() and st.message == "stop: cancelled, still recording"
    assert st.key("e") is None and st.key("y") == ("answer", "success")
    assert st.key("e") is None and st.key("k") == ("answer", "kept")
    # Stopped elsewhere while the question was on screen: the answer must not label the next episode.
    assert st.key("e") is None
    st.on_recorder_status(json.dumps({"state": "idle", "outcome": "unset", "task_spec": spec}))
    assert st.key("k") is None and "already stopped" in st.message
    st.on_recorder_status(json.dumps({"state": "recording", "outcome": "failure", "task_spec": spec}))
    # A flag that agrees is not asked about.
    st.on_recorder_status(json.dumps({"state": "recording", "outcome": "success", "task_spec": spec}))
    assert st.key("e") == ("stop", "")
    # After the stop: the predicate on the final pose beside the flag it was stopped with.
    spec["last"] = {"episode": "ep_0009", "passed": False, "detail": "gripper open (+0.600 rad, closed below +0.200)",
                    "outcome": "success", "disagrees": True, "operator_answer": "kept"}
    st.on_recorder_status(json.dumps({"state": "idle", "outcome": "unset", "task_spec": spec}))
    text = "\n".join(st.render(200))
    assert "at stop ep_0009: success NOT met, marked success, kept when asked: DISAGREE (OUTCOME_MISMATCH)" in text
    assert "    gripper open (+0.600 rad, closed below +0.200)" in text
