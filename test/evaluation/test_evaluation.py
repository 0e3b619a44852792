"""Evaluation harness: exact statistics vs hand computation, an unattended simulated protocol run, refusals."""
from __future__ import annotations

import json
import math
import shutil
from fractions import Fraction
from pathlib import Path

import pytest
import yaml
from support.imports import loaded_after
from support.paths import ROOT

from teleop_flywheel.evaluation.errors import EvalError, ProtocolError
from teleop_flywheel.evaluation.protocol import ProtocolWalker, load_protocol, parse_protocol
from teleop_flywheel.evaluation.report import (
    Cell,
    _comparisons,
    build_report,
    compare,
    format_table,
    read_trial,
    write_html,
)
from teleop_flywheel.evaluation.simulate import simulate_protocol
from teleop_flywheel.evaluation.stats import fisher_exact, holm, wilson

EXAMPLE = ROOT / "config" / "eval_example.yaml"


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


def test_holm_hand_computed() -> None:
    # sorted 0.01, 0.03, 0.04 → ×3, ×2, ×1 = 0.03, 0.06, 0.04 → monotone 0.03, 0.06, 0.06
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0]) and holm([0.2]) == [0.2]


def test_comparison_sentences() -> None:
    assert "supports b better" in compare("a", "b", "x", 2, 20, 18, 20).sentence
    assert "supports b worse" in compare("a", "b", "x", 18, 20, 2, 20).sentence
    s = compare("a", "b", "x", 5, 10, 7, 10)
    assert s.verdict == "not_enough" and "not enough trials to tell" in s.sentence and "N = 10" in s.sentence
    # A perfect baseline can only be matched or undercut: the sentence names the drop that would
    # show. By hand: 15/20 vs 20/20 (margins 35/5) has P(15) = P(20) = C(20,15)/C(40,5), the only
    # tables as extreme: p = 2·15504/658008 = 0.0471 < 0.05; 16/20 is not enough.
    assert fisher_exact(15, 5, 20, 0) == pytest.approx(2 * math.comb(20, 15) / math.comb(40, 5))
    assert fisher_exact(16, 4, 20, 0) > 0.05
    drop = compare("a", "b", "x", 20, 20, 16, 20)
    assert (
        drop.verdict == "not_enough"
        and "b would have to fall to 15/20 for a difference from a's 20/20" in drop.sentence
    )
    # Unequal sizes are named as they are, not as the smaller N for both.
    assert "3 vs 30 trials" in compare("a", "b", "x", 2, 3, 25, 30).sentence
    # Corrected for the comparisons printed together: p = 0.0471 alone is "worse", not among 4 tests.
    assert compare("a", "b", "x", 20, 20, 15, 20).verdict == "worse"
    corrected = compare("a", "b", "x", 20, 20, 15, 20, tests=4, p_adjusted=4 * fisher_exact(15, 5, 20, 0))
    assert corrected.verdict == "not_enough" and "Holm-adjusted over 4 comparisons" in corrected.sentence


def _cells(counts: dict[tuple[str, str], tuple[int, int]]) -> list[Cell]:
    return [Cell(ck, c, None, n, k, k / n, wilson(k, n), True, False, 0.0, 0.0, None, 0, 1.0, 1.0)
            for (ck, c), (k, n) in counts.items()]


