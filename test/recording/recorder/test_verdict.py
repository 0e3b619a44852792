"""The verdict at stop without ROS: `recording.verdict.VerdictKeeper` judging real bags through the
recorder's validator worker process (`ros.nodes.recorder_verdict.ValidatorProcess`), verdict.json,
the operator's keep/discard and the moves to discarded/."""
from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from teleop_flywheel.data.validate.reasons import ValidateConfig
from teleop_flywheel.data.validate.validator import apply_schema, find_bags, validate_bag
from teleop_flywheel.recording.recorder import verdict
from teleop_flywheel.recording.recorder.verdict import VerdictKeeper, read_verdict
from teleop_flywheel.ros.nodes.recorder_verdict import ValidatorProcess
from teleop_flywheel.testing.synthetic_session import SessionSpec, write_session


@pytest.fixture(scope="module")
def judge() -> Any:
    j = ValidatorProcess("", ["front"])
    yield j
    j.close()


def _bag(root: Path, name: str, **kw: Any) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    write_session(root / name, SessionSpec(duration_s=3.0, cameras=("front",), stamp_clock="ros", **kw))
    return root / name


def _codes(report: Any) -> list[str]:
    return list(dict.fromkeys(r.code for r in report.reasons))


def test_the_verdict_is_what_validate_says_with_the_sessions_cameras(tmp_path: Path, judge: Any) -> None:
    out = tmp_path / "bags"
    clean, stalled = _bag(out, "clean"), _bag(out, "stalled", camera_stall=(1.0, 1.0))
    changes: list[int] = []
    keeper = VerdictKeeper(out, judge, ["front"], "shipped", on_change=lambda: changes.append(1))
    for bag in (clean, stalled):
        keeper.submit(bag)
    assert keeper.status()["verdicts"][0]["episode"] == "clean"
    assert keeper.wait_idle(120)
    cfg = ValidateConfig.load(None)
    for bag in (clean, stalled):  # the same checks and thresholds as `teleop-flywheel validate`
        report = validate_bag((str(bag), cfg))
        apply_schema([report], ["front"])
        doc = read_verdict(bag)
        assert doc is not None and doc["codes"] == _codes(report)
        assert doc["verdict"] == ("PASS" if report.passed else "FAIL") and doc["episode_id"] == report.episode_id
        assert all("\n" not in r["detail"] for r in doc["reasons"])  # one-line details
        assert doc["expected_cameras"] == ["front"] and doc["decision"] is None and doc["validated"]["seconds"] > 0
    assert read_verdict(clean)["verdict"] == "PASS"  # type: ignore[index]
    assert "FRAME_GAP" in read_verdict(stalled)["codes"]  # type: ignore[index]
    status = keeper.status()
    assert status["verdict"]["episode"] == "stalled" and status["verdict"]["verdict"] == "FAIL"
    assert status["verdict"]["reasons"][0]["code"] == "FRAME_GAP" and len(changes) >= 4
    assert [v["verdict"] for v in status["verdicts"]] == ["PASS", "FAIL"]
    # verdict.json is created exclusively: a verdict is never overwritten
    with pytest.raises(FileExistsError):
        verdict.write_verdict(clean, {"format": 1})
    keeper.close()

    # A single episode has no batch to compare with: the camera set is the session's.
    two = ValidatorProcess("", ["front", "wrist"])
    try:
        result = two(clean)
    finally:
        two.close()
    doc = verdict.verdict_doc("clean", result, expected_cameras=["front", "wrist"])
    assert doc["verdict"] == "FAIL" and "SCHEMA_MISMATCH" in doc["codes"]


def test_discard_while_judged_moves_at_once_and_the_verdict_follows_the_bag(tmp_path: Path, judge: Any) -> None:
    out = tmp_path / "bags"
    bag = _bag(out, "episode_1", outcome="unset")
    gate, started = threading.Event(), threading.Event()
    calls: list[Path] = []

    def slow(path: Path) -> Any:  # the real worker, held until the operator has pressed discard
        calls.append(path)
        started.set()
        gate.wait(60)
        return judge(path)

    keeper = VerdictKeeper(out, slow, ["front"])
    keeper.submit(bag)
    assert started.wait(30)
    assert keeper.discard().startswith("discarded episode_1: moved to")
    moved = out / "discarded" / "episode_1"
    assert moved.is_dir() and not bag.exists()  # moved at once, never deleted
    assert keeper.status()["verdict"]["verdict"] == "pending"
    gate.set()
    assert keeper.wait_idle(120)
    assert calls == [bag, moved]  # read while it moved: judged again where it now is
    doc = read_verdict(moved)
    assert doc is not None and doc["verdict"] == "FAIL" and "OUTCOME_UNSET" in doc["codes"]
    assert doc["decision"]["action"] == "discard" and doc["discarded_to"] == str(moved)
    assert verdict.decision(doc) == "discard"
    assert keeper.discard() == "episode_1 already discarded"
    with pytest.raises(ValueError, match="already discarded"):
        keeper.keep()
    keeper.close()


