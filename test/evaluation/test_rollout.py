"""rollout: a candidate better, equal or worse than the incumbent advances, holds or rolls back;
the decision's statistics are recomputed here independently of evaluation/stats.py."""
from __future__ import annotations

import json
import math
from fractions import Fraction
from pathlib import Path
from statistics import NormalDist

import pytest
from support.fleet import episode

from teleop_flywheel.cli import main as cli_main

RIGS = ("rig_a", "rig_b", "rig_c")


def record(root: Path, checkpoint: str, rigs: tuple[str, ...], n: int, takeovers: int, start: int = 0) -> None:
    """n episodes of `checkpoint` spread over `rigs`, the first `takeovers` of them taken over."""
    for i in range(n):
        episode(root, f"{checkpoint}_{i}", rigs[i % len(rigs)], "ana", start + 60 * i, 30, "success", checkpoint,
                ((5, 10),) if i < takeovers else ())


def wilson_upper(k: int, n: int) -> float:
    z = NormalDist().inv_cdf(0.975)
    p = k / n
    return (p + z * z / (2 * n) + z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))) / (1 + z * z / n)


def fisher_two_sided(a: int, b: int, c: int, d: int) -> float:
    n, row, col = a + b + c + d, a + b, a + c

    def p(x: int) -> Fraction:
        return Fraction(math.comb(row, x) * math.comb(n - row, col - x), math.comb(n, col))

    tables = [p(x) for x in range(max(0, col - (n - row)), min(row, col) + 1)]
    return float(sum(t for t in tables if t <= p(a)))


def status(tmp_path: Path, capsys: pytest.CaptureFixture[str], stages: str = "1,all", **plan: str) -> dict:
    out = tmp_path / f"plan_{len(list(tmp_path.glob('plan_*')))}.json"
    extra = [x for k, v in plan.items() for x in (f"--{k.replace('_', '-')}", v)]
    assert cli_main(["rollout", "plan", "ckpt-new", "--rigs", ",".join(RIGS), "--stages", stages, "--out", str(out),
                     *extra]) == 0
    capsys.readouterr()
    assert cli_main(["rollout", "status", str(out), str(tmp_path / "bags"), str(INCUMBENT[0]), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


INCUMBENT: list[Path] = []


@pytest.fixture(scope="module", autouse=True)
def incumbent(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The incumbent's episodes, written once: 30 % of 60 taken over, across the three rigs."""
    INCUMBENT[:] = [tmp_path_factory.mktemp("incumbent")]
    record(INCUMBENT[0], "ckpt-old", RIGS, 60, 18)


@pytest.fixture
def fleet(tmp_path: Path) -> Path:
    return tmp_path


@pytest.mark.parametrize(("takeovers", "decision"), [(2, "advance"), (12, "hold"), (28, "roll back")])
def test_better_equal_worse(fleet: Path, capsys: pytest.CaptureFixture[str], takeovers: int, decision: str) -> None:
    record(fleet / "bags", "ckpt-new", ("rig_a",), 40, takeovers, start=10**6)
    d = status(fleet, capsys)
    assert d["decision"] == decision and d["stage"] == 1 and d["rigs"] == ["rig_a"]
    assert (d["candidate"]["n"], d["candidate"]["bad"]) == (40, takeovers)
    assert (d["incumbent"]["n"], d["incumbent"]["bad"]) == (60, 18)
    assert d["candidate"]["wilson95"][1] == pytest.approx(wilson_upper(takeovers, 40), abs=1e-12)
    assert d["fisher_p"] == pytest.approx(fisher_two_sided(takeovers, 40 - takeovers, 18, 42), rel=1e-12)
    if decision == "advance":
        assert wilson_upper(takeovers, 40) <= 0.30 + 0.05 and d["next_rigs"] == list(RIGS)
    elif decision == "hold":
        assert wilson_upper(takeovers, 40) > 0.35 and fisher_two_sided(12, 28, 18, 42) >= 0.05
    else:
        assert fisher_two_sided(28, 12, 18, 42) < 0.05 and d["next_rigs"] == []


def test_too_few_episodes_hold_and_say_how_many(fleet: Path, capsys: pytest.CaptureFixture[str]) -> None:
    record(fleet / "bags", "ckpt-new", ("rig_a",), 10, 0, start=10**6)
    d = status(fleet, capsys)
    assert d["decision"] == "hold" and "20 more episodes needed on rig_a" in d["reason"]


def test_the_stage_follows_the_rigs_that_ran_it(fleet: Path, capsys: pytest.CaptureFixture[str]) -> None:
    record(fleet / "bags", "ckpt-new", ("rig_a", "rig_b"), 40, 1, start=10**6)
    d = status(fleet, capsys, stages="1,2,all")
    assert d["stage"] == 2 and d["rigs"] == ["rig_a", "rig_b"] and d["decision"] == "advance"
    assert d["candidate"]["rigs"] == {"rig_a": 20, "rig_b": 20}
    last = status(fleet, capsys, stages="2,all", min_episodes="10")
    assert last["stage"] == 1  # rig_a and rig_b are the first stage of this plan
    # The failure metric: every episode succeeded, so no failure is a takeover-free 0 of 40.
    failures = status(fleet, capsys, metric="failure")
    assert failures["candidate"]["bad"] == 0 and failures["incumbent"]["bad"] == 0


def test_text_and_errors(fleet: Path, capsys: pytest.CaptureFixture[str]) -> None:
    record(fleet / "bags", "ckpt-new", ("rig_d",), 2, 0, start=10**6)
    plan = fleet / "p.json"
    assert cli_main(["rollout", "plan", "ckpt-new", "--rigs", "rig_a,rig_b", "--out", str(plan)]) == 0
    assert cli_main(["rollout", "plan", "ckpt-new", "--rigs", "rig_a,rig_b", "--out", str(plan)]) == 2
    assert "plan already exists" in capsys.readouterr().err
    assert cli_main(["rollout", "status", str(plan), str(fleet / "bags"), str(INCUMBENT[0])]) == 2
    assert "ran on rig(s) ['rig_d'], which the plan does not include" in capsys.readouterr().err
    assert cli_main(["rollout", "plan", "x", "--rigs", "a,b", "--stages", "2,1", "--out", str(fleet / "q")]) == 2
    bad = fleet / "bad.json"
    bad.write_text("{}")
    assert cli_main(["rollout", "status", str(bad), str(fleet / "bags")]) == 2
    assert "not a teleop_flywheel.rollout/1 plan" in capsys.readouterr().err