def test_overall_is_not_pooled_over_different_condition_mixes() -> None:
    # b is as good or better in every condition; pooling a's 1 left_edge trial against b's 20 would
    # make "overall" say b is worse (45/60 vs 40/41, p = 0.002): Simpson's paradox.
    counts = {("a", "center"): (20, 20), ("a", "dim"): (20, 20), ("a", "left_edge"): (0, 1),
              ("b", "center"): (20, 20), ("b", "dim"): (20, 20), ("b", "left_edge"): (5, 20)}
    comps = _comparisons(["a", "b"], ["center", "dim", "left_edge"], _cells(counts))
    assert [c.verdict for c in comps] == ["not_enough", "not_enough", "not_enough", "not_pooled"]
    assert "not pooled" in comps[-1].sentence and "a: center 20, dim 20, left_edge 1" in comps[-1].sentence
    # Balanced cells pool, and the overall test joins the Holm family.
    counts = {("a", "near"): (5, 10), ("a", "far"): (2, 10), ("b", "near"): (10, 10), ("b", "far"): (9, 10)}
    comps = _comparisons(["a", "b"], ["near", "far"], _cells(counts))
    assert [c.condition for c in comps] == ["near", "far", "overall"]
    raw = [fisher_exact(10, 0, 5, 5), fisher_exact(9, 1, 2, 8), fisher_exact(19, 1, 7, 13)]
    assert [c.p_adjusted for c in comps] == pytest.approx(holm(raw))
    assert comps[-1].verdict == "better" and (comps[-1].b_k, comps[-1].b_n) == (19, 20)


def test_protocol_validation_and_hash(tmp_path: Path) -> None:
    data = yaml.safe_load(EXAMPLE.read_text())
    p = parse_protocol(data, "a.yaml")
    reordered = dict(reversed(list(data.items())))
    assert parse_protocol(reordered, "b.yaml").hash == p.hash
    # How a number is spelled is not content; a date-looking tag is text like any other.
    assert parse_protocol(dict(data, time_limit_s=30.0), "c.yaml").hash == p.hash
    dated = yaml.safe_load("conditions: [{name: c, tags: {since: 2026-11-30}}]")
    assert parse_protocol(dict(data, **dated), "d.yaml").conditions[0].tags == {"since": "2026-11-30"}
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


def test_simulated_trials_rates_match_configured(tmp_path: Path) -> None:
    """Synthetic trial bags (no session graph) at the protocol's rates × checkpoint scales:
    every cell's Wilson interval holds its configured rate. The walk on the simulated arms is
    test_protocol_run.py."""
    proto = load_protocol(
        _small(tmp_path, 30, checkpoints=[{"id": "ckpt-a"}, {"id": "ckpt-b", "sim_failure_scale": 0.1}])
    )
    bags = simulate_protocol(proto, tmp_path / "bags", seed=0, duration_s=0.4)
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


def test_duplicates_refused_extra_trials_flagged_and_no_protocol_noted(tmp_path: Path) -> None:
    proto = load_protocol(_small(tmp_path, 1))
    first = [read_trial(b) for b in simulate_protocol(proto, tmp_path / "one", seed=1, duration_s=0.3)]
    copy = tmp_path / "copy"
    shutil.copytree(first[0].bag, copy)
    with pytest.raises(EvalError, match=f"{copy} and {first[0].bag} are the same recording"):
        build_report(first + [read_trial(copy)], proto, registry=tmp_path / "none.json")
    second = [read_trial(b) for b in simulate_protocol(proto, tmp_path / "two", seed=2, duration_s=0.3)]
    report = build_report(first + second, proto, registry=tmp_path / "none.json")
    assert all(c.over_plan and c.n == 2 for c in report.cells)
    text = format_table(report)
    assert "OVER PLAN" in text and "more trials than planned" in text and "ckpt-a/easy 2/1" in text
    bare = format_table(build_report(first, None, registry=tmp_path / "none.json"))
    assert "no --protocol given: the planned number of trials is unknown" in bare