def test_keep_before_or_after_the_verdict_and_discard_after_the_verdict(tmp_path: Path, judge: Any) -> None:
    out = tmp_path / "bags"
    keeper = VerdictKeeper(out, judge, ["front"])
    with pytest.raises(ValueError, match="no episode has been stopped yet"):
        keeper.keep()
    first = _bag(out, "first")
    keeper.submit(first)
    assert keeper.keep() == f"kept {first}"  # before its verdict: written with it
    assert keeper.wait_idle(120)
    assert verdict.decision(read_verdict(first)) == "keep"
    with pytest.raises(ValueError, match="first was already kept"):
        keeper.discard()
    second = _bag(out, "second")
    keeper.submit(second)
    assert keeper.wait_idle(120)
    assert read_verdict(second)["decision"] is None  # type: ignore[index]
    keeper.discard()  # after its verdict: moved, and the verdict marked where it went
    doc = read_verdict(out / "discarded" / "second")
    assert doc is not None and doc["verdict"] == "PASS" and doc["decision"]["action"] == "discard"
    assert sorted(p.name for p in out.iterdir()) == ["discarded", "first"]
    # a batch over the output folder leaves thrown-away episodes out; named, they are read
    assert find_bags([out]) == ([first], [])
    assert find_bags([out / "discarded"]) == ([out / "discarded" / "second"], [])
    keeper.close()


def test_a_worker_that_cannot_judge_says_why_and_comes_back(tmp_path: Path) -> None:
    bad = tmp_path / "thresholds.yaml"
    bad.write_text("max_gap_s: [1\n")
    broken = ValidatorProcess(str(bad), ["front"])
    out = tmp_path / "bags"
    bag = _bag(out, "ep")
    keeper = VerdictKeeper(out, broken, ["front"], str(bad))
    keeper.submit(bag)
    assert keeper.wait_idle(120)
    doc = read_verdict(bag)
    assert doc is not None and doc["verdict"] is None and str(bad) in doc["error"]
    assert verdict.line(doc).startswith("NOT VALIDATED (the validator could not run")
    keeper.close()
    broken.close()

    good = ValidatorProcess("", ["front"])
    try:
        assert good(bag)["report"]["passed"]
        assert good._proc is not None
        good._proc.kill()  # the worker dies between two episodes: the next verdict starts a new one
        good._proc.wait()
        assert good(bag)["report"]["passed"]
    finally:
        good.close()
    assert json.loads((bag / "verdict.json").read_text())["format"] == 1


def test_the_worker_yields_the_cpu_to_the_rig(tmp_path: Path) -> None:
    """Nice 10 in a session of its own whose scheduler autogroup is nice 10 too: with sched_autogroup
    every session competes as a group, so only that keeps it from taking an arm driver's share."""
    import os

    worker = ValidatorProcess("", ["front"])
    try:
        worker(_bag(tmp_path / "bags", "ep"))  # ready and working
        assert worker._proc is not None
        pid = worker._proc.pid
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        assert int(stat[16]) == 10  # nice
        assert os.getsid(pid) == pid != os.getsid(0)  # its own session
        autogroup = Path(f"/proc/{pid}/autogroup")
        if autogroup.exists():
            assert autogroup.read_text().strip().endswith("nice 10")
    finally:
        worker.close()


def test_without_a_judge_an_episode_is_not_validated_and_never_pending(tmp_path: Path) -> None:
    """A recorder with its verdict off says so at once: whoever waits for verdicts (the evaluation
    walk, the console) must not wait for one that never comes."""
    out = tmp_path / "bags"
    keeper = VerdictKeeper(out, None, ["front"])
    keeper.submit(_bag(out, "clean"))
    assert keeper.wait_idle(1.0)
    v = keeper.status()["verdicts"][0]
    assert v["episode"] == "clean" and v["verdict"] is None and v["status"] is None
    assert read_verdict(out / "clean") is None  # nothing judged, nothing written
    keeper.close()
