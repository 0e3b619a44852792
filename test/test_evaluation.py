"""Evaluation harness: exact statistics vs hand computation, an unattended simulated protocol run, refusals."""
from __future__ import annotations

import math
from fractions import Fraction
from pathlib import Path

import pytest
import yaml

from teleop_flywheel.data.evaluation import (EvalError, build_report, compare, fisher_exact, format_table,
                                             read_trial, simulate_protocol, wilson, write_html)
from teleop_flywheel.protocol import ProtocolError, ProtocolWalker, load_protocol, parse_protocol

EXAMPLE = Path(__file__).resolve().parents[1] / "config" / "eval_example.yaml"


def test_wilson_hand_computed() -> None:
    # k=0, n=10: lower 0, upper = z²/n / (1 + z²/n) = z²/(n + z²)
    z = 1.959963984540054
    assert wilson(0, 10) == pytest.approx((0.0, z * z / (10 + z * z)))
    # k=5, n=10: centre 0.5, half = z*sqrt(0.025 + z²/400) / (1 + z²/10)
    half = z * math.sqrt(0.25 / 10 + z * z / 400) / (1 + z * z / 10)
    assert wilson(5, 10) == pytest.approx((0.5 - half, 0.5 + half))
    assert wilson(5, 10) == pytest.approx((0.2366, 0.7634), abs=1e-4)  # textbook value


def test_fisher_hand_computed() -> None:
    # Lady tasting tea [[3,1],[1,3]]: P(x) = C(4,x)C(4,4-x)/C(8,4); two-sided sums x=0,1,3,4.
    p = [Fraction(math.comb(4, x) * math.comb(4, 4 - x), math.comb(8, 4)) for x in range(5)]
    assert fisher_exact(3, 1, 1, 3) == pytest.approx(float(p[0] + p[1] + p[3] + p[4]))  # 34/70
    assert fisher_exact(4, 0, 0, 4) == pytest.approx(2 / 70)
    # [[10,0],[0,10]]: 2/C(20,10)
    assert fisher_exact(10, 0, 0, 10) == pytest.approx(2 / math.comb(20, 10))
    assert fisher_exact(5, 5, 5, 5) == pytest.approx(1.0)


def test_comparison_sentences() -> None:
    assert "supports b better" in compare("a", "b", "x", 2, 20, 18, 20).sentence
    assert "supports b worse" in compare("a", "b", "x", 18, 20, 2, 20).sentence
    s = compare("a", "b", "x", 5, 10, 7, 10)
    assert s.verdict == "not_enough" and "not enough trials to tell" in s.sentence and "N = 10" in s.sentence


def test_protocol_validation_and_hash(tmp_path: Path) -> None:
    data = yaml.safe_load(EXAMPLE.read_text())
    p = parse_protocol(data, "a.yaml")
    reordered = dict(reversed(list(data.items())))
    assert parse_protocol(reordered, "b.yaml").hash == p.hash
    bad = dict(data, trials_per_condition=0)
    with pytest.raises(ProtocolError, match="x.yaml.*trials_per_condition"):
        parse_protocol(bad, "x.yaml")
    bad = dict(data, conditions=[{"description": "no name"}])
    with pytest.raises(ProtocolError, match=r"conditions\[0\].*'name'"):
        parse_protocol(bad, "x.yaml")
    w = ProtocolWalker(p)
    slot = w.next_slot()
    assert "center" in w.reset_prompt(slot)
    with pytest.raises(ProtocolError, match="failure needs a label"):
        w.record(slot, "failure")


def _small(tmp_path: Path, trials: int, name: str = "p.yaml", **over) -> Path:
    data = yaml.safe_load(EXAMPLE.read_text())
    data.update(trials_per_condition=trials, **over)
    data["conditions"] = [dict(name="easy", sim_failure_rate=0.1), dict(name="hard", sim_failure_rate=0.7)]
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return path