def test_cli_eval_simulate_uses_checkpoint_scales_and_writes_strict_json(tmp_path: Path, capsys) -> None:
    from teleop_flywheel.cli import main as cli_main

    path = _small(tmp_path, 4, checkpoints=[{"id": "ckpt-a"}, {"id": "ckpt-b", "sim_failure_scale": 0.0}])
    assert cli_main(["eval", "--protocol", str(path), "--simulate", str(tmp_path / "sim"), "--seed", "5",
                     "--registry", str(tmp_path / "none.json"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out, parse_constant=lambda c: pytest.fail(f"{c} in --json output"))
    cells = {(c["checkpoint"], c["condition"]): c for c in report["cells"]}
    assert cells["ckpt-b", "hard"]["successes"] == 4 and cells["ckpt-b", "easy"]["successes"] == 4
    assert all(read_trial(b).protocol_hash for b in (tmp_path / "sim").iterdir())
    # A cell without trials is null in JSON, never NaN.
    trials = [read_trial(b) for b in sorted((tmp_path / "sim").iterdir()) if "ckpt-b__hard" not in b.name]
    empty = build_report(trials, load_protocol(path), registry=tmp_path / "none.json").to_dict()
    cell = next(c for c in empty["cells"] if (c["checkpoint"], c["condition"]) == ("ckpt-b", "hard"))
    assert cell["n"] == 0 and cell["rate"] is None and cell["cycle_median_s"] is None
    json.dumps(empty, allow_nan=False)


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
    # Without the protocol file the majority's hash decides, and the odd one out is named.
    with pytest.raises(EvalError, match=f"another protocol than the majority protocol hash {p1.hash}.*{b2[0]}"):
        build_report(t1 + [read_trial(b2[0])], None, registry=tmp_path / "none.json")


def test_table_links_checkpoints_to_manifests_and_says_when_it_cannot(tmp_path: Path) -> None:
    from teleop_flywheel.cli import main as cli_main
    from teleop_flywheel.testing.synthetic_dataset import SyntheticSpec, write

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


def test_the_recorded_final_state_passes_over_a_sample_missing_joints(tmp_path: Path) -> None:
    """What an unattended trial is judged on: the last follower sample with every joint. A read in
    which two servos did not answer in time (the driver publishes the joints it has) is passed
    over; the reader refuses such a stream whole, which made a trial unjudgeable."""
    from teleop_flywheel.core.bag_topics import FOLLOWER_STATE
    from teleop_flywheel.core.so101 import JOINT_NAMES
    from teleop_flywheel.evaluation.report import follower_poses
    from teleop_flywheel.recording.mcap import cdr
    from teleop_flywheel.recording.mcap.reader import find_bag, open_bag
    from teleop_flywheel.testing.mutations import rewrite
    from teleop_flywheel.testing.synthetic_session import SessionSpec, write_session

    bag = tmp_path / "trial"
    write_session(bag, SessionSpec(duration_s=1.0, joint_hz=50.0, cameras=(), seed=3))
    whole = open_bag(bag).joint_state(FOLLOWER_STATE)
    columns = [whole.names.index(n) for n in JOINT_NAMES]
    n = len(whole.position)

    def partial(topic: str, i: int, data: bytes) -> bytes:
        if topic == FOLLOWER_STATE and i in (0, n - 1):  # the first and the last read lost servos 1 and 2
            js = cdr.decode_joint_states([data])
            return cdr.joint_state_cdr(int(js.stamps_ns[0]), js.names[2:], js.position[0, 2:])
        return data

    damaged = tmp_path / "damaged"
    damaged.mkdir()
    rewrite(payload=partial)(find_bag(bag)[1], damaged / "damaged_0.mcap")
    first, last = follower_poses(damaged / "damaged_0.mcap")
    assert first == pytest.approx(list(whole.position[1, columns]))
    assert last == pytest.approx(list(whole.position[n - 2, columns]))
    assert follower_poses(bag) == (pytest.approx(list(whole.position[0, columns])),
                                   pytest.approx(list(whole.position[n - 1, columns])))


def test_reading_trials_does_not_import_the_data_stack() -> None:
    """An unattended walk reads trials (`read_trial`, `final_follower_pose`) while the rig runs: the
    lineage registry's data stack (pandas, the LeRobot dataset), which only the table needs, cost
    1-4 s of CPU there, taken between a trial's end and its bag's stop."""
    assert loaded_after("from teleop_flywheel.evaluation.report import final_follower_pose, read_trial",
                        "pandas", "pyarrow", "teleop_flywheel.data.provenance") == []
