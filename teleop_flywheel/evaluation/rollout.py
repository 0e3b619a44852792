"""`teleop-flywheel rollout plan|status`: a checkpoint moves from one rig to the fleet only when the numbers say so.

The seeds' staged rollout, "pushing a policy to one robot, then five, then the fleet", decided by
evidence rather than by a single number:

    rollout plan CHECKPOINT --rigs rig_a,rig_b,rig_c --stages 1,3,all --out plan.json
    rollout status plan.json EPISODES...      (bag folders, or a dataset made by `convert`)

A plan names the candidate, the incumbent (or leaves it to the episodes: the checkpoint most
recently recorded on the plan's rigs that is not the candidate), the rigs in order and the
cumulative stage sizes, the metric (`intervention`: an episode with at least one takeover;
`failure`: an episode whose outcome is failure, unset outcomes left out), a minimum N per stage,
the test level and a non-inferiority margin.

`status` reads which checkpoint every recorded episode ran on which rig (each session records its
checkpoint and rig id), finds the stage the candidate is at (the smallest stage holding every rig
that has run it) and decides, from the candidate's episodes against the incumbent's:
- **roll back** when the candidate's rate is higher and a two-sided Fisher exact test gives p < alpha;
- **advance** (to the next stage's rigs, or "complete" at the last) when N ≥ the minimum and the
  upper Wilson bound of the candidate's rate is at most the incumbent's rate plus the margin;
- **hold** otherwise: too few episodes, or not yet shown no worse (the line says which).
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from teleop_flywheel.core.errors import UsageError
from teleop_flywheel.data.lerobot.episode_table import EpisodeRecord
from teleop_flywheel.evaluation.errors import RolloutError
from teleop_flywheel.evaluation.stats import fisher_exact, wilson

FORMAT = "teleop_flywheel.rollout/1"
METRICS = ("intervention", "failure")
ADVANCE, HOLD, ROLL_BACK = "advance", "hold", "roll back"


@dataclass(frozen=True)
class Plan:
    checkpoint: str
    incumbent: str | None
    rigs: tuple[str, ...]
    stages: tuple[int, ...]  # cumulative rig counts, the last = len(rigs)
    metric: str = "intervention"
    min_episodes: int = 30
    alpha: float = 0.05
    margin: float = 0.05

    def stage_rigs(self, i: int) -> tuple[str, ...]:
        return self.rigs[:self.stages[i]]

    def to_dict(self) -> dict[str, Any]:
        return {"format": FORMAT, **asdict(self)}


def parse_stages(text: str, n_rigs: int) -> tuple[int, ...]:
    """"1,3,all" → (1, 3, n_rigs): strictly increasing counts ending with every rig."""
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        count = n_rigs if part == "all" else int(part) if part.isdigit() else -1
        if not 1 <= count <= n_rigs or (out and count <= out[-1]):
            raise UsageError(f"--stages {text!r}: each stage is a rig count (1..{n_rigs}) or 'all', increasing")
        out.append(count)
    if out[-1] != n_rigs:
        out.append(n_rigs)
    return tuple(out)


def load_plan(path: Path) -> Plan:
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RolloutError(f"{path}: cannot read the rollout plan ({exc})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise RolloutError(f"{path}: not a {FORMAT} plan")
    try:
        plan = Plan(str(data["checkpoint"]), data.get("incumbent"), tuple(data["rigs"]), tuple(data["stages"]),
                    str(data["metric"]), int(data["min_episodes"]), float(data["alpha"]), float(data["margin"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise RolloutError(f"{path}: rollout plan field missing or malformed ({exc})") from None
    if plan.metric not in METRICS or not plan.rigs or not plan.stages or plan.stages[-1] != len(plan.rigs):
        raise RolloutError(f"{path}: rollout plan's metric, rigs or stages are inconsistent")
    return plan


@dataclass
class Arm:
    """One checkpoint's episodes under the plan's metric: `bad` of `n` (takeovers or failures)."""

    checkpoint: str
    n: int
    bad: int
    rigs: dict[str, int]

    @property
    def rate(self) -> float | None:
        return self.bad / self.n if self.n else None

    def to_dict(self) -> dict[str, Any]:
        lo, hi = wilson(self.bad, self.n)
        return {**asdict(self), "rate": self.rate, "wilson95": [lo, hi]}


def _bad(rec: EpisodeRecord, metric: str) -> bool | None:
    """Whether an episode counts against its checkpoint; None: it says nothing (unknown)."""
    if metric == "intervention":
        return None if rec.num_interventions is None else rec.num_interventions > 0
    return None if rec.outcome not in ("success", "failure") else rec.outcome == "failure"


def arm(records: list[EpisodeRecord], checkpoint: str, rigs: tuple[str, ...], metric: str) -> Arm:
    out = Arm(checkpoint, 0, 0, {})
    for r in records:
        bad = _bad(r, metric)
        if r.checkpoint != checkpoint or (r.rig_id or "") not in rigs or bad is None:
            continue
        out.n += 1
        out.bad += int(bad)
        out.rigs[r.rig_id or ""] = out.rigs.get(r.rig_id or "", 0) + 1
    return out


def incumbent_of(plan: Plan, records: list[EpisodeRecord]) -> str | None:
    """The plan's incumbent, else the checkpoint most recently recorded on its rigs besides the candidate."""
    if plan.incumbent:
        return plan.incumbent
    others = [r for r in records if r.checkpoint and r.checkpoint != plan.checkpoint and (r.rig_id or "") in plan.rigs]
    if not others:
        return None
    return max(others, key=lambda r: r.recorded_wall_ns or 0).checkpoint


