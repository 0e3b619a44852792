"""Walking an evaluation protocol on the real simulated session graph: unattended (the machine
check judges each trial) and attended (an operator's keys in a pty), one bag per trial, then the
results table. Also the protocol fields the walk depends on: checkpoint specs, machine check,
reserved failure labels."""
from __future__ import annotations

import contextlib
import io
import os
import pty
import re
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml
from support.cli import run_cli
from support.terminal import read_for, read_until

from teleop_flywheel.core.bag_topics import POLICY_COMMAND, POLICY_INFERENCE
from teleop_flywheel.data.validate.reasons import ValidateConfig
from teleop_flywheel.data.validate.validator import validate_bag
from teleop_flywheel.evaluation.errors import ProtocolError
from teleop_flywheel.evaluation.protocol import (
    MachineCheck,
    ProtocolWalker,
    SimWorld,
    Takeover,
    load_protocol,
    parse_protocol,
)
from teleop_flywheel.evaluation.report import build_report, follower_poses, read_trial
from teleop_flywheel.recording.mcap.reader import open_bag

POSE = [0.2, -0.2, 0.3, 0.1, 0.2, 0.5]


def _protocol(tmp_path: Path, name: str = "p.yaml", **over: object) -> Path:
    data: dict[str, object] = {
        "format": "teleop_flywheel.eval_protocol/1", "name": "sim-small", "task": "reach the place pose",
        "checkpoints": [{"id": "ckpt-a"}, {"id": "ckpt-b", "sim_failure_scale": 0.0}],
        "trials_per_condition": 2, "time_limit_s": 6, "interventions_allowed": True,
        "success": {"criterion": "ends at the place pose",
                    "machine_check": {"final_pose": POSE, "tolerance_rad": 0.15}},
        "failure_labels": ["missed_grasp", "other"],
        "conditions": [{"name": "easy", "sim_failure_rate": 0.0}, {"name": "hard", "sim_failure_rate": 1.0}],
    }
    data.update(over)
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return path


def _cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "teleop_flywheel.cli", *args], text=True, capture_output=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def _no_verdict(tmp_path: Path, **nodes: dict[str, object]) -> str:
    """A `--param-file` turning the recorder's verdict at stop off, and setting `nodes`' parameters: the
    walks' tests read no verdict, and with it on the recorder's validator worker judges every trial
    beside the rig and the session's stop waits up to 5 s for the last one's."""
    path = tmp_path / "no_verdict.yaml"
    sections = {"recorder": {"verdict": False}, **nodes}
    path.write_text(yaml.safe_dump({node: {"ros__parameters": params} for node, params in sections.items()}))
    return str(path)


def test_checkpoint_specs_machine_check_and_reserved_labels(tmp_path: Path) -> None:
    p = load_protocol(_protocol(tmp_path))
    assert p.checkpoints == ("ckpt-a", "ckpt-b") and p.checkpoint("ckpt-b").sim_failure_scale == 0.0
    assert p.machine_check == MachineCheck(tuple(POSE), 0.15, "other")
    assert {"timeout", "intervened"} <= set(p.failure_labels)
    assert p.machine_check.judge([v + 0.1 for v in POSE])[0]
    passed, why = p.machine_check.judge([v + 0.3 for v in POSE])
    assert not passed and "0.300 rad" in why and "outside" in why
    assert p.machine_check.judge(None) == (False, "no follower state received")
    raw = yaml.safe_load(_protocol(tmp_path).read_text())
    with pytest.raises(ProtocolError, match=r"x.yaml: success.machine_check: field 'final_pose' must be 6"):
        parse_protocol(
            dict(raw, success={"criterion": "c", "machine_check": {"final_pose": [1, 2], "tolerance_rad": 1}}), "x.yaml"
        )
    with pytest.raises(ProtocolError, match=r"x.yaml: checkpoints\[0\]: unknown field\(s\) \['gpu'\]"):
        parse_protocol(dict(raw, checkpoints=[{"id": "a", "gpu": 1}]), "x.yaml")
    with pytest.raises(ProtocolError, match="distinct ids"):
        parse_protocol(dict(raw, checkpoints=["a", {"id": "a"}]), "x.yaml")
    # Where interventions are forbidden, a trial with one is only accepted as an 'intervened' failure.
    strict = parse_protocol(dict(raw, interventions_allowed=False), "s.yaml")
    w = ProtocolWalker(strict)
    slot = w.next_slot()
    with pytest.raises(ProtocolError, match="not allowed"):
        w.record(slot, "success", "", interventions=1)
    assert w.record(slot, "failure", "intervened", interventions=1).failure_label == "intervened"


