"""The session's metrics model (`fleet/session_metrics.py`), read back by prometheus_client's
own parser: every value equals what the messages fed to it say."""
from __future__ import annotations

import shutil
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from teleop_flywheel.fleet.endpoint import DEFAULT_ADDRESS, MetricsServer, parse_address
from teleop_flywheel.fleet.errors import AddressError
from teleop_flywheel.fleet.session_metrics import SessionMetrics
from teleop_flywheel.hw.arm.health import READ_BUCKETS_MS, read_bucket_key

S = 1_000_000_000
T0 = 1_800_000_000 * S  # ROS/wall time of the session's start


def samples(m: SessionMetrics) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """{(sample name, labels): value} of the exposition, as Prometheus's client library parses it."""
    out = {}
    for family in text_string_to_metric_families(m.exposition().decode()):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(m: SessionMetrics, name: str, **labels: str) -> float:
    """The one sample called `name` whose labels include `labels` (summed if several)."""
    found = [v for (n, ls), v in samples(m).items() if n == name and set(labels.items()) <= ls]
    assert found, f"no sample {name} {labels}"
    return sum(found)


def driver_values(role: str, ticks: int, overruns: int, reads_ms: list[float], errors: int = 0,
                  rate: float = 199.5) -> dict[str, str]:
    """The key/values an arm driver's DiagnosticStatus carries (strings, as on the wire)."""
    v = {"role": role, "rate_hz": str(rate), "target_rate_hz": "200.0", "ticks": str(ticks),
         "overruns": str(overruns), "read_errors": str(errors), "reads": str(len(reads_ms)),
         "read_sum_ms": str(sum(reads_ms))}
    v.update({read_bucket_key(le): str(sum(1 for r in reads_ms if r <= le)) for le in READ_BUCKETS_MS})
    return v


def test_driver_diagnostics_become_loop_counters_and_a_latency_histogram() -> None:
    m = SessionMetrics("rig_a")
    m.on_diagnostics("leader_arm: leader arm", driver_values("leader", 100, 3, [0.8, 1.5, 1.5, 12.0]))
    m.on_diagnostics("leader_arm: leader arm", driver_values("leader", 250, 5, [0.8, 1.5, 1.5, 12.0, 0.4, 30.0]))
    m.on_diagnostics("leader_arm: leader arm", driver_values("leader", 10, 1, [2.5], rate=150.0))  # restarted
    assert value(m, "teleop_driver_ticks_total", rig="rig_a", role="leader") == 260
    assert value(m, "teleop_driver_overruns_total", role="leader") == 6
    assert value(m, "teleop_driver_loop_rate_hz", role="leader") == 150.0
    assert value(m, "teleop_driver_target_rate_hz", role="leader") == 200.0
    reads = [0.8, 1.5, 1.5, 12.0, 0.4, 30.0, 2.5]
    for le in READ_BUCKETS_MS:
        assert value(m, "teleop_bus_read_latency_seconds_bucket", role="leader", le=f"{le / 1e3:g}") == sum(
            1 for r in reads if r <= le), le
    assert value(m, "teleop_bus_read_latency_seconds_count", role="leader") == len(reads)
    assert value(m, "teleop_bus_read_latency_seconds_sum", role="leader") == pytest.approx(sum(reads) / 1e3)


def test_cameras_count_frames_and_drops_from_their_diagnostics() -> None:
    m = SessionMetrics("rig_a")
    m.on_diagnostics("camera/front", {"frames": "300", "dropped": "2", "rate_hz": "29.97"})
    m.on_diagnostics("camera/front", {"frames": "330", "dropped": "2", "rate_hz": "30.00"})
    m.on_diagnostics("recorder", {"state": "idle"})  # neither a driver nor a camera: ignored
    assert value(m, "teleop_camera_frames_total", camera="front") == 330
    assert value(m, "teleop_camera_dropped_frames_total", camera="front") == 2
    assert value(m, "teleop_camera_fps", camera="front") == 30.0


def event(id_: int, start_s: float, trigger: str | None = None, end_s: float | None = None,
          kind: str = "intervention") -> dict[str, Any]:
    return {"id": id_, "start_ns": T0 + int(start_s * S), "end_ns": None if end_s is None else T0 + int(end_s * S),
            "trigger": trigger, "kind": kind}


def teleop(mode: str) -> dict[str, str]:
    """The teleop node's DiagnosticStatus values (the fields the exporter reads)."""
    return {"mode": mode, "interventions": "0", "unlabelled": "[]", "held": "False"}


