"""`eval watch`'s bookkeeping without a session: which checkpoints wait, the protocol each is judged
under, the figures lineage keeps (and `lineage which` shows), the flag, the index page. The trial
bags here are the statistics demo's (`simulate_protocol`: drawn outcomes, no arm), which is all
the bookkeeping needs; the walks themselves are tested in test/ros/commands/test_eval_watch.py."""
from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import yaml

from teleop_flywheel.cli.verbs import lineage as lineage_verb
from teleop_flywheel.data.provenance.lineage import Registry, add_evaluation
from teleop_flywheel.evaluation.errors import ProtocolError
from teleop_flywheel.evaluation.protocol import load_protocol
from teleop_flywheel.evaluation.report import build_report, read_trial
from teleop_flywheel.evaluation.simulate import simulate_protocol
from teleop_flywheel.evaluation.watch import (
    Candidate,
    discover,
    evaluated,
    figures,
    flagged,
    slug,
    write_candidate_protocol,
    write_index,
)
from teleop_flywheel.policies.lerobot_checkpoint import REQUIRED_FILES, default_checkpoint_id


def _checkpoint_dir(root: Path, content: str = "{}") -> Path:
    root.mkdir(parents=True)
    for name in REQUIRED_FILES:
        (root / name).write_text(content)
    return root


def _protocol(tmp_path: Path) -> Path:
    path = tmp_path / "eval.yaml"
    path.write_text(yaml.safe_dump({
        "format": "teleop_flywheel.eval_protocol/1", "name": "watch-small", "task": "reach",
        "checkpoints": [{"id": "incumbent", "policy": "scripted", "sim_failure_scale": 0.0}],
        "trials_per_condition": 8, "time_limit_s": 3,
        "success": {"criterion": "ends at the place pose",
                    "machine_check": {"final_pose": [0.0] * 6, "tolerance_rad": 0.1}},
        "conditions": [{"name": "a", "sim_failure_rate": 1.0}, {"name": "b", "sim_failure_rate": 1.0}]}))
    return path


def test_discovery_finds_checkpoints_at_any_depth_and_registered_ones_oldest_first(tmp_path: Path) -> None:
    watched = tmp_path / "outputs"
    first = _checkpoint_dir(watched / "run1" / "checkpoints" / "000100" / "pretrained_model")
    os.utime(first / "model.safetensors", (time.time() - 60, time.time() - 60))
    for name in REQUIRED_FILES:
        os.utime(first / name, (time.time() - 60, time.time() - 60))
    second = _checkpoint_dir(watched / "run2" / "pretrained_model", content='{"x": 1}')
    (watched / "half").mkdir()
    (watched / "half" / "config.json").write_text("{}")  # not a checkpoint (yet): no weights
    elsewhere = _checkpoint_dir(tmp_path / "registered_ckpt", content='{"y": 2}')
    reg = Registry(tmp_path / "lineage.json",  # as `train` registers a checkpoint
                   {"ckpt-7": {"checkpoint": "ckpt-7", "training": {"path": str(elsewhere), "steps": 2}}})
    found = discover(watched, reg)
    assert [c.directory for c in found[:1]] == [first.resolve()]
    assert {c.directory for c in found} == {first.resolve(), second.resolve(), elsewhere.resolve()}
    ids = {c.directory: c.id for c in found}
    assert ids[elsewhere.resolve()] == "ckpt-7"  # the id lineage registered it under
    assert ids[second.resolve()] == default_checkpoint_id(second)  # the id the policy node tags it with
    assert ids[first.resolve()] == default_checkpoint_id(first)
    assert ids[first.resolve()].startswith("lerobot:run1-000100:")  # LeRobot's training layout
    # A checkpoint written just now is left for the next look (it may still be being saved).
    assert {c.directory for c in discover(watched, reg, settled_before=time.time() - 10)} == {first.resolve()}
    assert slug("lerobot:run1-000100:3f2a") == "lerobot_run1-000100_3f2a"


def test_candidate_protocol_keeps_the_incumbent_and_refuses_another_for_the_same_folder(tmp_path: Path) -> None:
    protocol = load_protocol(_protocol(tmp_path))
    cand = Candidate("lerobot:m:abc", _checkpoint_dir(tmp_path / "m"))
    path = write_candidate_protocol(protocol, cand, tmp_path / "out")
    derived = load_protocol(path)
    assert derived.checkpoints == ("incumbent", "lerobot:m:abc") and derived.hash != protocol.hash
    assert derived.checkpoint("lerobot:m:abc").policy == "lerobot"
    assert derived.checkpoint("lerobot:m:abc").policy_args == str(cand.directory)
    assert derived.conditions == protocol.conditions and derived.machine_check == protocol.machine_check
    assert write_candidate_protocol(protocol, cand, tmp_path / "out") == path  # a resumed walk: the same file
    with pytest.raises(ProtocolError, match="another protocol; move .* aside"):
        write_candidate_protocol(protocol, Candidate("lerobot:m:abc", tmp_path / "other"), tmp_path / "out")


def test_a_worse_candidate_is_flagged_and_its_figures_reach_lineage_which(tmp_path: Path, capsys) -> None:
    protocol = load_protocol(_protocol(tmp_path))
    cand = Candidate("lerobot:m:abc", _checkpoint_dir(tmp_path / "m"))
    derived = load_protocol(write_candidate_protocol(protocol, cand, tmp_path / "out" / slug(cand.id)))
    bags = simulate_protocol(derived, tmp_path / "out" / slug(cand.id) / "bags", seed=1)  # candidate: always fails
    report = build_report([read_trial(b) for b in bags], derived)
    assert flagged(report, cand.id) and not flagged(report, "incumbent")
    record = figures(report, protocol, cand, tmp_path / "out" / slug(cand.id) / "report.html", bags[0].parent)
    assert record["flagged"] and record["incumbent"] == "incumbent" and record["protocol_hash"] == protocol.hash
    cells = {(c["checkpoint"], c["condition"]): (c["n"], c["successes"]) for c in record["cells"]}
    assert cells == {("incumbent", "a"): (8, 8), ("incumbent", "b"): (8, 8), (cand.id, "a"): (8, 0),
                     (cand.id, "b"): (8, 0)}
    registry = tmp_path / "lineage.json"
    add_evaluation(registry, cand.id, record)
    reg = Registry.load(registry)
    assert evaluated(reg, cand.id, protocol) and not evaluated(reg, "other", protocol)
    index = write_index(tmp_path / "out", reg, protocol)
    page = index.read_text()
    assert "FLAGGED" in page and "8/8" in page and f"{slug(cand.id)}/report.html" in page

    parser = __import__("argparse").ArgumentParser()
    lineage_verb.add_arguments(parser)
    assert lineage_verb.run(parser.parse_args(["--registry", str(registry), "which", cand.id])) == 0
    out = capsys.readouterr().out
    assert "NOT REGISTERED" in out and "FLAGGED: worse than the incumbent" in out
    assert "N=8" in out and "[0.68, 1.00]" in out and "supports lerobot:m:abc worse than incumbent" in out