def test_sim_conditions_parse_and_each_bad_field_is_one_line_naming_it(tmp_path: Path) -> None:
    raw = yaml.safe_load(_protocol(tmp_path).read_text())
    ok = parse_protocol(dict(raw, conditions=[
        {"name": "far", "sim": {"start_pose": [0.1, 0, 0, 0, 0, 1], "camera_latency_ms": 40, "joint_noise_rad": 0.002}},
        {"name": "plain"}]), "x.yaml")
    assert ok.condition("far").sim == SimWorld((0.1, 0.0, 0.0, 0.0, 0.0, 1.0), 40.0, 0.002)
    assert ok.condition("plain").sim == SimWorld()
    assert ok.hash != parse_protocol(dict(raw, conditions=[{"name": "far"}, {"name": "plain"}]), "x.yaml").hash
    bad = {
        "[]": (r"x.yaml: conditions\[0\]: sim: must be a mapping with any of start_pose, camera_latency_ms"),
        "{fog: 1}": r"x.yaml: conditions\[0\]: sim: unknown field\(s\) \['fog'\] \(known: \['start_pose'",
        "{start_pose: [1, 2]}": (r"sim: field 'start_pose' must be 6 joint positions in radians "
                                 r"\(\|q\| <= 3.2\), got \[1, 2\]"),
        "{start_pose: [9, 0, 0, 0, 0, 0]}": r"sim: field 'start_pose' must be 6 joint positions",
        "{camera_latency_ms: -5}": r"'camera_latency_ms' must be a number of milliseconds in \[0, 10000\], got -5",
        "{joint_noise_rad: true}": r"field 'joint_noise_rad' must be a number of radians in \[0, 0.5\], got True",
        "{joint_noise_rad: 2}": r"field 'joint_noise_rad' must be a number of radians in \[0, 0.5\], got 2",
    }
    for text, message in bad.items():
        with pytest.raises(ProtocolError, match=message) as exc:
            parse_protocol(dict(raw, conditions=[{"name": "c", "sim": yaml.safe_load(text)}]), "x.yaml")
        assert "\n" not in str(exc.value)
    with pytest.raises(ProtocolError, match=r"x.yaml: conditions\[0\]: unknown field\(s\) \['start_pose'\]"):
        parse_protocol(dict(raw, conditions=[{"name": "c", "start_pose": [0] * 6}]), "x.yaml")
    takeover = {"at_s": 1, "hold_s": 2, "label": "too_slow"}
    assert parse_protocol(dict(raw, conditions=[{"name": "c", "sim": {"takeover": takeover}}]), "x.yaml").condition(
        "c").sim.takeover == Takeover(1.0, 2.0, "too_slow")
    bad_takeovers = {
        "{label: bored}": r"sim: takeover: field 'label' must be a trigger label \(wrong_object, .*got 'bored'",
        "{at_s: 1, hold_s: 0, label: other}": r"takeover: field 'hold_s' must be a number of seconds in \[0.1, ",
        "{at_s: 4, hold_s: 2, label: other}": r"conditions\[0\]: sim: takeover ends 6 s into a trial, not before "
                                              r"time_limit_s 6",
        "{at_s: 1, hold_s: 1, label: other, foot: left}": r"takeover: unknown field\(s\) \['foot'\]",
    }
    for text, message in bad_takeovers.items():
        with pytest.raises(ProtocolError, match=message):
            parse_protocol(dict(raw, conditions=[{"name": "c", "sim": {"takeover": yaml.safe_load(text)}}]), "x.yaml")
    with pytest.raises(ProtocolError, match="takeover in a protocol with interventions_allowed false"):
        parse_protocol(dict(raw, interventions_allowed=False,
                            conditions=[{"name": "c", "sim": {"takeover": takeover}}]), "x.yaml")