def test_interventions_and_their_triggers() -> None:
    m = SessionMetrics("rig_a", start_ns=T0)
    m.on_checkpoint("act-v3")
    m.on_intervention(event(7, -50.0, "too_slow", -45.0))  # latched from before the exporter: baseline
    m.on_intervention(event(1, 1.0))
    m.on_intervention(event(1, 1.0, end_s=2.0))
    m.on_intervention(event(1, 1.0, "wrong_grasp", 2.0))  # labelled after it ended
    m.on_intervention(event(1, 1.0, "other", 2.0))  # relabelled: counted once, under its first label
    m.on_intervention(event(1, 5.0, kind="correction"))
    labels = {"rig": "rig_a", "checkpoint": "act-v3", "operator": "unset", "task": "unset"}
    assert value(m, "teleop_interventions_total", kind="intervention", **labels) == 1
    assert value(m, "teleop_interventions_total", kind="correction", **labels) == 1
    assert value(m, "teleop_intervention_triggers_total", kind="intervention", trigger="wrong_grasp") == 1
    assert value(m, "teleop_intervention_triggers_total", trigger="other") == 0
    assert value(m, "teleop_intervention_triggers_total", trigger="too_slow") == 0


def test_policy_seconds_are_policy_mode_less_the_takeovers() -> None:
    m = SessionMetrics("rig_a", start_ns=T0)
    m.on_checkpoint("act-v3")
    m.on_intervention(event(1, 2.5))  # a takeover from 2.5 to 4.0 s
    m.on_intervention(event(1, 2.5, end_s=4.0))
    m.on_intervention(event(2, 16.5))  # one still running at the last policy status
    for t in [*range(11), 15, 16, 17]:  # once a second; the teleop node silent from 10 to 15 s
        m.on_diagnostics("teleop: authority", teleop("policy"), T0 + t * S)
    for t in (18, 19):  # switched to teleop mode between 17 and 18 s: the policy's until the status says so
        m.on_diagnostics("teleop: authority", teleop("teleop"), T0 + t * S)
    # 0-10 s less the first takeover, 15-16.5 s; from 16.5 s the second takeover holds (to 18 s, the
    # last status in policy mode, as far as anyone knows)
    driven = (10.0 - 1.5) + 1.5
    assert value(m, "teleop_policy_seconds_total", checkpoint="act-v3") == pytest.approx(driven)


def status(state: str, episode: str = "", elapsed_s: float = 0.0, topics: dict[str, tuple[int, int]] | None = None,
           verdicts: list[dict[str, Any]] | None = None, bag: str = "", **extra: Any) -> dict[str, Any]:
    """A recorder `~/status` as the node publishes it (the fields the exporter reads)."""
    return {"state": state, "episode": episode, "bag": bag, "elapsed_s": elapsed_s, "operator": "ana",
            "task": "pick cube", "topics": {t: {"count": c, "drops": d} for t, (c, d) in (topics or {}).items()},
            "verdicts": verdicts or [], "clock": {"cameras": extra.get("cameras", {})}}


def verdict(episode: str, result: str | None, codes: tuple[str, ...] = (),
            decision: str | None = None) -> dict[str, Any]:
    return {"episode": episode, "verdict": result, "status": "pending" if result == "pending" else result,
            "codes": list(codes), "decision": decision}


def test_recorder_status_becomes_episodes_verdicts_drops_and_durations(tmp_path: Path) -> None:
    bag = tmp_path / "ep1"
    bag.mkdir()
    (bag / "ep1_0.mcap").write_bytes(b"x" * 1000)
    m = SessionMetrics("rig_a", output_dir=tmp_path, start_ns=T0)
    old = verdict("ep0", "FAIL", ("DEAD_AIR",))
    m.on_recorder_status(status("idle", verdicts=[old]), T0)  # what was there before the exporter: baseline
    m.on_recorder_status(status("recording", "ep1", 0.5, {"/leader/joint_states": (100, 0)}, [old], str(bag)),
                         T0 + S)  # started at T0 + 0.5 s
    (bag / "ep1_0.mcap").write_bytes(b"x" * 5000)
    m.on_recorder_status(status("recording", "ep1", 12.0, {"/leader/joint_states": (2400, 3)}, [old], str(bag)),
                         T0 + int(12.5 * S))
    m.on_recorder_status(status("idle", "", 0.0, {"/leader/joint_states": (2500, 3)},
                                [old, verdict("ep1", "pending")]), T0 + int(12.6 * S))  # stopped: 12.1 s
    m.on_recorder_status(status("idle", "", 0.0, {"/leader/joint_states": (2500, 3)},
                                [old, verdict("ep1", "FAIL", ("FRAME_GAP", "DEAD_AIR"))]), T0 + 14 * S)
    m.on_recorder_status(status("recording", "ep2", 0.1, {"/leader/joint_states": (20, 1)},
                                [old, verdict("ep1", "FAIL", ("FRAME_GAP", "DEAD_AIR"))]),
                         T0 + int(20.7 * S))  # started 20.6 s: an 8 s reset
    m.on_recorder_status(status("idle", "", 0.0, {"/leader/joint_states": (1000, 1)},
                                [old, verdict("ep1", "FAIL", ("FRAME_GAP", "DEAD_AIR"), "discard"),
                                 verdict("ep2", "PASS", (), "keep")]), T0 + int(30.6 * S))  # 10 s
    session = {"rig": "rig_a", "operator": "ana", "task": "pick cube", "checkpoint": "none"}
    assert value(m, "teleop_verdicts_total", verdict="FAIL", **session) == 1
    assert value(m, "teleop_verdicts_total", verdict="PASS", **session) == 1
    assert value(m, "teleop_verdict_reasons_total", code="FRAME_GAP") == 1
    assert value(m, "teleop_verdict_reasons_total", code="DEAD_AIR") == 1  # ep0's was before the exporter
    assert value(m, "teleop_verdict_reasons_total", code="CORRUPT") == 0  # every code's series exists
    assert value(m, "teleop_episodes_kept_total", **session) == 1
    assert value(m, "teleop_episodes_discarded_total", **session) == 1
    assert value(m, "teleop_episode_duration_seconds_count") == 2
    assert value(m, "teleop_episode_duration_seconds_sum") == pytest.approx(12.1 + 10.0)
    assert value(m, "teleop_reset_duration_seconds_count") == 1
    assert value(m, "teleop_reset_duration_seconds_sum") == pytest.approx(8.0)
    assert value(m, "teleop_reset_duration_seconds_bucket", le="10.0") == 1
    # messages: ep1's 2500 (the first status's 100 counted too: that episode began after the exporter), ep2's 1000
    assert value(m, "teleop_recorder_messages_total", topic="/leader/joint_states") == 2500 + 1000
    assert value(m, "teleop_recorder_dropped_messages_total", topic="/leader/joint_states") == 3 + 1
    assert value(m, "teleop_recorder_written_bytes_total") == 5000
    assert value(m, "teleop_recorder_recording") == 0
    assert value(m, "teleop_session_info", **session) == 1
    assert value(m, "teleop_disk_free_bytes") == pytest.approx(shutil.disk_usage(tmp_path).free, rel=0.01)


