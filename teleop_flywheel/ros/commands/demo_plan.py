"""The demo's takes: what each episode does and which of the seeds' failures it carries on purpose,
and, once validated, which of those the validator caught, missed, or found that nobody injected."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

TASK_SPEC = "task_demo.yaml"  # shipped in config/: every take is recorded under it


@dataclass(frozen=True)
class EpisodePlan:
    index: int
    outcome: str  # success | failure | "" (nobody sets it: injected failure)
    label: str | None  # trigger label the operator gives; None = forgets (injected failure)
    camera_stall: bool = False
    misses: bool = False  # the policy puts the brick on the wrong square: the final pose misses the spec
    feedback: bool = False  # the operator's turn in teleop mode, the leader rendering the grasp (no takeover)


def plan(episodes: int) -> list[EpisodePlan]:
    """Mostly clean episodes; one each of the seeds' camera stall, unlabelled takeover, unset outcome;
    the careless operator of the unlabelled takeover also marks a missed place a success (the
    seeds' "marked success, the mug is on its side"), and the failure is a missed place rightly flagged.
    The first is the one with force feedback: the operator's turn is teleoperation (the leader renders
    only while the human drives in teleop mode, docs/teleop.md), a mode switch and back, not a takeover."""
    plans = []
    for i in range(episodes):
        kind = i % 6
        plans.append(EpisodePlan(
            i,
            outcome="" if kind == 3 else ("failure" if kind == 4 else "success"),
            label=None if kind == 2 or i == 0 else ("about_to_collide" if kind == 5 else "wrong_grasp"),
            camera_stall=kind == 1,
            misses=kind in (2, 4),
            feedback=i == 0,
        ))
    return plans


def injected(p: EpisodePlan) -> list[tuple[str, str, str]]:
    """What the demo injected into an episode: (code the validator must give, text the reason's
    detail must contain, what was injected)."""
    out = [("FRAME_GAP", "/cameras/", "camera stall")] if p.camera_stall else []
    if p.label is None and not p.feedback:  # a teleop take has no takeover to label
        out.append(("UNLABELLED_INTERVENTION", "", "takeover left unlabelled"))
    if not p.outcome:
        out.append(("OUTCOME_UNSET", "", "outcome not set"))
    if p.misses and p.outcome == "success":
        out.append(("OUTCOME_MISMATCH", "", "success marked on a missed place"))
    return out


def classify(plans: list[EpisodePlan], names: dict[int, str], reports: dict[str, list[dict[str, Any]]]
             ) -> tuple[list[str], list[str], list[str]]:
    """(caught, missed, unexpected): each injected failure the validator reported, each it did not,
    and each reason nobody injected — one line each, `episode CODE …`."""
    caught: list[str] = []
    missed: list[str] = []
    unexpected: list[str] = []
    for p in plans:
        name = names.get(p.index, f"episode {p.index}")
        reasons = list(reports.get(name, []))
        for code, needle, what in injected(p):
            hit = [r for r in reasons if r["code"] == code and needle in r.get("detail", "")]
            (caught if hit else missed).append(f"{name} {code} ({what})")
            reasons = [r for r in reasons if r not in hit]
        unexpected += [f"{name} {r['code']}({r.get('detail', '')})" for r in reasons]
    return caught, missed, unexpected