def test_run_refuses_protocol_on_the_wrong_session(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # In this process (each command process would import the stack again): every refusal comes before a
    # session starts; stdin is no terminal, as for a command whose input is /dev/null.
    monkeypatch.setattr(sys, "stdin", io.StringIO())
    proto = str(_protocol(tmp_path))
    code, _out, err = run_cli(capsys, "run", "teleop", "--protocol", proto)
    assert code == 2 and "kind rollout or sim" in err
    code, _out, err = run_cli(capsys, "run", "rollout", "--protocol", proto, "--unattended")
    assert code == 2 and "simulated hardware only" in err
    code, _out, err = run_cli(capsys, "run", "sim", "--protocol", proto)
    assert code == 2 and "not one" in err
    code, _out, err = run_cli(capsys, "run", "sim", "--protocol", str(tmp_path / "nope.yaml"), "--unattended")
    assert code == 2 and "cannot read protocol" in err and "nope.yaml" in err


def _waypoints(tmp_path: Path, name: str, pose: list[float]) -> str:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"waypoints": [pose], "move_s": 0.8}))
    return str(path)


NEAR = [0.1, -0.1, 0.2, 0.0, 0.1, 0.4]
FAR = [-0.3, 0.1, -0.1, 0.3, -0.2, 0.2]


def test_unattended_sim_run_judges_what_each_checkpoint_did_under_its_conditions(tmp_path: Path) -> None:
    """No drawn outcomes: ckpt-a's waypoint leads to the place pose, ckpt-b's beside it, and the
    machine check on each bag's last follower state says so. Each condition's simulated world is
    in place: the first recorded follower state is its start pose, and the camera frames of the
    `far` condition arrive its 40 ms later. In `near` a scripted operator takes over (pedal down,
    label, pedal up) and the policy finishes: its bags record the intervention with its label and
    the blend weight. No trial is shorter than the validator's shortest episode, though ckpt-a
    reaches its pose in under a second, and none fails the validator for its span or an unlabelled
    takeover. The recorder runs without its verdict at stop: its worker (nice 10) starved behind
    the simulated rig on a busy machine for 12 s to minutes after the last trial; the test validates
    each bag itself, with the same checks and thresholds (the walk's wait for verdicts is run by
    test_eval_watch)."""
    wrong = [v + 0.4 for v in POSE]
    proto = load_protocol(_protocol(
        tmp_path, trials_per_condition=1,
        # near: the hand-back at 1.1 s, a blend-out the speed limit may stretch, 0.8 s back (there by ~2 s,
        # ended by the 1 s hold at ~3 s); ckpt-b's trials, never at the pose, run to the limit.
        time_limit_s=4,
        checkpoints=[{"id": "ckpt-a", "policy": "scripted", "policy_args": _waypoints(tmp_path, "a", POSE)},
                     {"id": "ckpt-b", "policy": "scripted", "policy_args": _waypoints(tmp_path, "b", wrong)}],
        conditions=[{"name": "near", "sim": {"start_pose": NEAR,
                                             "takeover": {"at_s": 0.3, "hold_s": 0.8, "label": "too_slow"}}},
                    {"name": "far", "sim": {"start_pose": FAR, "camera_latency_ms": 40, "joint_noise_rad": 0.002}}]))
    out = tmp_path / "bags"
    # The camera at 320x240 and no metrics node: what is checked needs neither more pixels nor the
    # exporter, and each costs CPU on a 2-core machine.
    no_verdict = _no_verdict(tmp_path, camera_front={"width": 320, "height": 240})
    res = _cli("run", "sim", "--protocol", proto.path, "--unattended", "--arg", f"output_dir={out}",
               "--arg", "metrics=off", "--param-file", no_verdict)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "4/4 trials recorded" in res.stdout
    bags = sorted(p for p in out.iterdir() if p.is_dir() and p.name != "discarded")
    assert len(bags) == 4
    trials = [read_trial(b) for b in bags]
    thresholds = ValidateConfig.load(None)  # the recorder's validate_config is the shipped one
    for b, t in zip(bags, trials, strict=True):
        bag = open_bag(b)
        meta = bag.episode
        assert meta is not None and meta.session_kind == "evaluation" and meta.task == proto.task
        assert t.protocol_hash == proto.hash
        first, last = follower_poses(b)
        assert first is not None and last is not None
        start = NEAR if t.condition == "near" else FAR
        assert max(abs(x - y) for x, y in zip(first, start, strict=True)) < 0.1, (b, first)  # gravity sags
        # The outcome is the machine check on the recorded final state.
        assert proto.machine_check.judge(last)[0] == (t.outcome == "success"), (b, last)
        assert meta.extra["machine_check"].startswith("pass" if t.outcome == "success" else "fail")
        # Every policy command in the bag is the trial's checkpoint (the start-pose move is not recorded),
        # and each came with its inference time.
        assert set(bag.joint_state(POLICY_COMMAND).frame_ids) == {t.checkpoint}, b
        inference = bag.joint_state(POLICY_INFERENCE)
        assert inference.names == ["inference_ms", "period_ms", "late"] and len(inference.position) > 10
        camera = bag.camera_topics()["front"]
        # The least delay: no `far` frame is delivered before its capture + 40 ms, while a loaded machine
        # delays many `near` frames by as much (the median did), but not every one.
        delay_ms = float(np.min(bag.raw(camera).log_ns - bag.stamps(camera))) / 1e6
        assert (delay_ms >= 40) == (t.condition == "far"), (b, delay_ms)
        took_over = t.condition == "near"
        assert t.interventions == int(took_over) and t.triggers == (["too_slow"] if took_over else []), (b, t)
        alpha = bag.authority().stream(["alpha"]).values[:, 0]
        # The blend weight rises towards the human (a blend stretched to respect the speed limit may not
        # reach 1 in 0.8 s when the leader is far) and is back at 0 by the end.
        assert (alpha.max() > 0.5) == took_over and alpha[-1] == 0.0, (b, alpha.max())
        codes = {r.code for r in validate_bag((str(b), thresholds)).reasons}
        assert not {"DURATION_OUT_OF_RANGE", "UNLABELLED_INTERVENTION"} & codes, (b, codes)
    report = build_report(trials, proto)
    cells = {(c.checkpoint, c.condition): c.successes for c in report.cells}
    assert cells == {("ckpt-a", "near"): 1, ("ckpt-a", "far"): 1, ("ckpt-b", "near"): 0, ("ckpt-b", "far"): 0}
    assert not report.incomplete
    table = re.sub(r"\s+", " ", res.stdout)
    assert "ckpt-a far 1/1 1 100%" in table and "ckpt-b far 1/1 0 0%" in table

    # Lose ckpt-a's two trials (the first and one between ckpt-b's, the walk's shortest); a resumed walk
    # records exactly those again and keeps the others.
    lost = [b for b, t in zip(bags, trials, strict=True) if t.checkpoint == "ckpt-a"]
    kept = [b for b in bags if b not in lost]
    assert len(lost) == 2 and lost[0] == bags[0] and lost[1] != bags[-1]
    for b in lost:
        shutil.rmtree(b)
    again = _cli("run", "sim", "--protocol", proto.path, "--unattended", "--resume", "--arg", f"output_dir={out}",
                 "--arg", "metrics=off", "--param-file", no_verdict)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "resuming: 2 trial(s)" in again.stdout and "4/4 trials recorded" in again.stdout
    now = sorted(p for p in out.iterdir() if p.is_dir() and p.name != "discarded")
    assert len(now) == 4 and set(kept) <= set(now)
    assert sorted((t.checkpoint, t.condition) for t in map(read_trial, set(now) - set(kept))) == [
        ("ckpt-a", "far"), ("ckpt-a", "near")]
    assert not build_report([read_trial(b) for b in now], proto).incomplete