@dataclass
class Decision:
    stage: int  # 0-based
    rigs: tuple[str, ...]
    decision: str
    reason: str
    candidate: Arm
    incumbent: Arm
    p_value: float | None
    next_rigs: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"stage": self.stage + 1, "rigs": list(self.rigs), "decision": self.decision, "reason": self.reason,
                "candidate": self.candidate.to_dict(), "incumbent": self.incumbent.to_dict(),
                "fisher_p": self.p_value, "next_rigs": list(self.next_rigs)}


def decide(plan: Plan, records: list[EpisodeRecord], where: str = "episodes") -> Decision:
    """The decision for the stage the candidate is at (module docstring)."""
    ran = {r.rig_id or "" for r in records if r.checkpoint == plan.checkpoint}
    strays = sorted(ran - set(plan.rigs))
    if strays:
        raise RolloutError(f"{where}: {plan.checkpoint} ran on rig(s) {strays}, which the plan does not include")
    stage = next((i for i in range(len(plan.stages)) if ran <= set(plan.stage_rigs(i))), 0)
    rigs = plan.stage_rigs(stage)
    cand = arm(records, plan.checkpoint, rigs, plan.metric)
    inc_id = incumbent_of(plan, records)
    inc = arm(records, inc_id, plan.rigs, plan.metric) if inc_id else Arm("(none)", 0, 0, {})
    last = stage == len(plan.stages) - 1
    nxt = () if last else plan.stage_rigs(stage + 1)
    what = "takeover" if plan.metric == "intervention" else "failure"
    if inc.n == 0:
        return Decision(stage, rigs, HOLD, f"no incumbent episodes to compare with ({inc_id or 'no incumbent'})",
                        cand, inc, None, nxt)
    p = fisher_exact(cand.bad, cand.n - cand.bad, inc.bad, inc.n - inc.bad) if cand.n else None
    inc_rate = inc.rate or 0.0
    figures = (f"{what} rate {cand.bad}/{cand.n} against the incumbent's {inc.bad}/{inc.n} ({inc_rate:.0%})"
               + (f", Fisher p = {p:.3g}" if p is not None else ""))
    if p is not None and cand.rate is not None and cand.rate > inc_rate and p < plan.alpha:
        return Decision(stage, rigs, ROLL_BACK, f"worse: {figures} < {plan.alpha:g}", cand, inc, p, ())
    if cand.n < plan.min_episodes:
        return Decision(stage, rigs, HOLD, f"{plan.min_episodes - cand.n} more episodes needed on {', '.join(rigs)} "
                        f"({figures})", cand, inc, p, nxt)
    upper = wilson(cand.bad, cand.n)[1]
    bound = inc_rate + plan.margin
    if upper <= bound:
        where_next = "complete: the whole fleet runs it" if last else f"push to {', '.join(nxt)}"
        return Decision(stage, rigs, ADVANCE, f"no worse: upper 95 % Wilson bound {upper:.1%} <= {bound:.1%} "
                        f"(incumbent + margin); {figures}; {where_next}", cand, inc, p, nxt)
    return Decision(stage, rigs, HOLD, f"not yet shown no worse: upper 95 % Wilson bound {upper:.1%} > {bound:.1%} "
                    f"(incumbent + margin); {figures}", cand, inc, p, nxt)