def test_unattended_run_rates_match_configured(tmp_path: Path) -> None:
    proto = load_protocol(_small(tmp_path, 30))
    bags = simulate_protocol(proto, tmp_path / "bags", seed=0, checkpoint_scale={"ckpt-b": 0.1}, duration_s=0.4)
    trials = [read_trial(b) for b in bags]
    assert {t.protocol_hash for t in trials} == {proto.hash}
    report = build_report(trials, proto, registry=tmp_path / "none.json")
    assert not report.incomplete
    cells = {(c.checkpoint, c.condition): c for c in report.cells}
    for (ck, cond), cell in cells.items():
        rate = {"easy": 0.9, "hard": 0.3}[cond] if ck == "ckpt-a" else {"easy": 0.99, "hard": 0.93}[cond]
        assert cell.n == 30 and cell.ci95[0] <= rate <= cell.ci95[1], (ck, cond, cell)
        assert sum(cell.failure_labels.values()) == 30 - cell.successes
    hard_a = cells["ckpt-a", "hard"]
    assert hard_a.interventions_per_trial > 0 and hard_a.human_share > 0
    overall = report.comparisons[-1]
    assert overall.condition == "overall" and overall.verdict == "better"
    write_html(report, tmp_path / "r" / "eval.html")
    assert (tmp_path / "r" / "eval.png").stat().st_size > 0


def test_mixed_protocols_refused_and_incomplete_marked(tmp_path: Path) -> None:
    p1 = load_protocol(_small(tmp_path, 3))
    p2 = load_protocol(_small(tmp_path, 3, "q.yaml", time_limit_s=99))
    assert p1.hash != p2.hash
    b1 = simulate_protocol(p1, tmp_path / "one", seed=1, duration_s=0.3, max_trials=5)
    b2 = simulate_protocol(p2, tmp_path / "two", seed=1, duration_s=0.3, max_trials=1)
    t1 = [read_trial(b) for b in b1]
    with pytest.raises(EvalError, match="another protocol"):
        build_report(t1 + [read_trial(b2[0])], p1, registry=tmp_path / "none.json")
    report = build_report(t1, p1, registry=tmp_path / "none.json")
    assert report.incomplete and any(not c.complete and c.n < 3 for c in report.cells)
    assert "INCOMPLETE" in format_table(report)


def test_table_links_checkpoints_to_manifests_and_says_when_it_cannot(tmp_path: Path) -> None:
    from teleop_flywheel.cli import main as cli_main
    from teleop_flywheel.data.synthetic_dataset import SyntheticSpec, write

    proto_path = _small(tmp_path, 2)
    bags = simulate_protocol(load_protocol(proto_path), tmp_path / "bags", seed=2, duration_s=0.3)
    root = write(tmp_path / "ds", SyntheticSpec(episodes=4, min_length=20, max_length=30, seed=1)).root
    manifest, registry = tmp_path / "run46.json", tmp_path / "lineage.json"
    assert cli_main(["manifest", "create", str(root), "--out", str(manifest)]) == 0
    assert cli_main(["lineage", "--registry", str(registry), "register", "ckpt-a", str(manifest)]) == 0
    table = format_table(build_report([read_trial(b) for b in bags], load_protocol(proto_path), registry))
    assert f"lineage ckpt-a: run run46, manifest {manifest.resolve()}" in table and "4 episodes" in table
    assert f"lineage ckpt-b: NOT REGISTERED in {registry}" in table
    registry.write_text("{not json")
    table = format_table(build_report([read_trial(b) for b in bags], load_protocol(proto_path), registry))
    assert f"lineage ckpt-a: UNKNOWN: {registry}: unreadable lineage registry" in table


def test_trials_without_outcome_and_machine_disagreement_are_noted(tmp_path: Path) -> None:
    from dataclasses import replace

    proto = load_protocol(_small(tmp_path, 1))
    trials = [read_trial(b) for b in simulate_protocol(proto, tmp_path / "bags", seed=0, duration_s=0.3)]
    trials[0] = replace(trials[0], outcome="unset")
    trials[1] = replace(trials[1], outcome="success", machine_check="fail: follower ends 0.4 rad from final_pose")
    report = build_report(trials, proto, registry=tmp_path / "none.json")
    assert sum(c.n for c in report.cells) == len(trials) - 1 and report.incomplete
    text = format_table(report)
    assert "1 trial(s) without an outcome left out" in text and Path(trials[0].bag).name in text
    assert "machine check disagrees with the recorded outcome in 1 trial(s)" in text
