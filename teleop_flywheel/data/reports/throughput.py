"""Station throughput and the cost of demonstrations, from recorded start and stop times.

The seeds' costing: `per demo = (motion + reset) × (1 + overhead)`, `per hour = 3600 / per demo`,
and "10,000 demos for one task is N operator-station-hours": a plan made from recorded history
rather than a guess. Every figure here comes from episodes' recorded starts and durations:
- a **shift** is a run of one operator's episodes at one station (rig) whose gaps are all shorter
  than `break_s` (default 10 min); a longer gap is a break and costs nothing here;
- **station time** is the sum over shifts of first start to last stop;
- **motion** is an episode's recorded duration, **reset** the gap before the operator's next
  episode in the same shift (the scene reset; the last episode of a shift has none);
- a **demo** is an episode whose outcome is success (what a training run can use);
- **overhead** is station time not spent in the demos' motion and resets (failed and discarded
  takes, re-teaching, faults) as a share of that: `station / Σ(demos' motion + reset) − 1`;
- **cycle time** is station time per episode; **demos per operator-station-hour** is demos ÷
  station hours;
- **disengagements per policy-hour**: takeovers that ended a policy segment, per hour the policy
  had authority (policy episodes' duration minus their takeovers).
Grouped per station (rig id), per operator and overall. Episodes with no recorded start or
duration are counted out, and the report says how many.
"""
from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from teleop_flywheel.core.episode import BREAK_S
from teleop_flywheel.data.lerobot.episode_table import EpisodeRecord

WEEK_HOURS = 40.0  # one station staffed for a working week
PLAN_DEMOS = 10_000


@dataclass
class Throughput:
    group: str
    episodes: int
    demos: int
    shifts: int
    station_hours: float
    median_motion_s: float | None
    median_reset_s: float | None
    cycle_s: float | None  # station time per episode
    overhead: float | None  # station time beyond the demos' motion + reset, as a share of it
    per_demo_s: float | None  # (motion + reset) × (1 + overhead), means over demos
    demos_per_station_hour: float | None
    policy_hours: float
    disengagements: int
    disengagements_per_policy_hour: float | None

    def plan(self, demos: int = PLAN_DEMOS) -> dict[str, float] | None:
        """Station-hours and 40-hour station-weeks for `demos` more demos at this rate."""
        if not self.demos_per_station_hour:
            return None
        hours = demos / self.demos_per_station_hour
        return {"demos": demos, "station_hours": hours, "station_weeks": hours / WEEK_HOURS}

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "plan": self.plan()}


def _timed(rec: EpisodeRecord) -> bool:
    return rec.started_wall_ns is not None and rec.duration_s is not None


def _shifts(recs: list[EpisodeRecord], break_s: float) -> list[list[EpisodeRecord]]:
    """Runs of one operator at one station with no gap of `break_s` or more."""
    by_seat: dict[tuple[str, str], list[EpisodeRecord]] = defaultdict(list)
    for r in recs:
        by_seat[(r.rig_id or "unknown", r.operator or "unknown")].append(r)
    out: list[list[EpisodeRecord]] = []
    for seat in by_seat.values():
        seat.sort(key=lambda r: r.started_wall_ns or 0)
        shift = [seat[0]]
        for r in seat[1:]:
            if _gap_s(shift[-1], r) >= break_s:
                out.append(shift)
                shift = []
            shift.append(r)
        out.append(shift)
    return out


def _gap_s(a: EpisodeRecord, b: EpisodeRecord) -> float:
    assert a.started_wall_ns is not None and b.started_wall_ns is not None and a.duration_s is not None
    return max(0.0, (b.started_wall_ns - a.started_wall_ns) / 1e9 - a.duration_s)


