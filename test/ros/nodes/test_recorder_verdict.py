"""The verdict at stop on the real recorder node, in its own process as deployed: verdict.json,
`/recorder/status`, the next episode recorded while the verdict is computed (0 drops, on time),
keep and discard (moves, never deletes)."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy")

from support.procs import wait_for  # noqa: E402
from support.recorder_rig import CAMERA, STREAMS, Rig  # noqa: E402

from teleop_flywheel.core.episode import EpisodeMeta  # noqa: E402
from teleop_flywheel.data.validate.reasons import ValidateConfig  # noqa: E402
from teleop_flywheel.data.validate.validator import apply_schema, validate_bag  # noqa: E402
from teleop_flywheel.recording.mcap.metadata import read_metadata_yaml  # noqa: E402
from teleop_flywheel.recording.mcap.reader import open_bag  # noqa: E402
from teleop_flywheel.recording.recorder.verdict import read_verdict  # noqa: E402


@pytest.fixture
def rig(tmp_path: Path) -> Any:
    r = Rig(tmp_path / "bags")
    try:
        wait_for(lambda: r.statuses and not r.statuses[-1]["missing_topics"], 90, "the recorder finding every stream")
        yield r
    finally:
        r.close()


def test_verdict_at_stop_while_the_next_episode_records_on_time_without_drops(rig: Rig, tmp_path: Path) -> None:
    out = tmp_path / "bags"
    assert rig.call("start")[0]
    time.sleep(2.5)  # past the validator's shortest episode (2 s): a verdict on a whole episode
    rig.label(outcome="success", attempts=2)
    ok, saved, _ = rig.call("stop")
    assert ok, saved
    t_stop = time.monotonic()
    ok, second, start_took = rig.call("start")  # at once: the verdict of the first is being computed
    t_started = time.monotonic()
    assert ok, second
    first = Path(saved.split()[1].rstrip(":"))
    wait_for(lambda: [s for s in rig.statuses if s["state"] == "recording" and s["episode"] == Path(second).name],
             10, "the second episode on /recorder/status")
    status = rig.verdict_of(first.name)
    t_verdict = time.monotonic()
    time.sleep(max(0.0, 3.0 - (time.monotonic() - t_started)))
    ok, _msg, _ = rig.call("stop")
    assert ok
    t_second_stopped = time.monotonic()

    # The verdict came while the second episode was recording.
    assert t_stop < t_verdict < t_second_stopped
    doc = read_verdict(first)
    assert doc is not None
    cfg = ValidateConfig.load(None)
    report = validate_bag((str(first), cfg))
    apply_schema([report], ["front"])  # the session's cameras
    assert doc["verdict"] == ("PASS" if report.passed else "FAIL"), (doc, report.line())
    assert doc["codes"] == list(dict.fromkeys(r.code for r in report.reasons))
    assert doc["expected_cameras"] == ["front"] and doc["cameras"] == ["front"]
    last = status["verdict"]
    assert last["episode"] == first.name and last["verdict"] == doc["verdict"] and last["codes"] == doc["codes"]
    # verdict.json lives beside the bag: outside its content id and the MCAP/metadata.yaml agreement
    bag = open_bag(first)
    assert bag.damage == [] and bag.episode_id == report.episode_id
    # The status carries the clock field: each camera's receive latency (and the verdict's estimate, once given).
    assert "front" in status["clock"]["cameras"] and "latency_ms" in status["clock"]["cameras"]["front"]

    # The second episode started on time and lost nothing while the worker judged the first.
    assert start_took < 2.0, f"start took {start_took:.2f} s"
    meta = EpisodeMeta.from_strings(read_metadata_yaml(Path(second))["custom_data"])
    assert meta.attempts is None and meta.outcome == "unset"  # the first episode's labels did not leak
    assert set(meta.drops) == set(STREAMS) | {CAMERA} and not any(meta.drops.values()), meta.drops
    sec = open_bag(Path(second))
    # Everything the rig sent from the start on is recorded, in order: the samples it sent during the
    # episode, not one missing (a pause of this process beside busy neighbours is a gap in both, not a loss).
    follower = sec.stamps("/follower/joint_states")
    sent = np.asarray(rig.published, np.int64)
    at = int(np.searchsorted(sent, follower[0]))
    assert np.array_equal(sent[at:at + len(follower)], follower), "the recorder lost or reordered samples"
    assert follower[0] <= sent[np.searchsorted(sent, meta.started_ros_ns)], "the first samples after start missed"
    assert (meta.stopped_ros_ns - meta.started_ros_ns) / 1e9 > 2.5
    assert sorted(p.name for p in out.iterdir()) == sorted([first.name, Path(second).name])


def _until_recorded(rig: Rig, bag: str) -> None:
    """Until /recorder/status shows every stream recorded into `bag`: each count past the one in the
    episode's first status (the counts run over the recorder's life)."""
    name = Path(bag).name
    first = wait_for(lambda: next((s for s in rig.statuses if s["episode"] == name), None), 30, f"{name} on the status")
    wait_for(lambda: rig.statuses[-1]["episode"] == name and all(
        rig.statuses[-1]["topics"][t]["count"] > first["topics"][t]["count"] for t in [*STREAMS, CAMERA]),
        30, f"every stream recorded into {name}")


def test_keep_and_discard_after_stop_and_while_recording_never_delete(rig: Rig, tmp_path: Path) -> None:
    out = tmp_path / "bags"
    names = []
    ok, bag, _ = rig.call("start")
    assert ok, bag
    _until_recorded(rig, bag)
    ok, saved, _ = rig.call("stop")
    names.append(Path(saved.split()[1].rstrip(":")).name)
    ok, text, _ = rig.call("keep")
    assert ok and text == f"kept {out / names[0]}"
    ok, text, _ = rig.call("discard")  # kept: refused, says why
    assert not ok and "already kept" in text
    ok, bag, _ = rig.call("start")
    assert ok, bag
    _until_recorded(rig, bag)
    ok, saved, _ = rig.call("stop")
    names.append(Path(saved.split()[1].rstrip(":")).name)
    ok, text, _ = rig.call("discard")  # the last stopped episode, probably before its verdict
    assert ok and text == f"discarded {names[1]}: moved to {out / 'discarded' / names[1]}"
    ok, second, _ = rig.call("start")
    _until_recorded(rig, second)
    ok, text, _ = rig.call("discard")  # while recording: closed and moved the same way
    assert ok and text.startswith(f"discarded {Path(second).name}: moved to")
    names.append(Path(second).name)
    status = rig.verdict_of(names[1])
    assert [v["decision"] for v in status["verdicts"]] == ["keep", "discard", "discard"]
    assert sorted(p.name for p in out.iterdir()) == sorted(["discarded", names[0]])
    assert sorted(p.name for p in (out / "discarded").iterdir()) == sorted(names[1:])
    kept = wait_for(lambda: read_verdict(out / names[0]), 60, "the kept episode's verdict")
    assert kept["decision"]["action"] == "keep"
    moved = read_verdict(out / "discarded" / names[1])
    assert moved is not None and moved["verdict"] in ("PASS", "FAIL") and moved["decision"]["action"] == "discard"
    cut = read_verdict(out / "discarded" / names[2])
    assert cut is not None and cut["verdict"] is None and cut["decision"]["action"] == "discard"
    for name in names[1:]:
        assert open_bag(out / "discarded" / name).damage == []  # whole bags, closed with their metadata


def test_the_verdict_at_stop_rejects_on_the_running_pool(tmp_path: Path) -> None:
    """The validator worker as the recorder runs it: episodes of one camera instance 25 ms late —
    which a single episode cannot tell from the 15 ms bound (20–25 ± 7–8 ms) — are rejected at stop
    once the pool of the episodes judged so far can (the fourth), naming the pooled figure and N."""
    from teleop_flywheel.ros.nodes.recorder_verdict import ValidatorProcess
    from teleop_flywheel.testing.synthetic_session import SessionSpec, write_session

    judge = ValidatorProcess(config=str(Path(__file__).resolve().parents[3] / "config" / "validate.yaml"),
                             cameras=["front"])
    try:
        answers = []
        for i, seed in enumerate((5, 6, 1, 10)):
            spec = SessionSpec(duration_s=7.0, motion="rig", seed=seed, camera_clock_skew_ms=25.0, cameras=("front",),
                               session_kind="policy", interventions=((2.4, 4.4, "wrong_grasp"),),
                               session_time_s=60.0 + 20.0 * i, camera_instance="cam-1")
            answers.append(judge(write_session(tmp_path / f"ep{i}", spec).bag)["report"])
    finally:
        judge.close()
    first = answers[0]
    assert first["passed"] and first["camera_pool"]["front"]["episodes"] == 1, first["reasons"]
    last = answers[-1]
    assert not answers[2]["camera_pool"]["front"]["rejected"]  # +22 ± 4.3 ms over 3: not yet surely past 15
    assert last["camera_pool"]["front"]["episodes"] == 4 and last["camera_pool"]["front"]["rejected"], answers
    pooled = [r for r in last["reasons"] if r["code"] == "CLOCK_OFFSET"]
    assert len(pooled) == 1 and "(4 episodes)" in pooled[0]["detail"], last["reasons"]
    assert pooled[0]["numbers"]["pool"]["instance"] == "cam-1"