def test_camera_latency_and_a_confident_content_lag() -> None:
    m = SessionMetrics("rig_a", lag_max_stderr_ms=5.0)
    cams = {"front": {"latency_ms": 4.2, "lag": {"lag_ms": 12.5, "stderr_ms": 2.0}},
            "wrist": {"latency_ms": 3.0, "lag": {"lag_ms": 80.0, "stderr_ms": 40.0}}}  # too unsure to show
    m.on_recorder_status(status("idle", cameras=cams), T0)
    assert value(m, "teleop_camera_latency_seconds", camera="front") == pytest.approx(0.0042)
    assert value(m, "teleop_camera_lag_seconds", camera="front") == pytest.approx(0.0125)
    assert not [k for k in samples(m) if k[0] == "teleop_camera_lag_seconds" and ("camera", "wrist") in k[1]]


def test_an_operator_change_starts_new_series_and_keeps_the_old() -> None:
    m = SessionMetrics("rig_a", start_ns=T0)
    m.on_intervention(event(1, 1.0))
    m.on_recorder_status(status("idle") | {"operator": "bo"}, T0)
    m.on_intervention(event(2, 2.0))
    assert value(m, "teleop_interventions_total", operator="unset", kind="intervention") == 1
    assert value(m, "teleop_interventions_total", operator="bo", kind="intervention") == 1
    info = [ls for (n, ls), v in samples(m).items() if n == "teleop_session_info" and v == 1]
    assert info == [frozenset({("rig", "rig_a"), ("operator", "bo"), ("task", "pick cube"), ("checkpoint", "none")})]


@pytest.mark.parametrize(("text", "expected"), [
    ("127.0.0.1:9464", ("127.0.0.1", 9464)), ("[::1]:9000", ("::1", 9000)), ("localhost:1", ("localhost", 1)),
    ("", None), ("off", None), (" OFF ", None), ("false", None),
])
def test_metrics_addresses(text: str, expected: tuple[str, int] | None) -> None:
    assert parse_address(text) == expected


@pytest.mark.parametrize("text", [":9464", "9464", "127.0.0.1", "127.0.0.1:99999", "127.0.0.1:http"])
def test_a_bad_metrics_address_is_refused(text: str) -> None:
    with pytest.raises(AddressError, match="HOST:PORT"):
        parse_address(text)


def test_the_server_serves_the_exposition_on_loopback_by_default() -> None:
    host, _port = parse_address(DEFAULT_ADDRESS) or ("", 0)
    assert host == "127.0.0.1"
    m = SessionMetrics("rig_b", start_ns=T0)
    m.on_intervention(event(1, 1.0))
    server = MetricsServer(m.collector(), host, 0)  # any free port
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=10) as answer:
            text = answer.read().decode()
    finally:
        server.close()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    (sample,) = [s for s in families["teleop_interventions"].samples
                 if s.name == "teleop_interventions_total" and s.labels["kind"] == "intervention"]
    assert sample.value == 1 and sample.labels["rig"] == "rig_b"