def _median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def throughput(recs: list[EpisodeRecord], group: str, break_s: float = BREAK_S) -> Throughput:
    """The figures of one group of timed episodes (see the module docstring)."""
    shifts = _shifts(recs, break_s) if recs else []
    station_s = 0.0
    resets: dict[int, float] = {}  # id(record) -> the reset after it
    for shift in shifts:
        first, last = shift[0], shift[-1]
        assert first.started_wall_ns is not None and last.started_wall_ns is not None and last.duration_s is not None
        station_s += (last.started_wall_ns - first.started_wall_ns) / 1e9 + last.duration_s
        for a, b in zip(shift, shift[1:], strict=False):
            resets[id(a)] = _gap_s(a, b)
    demos = [r for r in recs if r.outcome == "success"]
    demo_motion = [r.duration_s or 0.0 for r in demos]
    demo_reset = [resets.get(id(r), 0.0) for r in demos]
    useful_s = sum(demo_motion) + sum(demo_reset)
    overhead = station_s / useful_s - 1.0 if useful_s > 0 else None
    per_demo = ((statistics.fmean(demo_motion) + statistics.fmean(demo_reset)) * (1 + overhead)
                if demos and overhead is not None else None)
    policy = [r for r in recs if r.checkpoint]
    policy_s = sum(max(0.0, (r.duration_s or 0.0) - (r.takeover_s or 0.0)) for r in policy)
    disengagements = sum(r.num_interventions or 0 for r in policy)
    hours = station_s / 3600
    return Throughput(
        group=group, episodes=len(recs), demos=len(demos), shifts=len(shifts), station_hours=hours,
        median_motion_s=_median([r.duration_s or 0.0 for r in recs]), median_reset_s=_median(list(resets.values())),
        cycle_s=station_s / len(recs) if recs else None, overhead=overhead, per_demo_s=per_demo,
        demos_per_station_hour=len(demos) / hours if hours > 0 else None,
        policy_hours=policy_s / 3600, disengagements=disengagements,
        disengagements_per_policy_hour=disengagements / (policy_s / 3600) if policy_s > 0 else None,
    )


def throughput_report(records: list[EpisodeRecord], break_s: float = BREAK_S) -> dict[str, Any]:
    """{overall, per_station, per_operator, untimed}: `Throughput.to_dict()` of each group."""
    timed = [r for r in records if _timed(r)]

    def grouped(key: Callable[[EpisodeRecord], str]) -> dict[str, Any]:
        groups: dict[str, list[EpisodeRecord]] = defaultdict(list)
        for r in timed:
            groups[key(r)].append(r)
        return {k: throughput(v, k, break_s).to_dict() for k, v in sorted(groups.items())}

    return {
        "break_s": break_s,
        "overall": throughput(timed, "all", break_s).to_dict(),
        "per_station": grouped(lambda r: r.rig_id or "unknown"),
        "per_operator": grouped(lambda r: r.operator or "unknown"),
        "untimed": len(records) - len(timed),
    }


def format_lines(report: dict[str, Any]) -> list[str]:
    """The report as text: one row per group, then the plan at the overall rate."""
    def cell(v: float | None, fmt: str) -> str:
        return "-" if v is None else format(v, fmt)

    lines = [f"throughput (shifts split at gaps of {report['break_s']:g} s or more; a demo is a success):",
             f"  {'group':<16} {'eps':>4} {'demos':>5} {'st-h':>6} {'motion':>7} {'reset':>6} {'cycle':>6} "
             f"{'overhd':>6} {'s/demo':>7} {'demo/h':>6} {'diseng/pol-h':>12}"]
    rows = [("all", report["overall"])] + [(f"rig {k}", v) for k, v in report["per_station"].items()] \
        + [(f"op {k}", v) for k, v in report["per_operator"].items()]
    for name, t in rows:
        lines.append(f"  {name:<16} {t['episodes']:>4} {t['demos']:>5} {t['station_hours']:>6.2f} "
                     f"{cell(t['median_motion_s'], '.1f'):>7} {cell(t['median_reset_s'], '.1f'):>6} "
                     f"{cell(t['cycle_s'], '.1f'):>6} {cell(t['overhead'], '.0%'):>6} "
                     f"{cell(t['per_demo_s'], '.1f'):>7} {cell(t['demos_per_station_hour'], '.1f'):>6} "
                     f"{cell(t['disengagements_per_policy_hour'], '.1f'):>12}")
    plan = report["overall"]["plan"]
    if plan:
        lines.append(f"  at this rate {plan['demos']:,} demos take {plan['station_hours']:,.0f} operator-station-hours"
                     f" = {plan['station_weeks']:.1f} station-weeks of {WEEK_HOURS:g} h (N stations: divide by N)")
    if report["untimed"]:
        lines.append(f"  {report['untimed']} episode(s) without a recorded start or duration are not counted")
    return lines