def _end(pid: int, fd: int) -> int:
    """Reap the child: it should have exited by itself; else SIGTERM, then SIGKILL. Reads its
    output meanwhile so a full pty never blocks it."""
    deadline = time.monotonic() + 30
    signalled = False
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            os.close(fd)
            return status
        if time.monotonic() > deadline:
            os.kill(pid, 9)
        elif not signalled and time.monotonic() > deadline - 20:
            os.kill(pid, 15)
            signalled = True
        if select.select([fd], [], [], 0.2)[0]:
            with contextlib.suppress(OSError):
                os.read(fd, 65536)


LIMIT_S = 3  # the keys of a trial come 0.5 s into it: 2.5 s of room on a loaded machine


def test_attended_run_walks_the_operator_through_the_protocol_in_a_pty(tmp_path: Path) -> None:
    proto = load_protocol(_protocol(tmp_path, checkpoints=["ckpt-a"], conditions=[{"name": "only"}],
                                    trials_per_condition=5, time_limit_s=LIMIT_S, interventions_allowed=False))
    out = tmp_path / "bags"
    no_verdict = _no_verdict(tmp_path)
    pid, fd = pty.fork()
    if pid == 0:
        # No camera and no metrics node: the walk and its outcomes need neither.
        os.execv(sys.executable, [sys.executable, "-m", "teleop_flywheel.cli", "run", "sim", "--protocol", proto.path,
                                  "--arg", f"output_dir={out}", "--arg", "cameras=", "--arg", "metrics=off",
                                  "--param-file", no_verdict])
    try:
        def trial(n: int) -> None:
            read_until(fd, rf"{n - 1}/5 trials done.*reset for condition 'only'", 90)
            os.write(fd, b"s")
            read_until(fd, "TRIAL RUNNING")

        trial(1)
        read_for(fd, 0.5)  # the operator's decision, well inside the time limit
        os.write(fd, b"x")  # discard: the same trial comes up again, nothing left on disk
        read_until(fd, "trial discarded")
        trial(1)
        read_for(fd, 0.5)
        os.write(fd, b"y")
        trial(2)
        read_for(fd, 0.5)
        os.write(fd, b"n")
        read_until(fd, r"failure: why\? 1=missed_grasp")
        # Past the time limit while choosing (the walker drawing all along): the operator's label stands, no timeout.
        assert f"time limit {LIMIT_S:g} s reached" not in read_for(fd, LIMIT_S)
        os.write(fd, b"1")
        trial(3)
        read_for(fd, 0.5)
        os.write(fd, b" ")  # the operator takes over where the protocol forbids it
        read_until(fd, r"failure \(intervened\)")
        os.write(fd, b" ")  # hands back (between trials: the terminal pedal works there too)
        read_until(fd, r"3/5 trials done.*reset for condition 'only'", 90)
        os.write(fd, b" ")  # takes over before the trial starts, still holding when it does
        read_until(fd, r"intervention 2")
        os.write(fd, b"s")
        read_until(fd, r"failure \(intervened\)")
        os.write(fd, b" ")
        trial(5)  # then waits past the time limit
        seen = read_until(fd, r"failure \(timeout\)", 30)  # one read may already hold what follows it
        if "session stopped cleanly" not in seen:
            seen += read_until(fd, r"session stopped cleanly", 60)
        assert re.search(r"5/5 trials recorded.*session stopped cleanly", seen, re.S), seen[-3000:]
        text = read_until(fd, r"ckpt-a\s+only\s+5/5\s+1", 60)
    finally:
        status = _end(pid, fd)
    assert "intervened" in text
    bags = sorted(p for p in out.iterdir() if p.is_dir() and p.name != "discarded")
    assert len(bags) == 5, bags  # the discarded trial was moved aside (never deleted)
    assert len(list((out / "discarded").iterdir())) == 1
    trials = list(map(read_trial, bags))
    got = [(t.outcome, t.failure_label) for t in trials]
    assert got == [("success", ""), ("failure", "missed_grasp"), ("failure", "intervened"), ("failure", "intervened"),
                   ("failure", "timeout")]
    assert trials[3].interventions == 1 and trials[3].first_intervention_s == 0.0  # held at the start
    # The machine check is recorded beside the operator's word (the follower never went to POSE).
    assert all("machine_check" in open_bag(b).episode.extra for b in bags)
    assert os.waitstatus_to_exitcode(status) == 0


def test_a_checkpoint_that_cannot_load_ends_the_walk_with_a_clear_error(tmp_path: Path) -> None:
    proto = _protocol(tmp_path, checkpoints=[{"id": "ckpt-x", "policy": "nosuch"}])
    # No camera, no metrics node and no verdict worker: the walk ends at the first checkpoint's swap, before
    # any of them matters.
    res = _cli("run", "sim", "--protocol", str(proto), "--unattended", "--arg", f"output_dir={tmp_path / 'bags'}",
               "--arg", "cameras=", "--arg", "metrics=off", "--param-file", _no_verdict(tmp_path))
    assert res.returncode == 1, res.stderr[-2000:]
    assert "checkpoint ckpt-x: the policy node cannot run it (cannot load policy 'nosuch'" in res.stderr
    assert "unknown policy 'nosuch'" in res.stderr and "the running policy is unchanged" in res.stderr
    assert "Traceback" not in res.stderr
    assert not any((tmp_path / "bags").glob("*/metadata.yaml"))  # no trial was recorded
