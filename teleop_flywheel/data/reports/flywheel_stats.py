"""`teleop-flywheel stats BAGS_OR_DATASET`: the numbers a team running the flywheel answers without a meeting.

- interventions per policy checkpoint per ISO week (UTC, from each episode's recording start),
  broken down by trigger label and by operator, with the intervention rate = interventions per
  policy episode and the share of policy episodes with at least one intervention;
- episodes per task and per start-state cluster (k-means on box-normalised start states, k-means++
  replaced by deterministic farthest-point seeding, at most 100 Lloyd iterations);
- the intervention rate of the current checkpoint (the one in the most recently recorded episode);
- throughput per station (rig), per operator and overall: cycle and reset time, demos per
  operator-station-hour, disengagements per policy-hour and the seeds' costing, with the plan it
  implies ("10,000 demos is N station-weeks"): `data/reports/throughput.py`;
- for a dataset, the follower against the command per joint: its lag and the share of an episode
  the command outran it, median and worst over episodes (`audit.tracking_summary`);
- for a dataset with `observation.effort`, how hard its operators pressed, overall and per operator
  (`reports/mashing.py`: time at the follower gripper's force limit, excess load in contact,
  approaches to the servos' overload protection, the contact felt through the leader).

Input is a LeRobot dataset made by our converter (episode metadata columns) or bag directories,
read through each MCAP's episode metadata record (`recording.reader.read_episode`, via the summary
index; a metadata.yaml that disagrees with it is refused), so no message is decoded. Start-state
clusters need joint data and are computed for datasets only.
"""
from __future__ import annotations

import datetime as dt
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from teleop_flywheel.data.curation.coverage import farthest_point_order
from teleop_flywheel.data.lerobot.dataset import INFO_PATH, LeRobotDataset
from teleop_flywheel.data.lerobot.episode_table import EpisodeRecord, episode_records
from teleop_flywheel.data.provenance.episode_sources import bag_records
from teleop_flywheel.data.reports.audit import (
    JointTrackingSummary,
    content_audit,
    load,
    tracking_lines,
    tracking_summary,
)
from teleop_flywheel.data.reports.mashing import (
    MashingSummary,
    by_operator,
    dataset_mashing,
    summarise,
    summary_lines,
    thresholds_line,
)
from teleop_flywheel.data.reports.throughput import BREAK_S, format_lines, throughput_report

UNLABELLED = "unlabelled"


def iso_week(wall_ns: int | None) -> str:
    if wall_ns is None:
        return "unknown"
    year, week, _ = dt.datetime.fromtimestamp(wall_ns / 1e9, dt.UTC).isocalendar()
    return f"{year}-W{week:02d}"


def kmeans(points: np.ndarray, k: int, iterations: int = 100) -> tuple[np.ndarray, np.ndarray]:
    """(labels, centres): Lloyd's algorithm seeded with the first k farthest-point picks."""
    k = max(1, min(k, len(points)))
    order, _ = farthest_point_order(points)
    centres = points[order[:k]].astype(np.float64).copy()
    labels = np.zeros(len(points), dtype=np.int64)
    for _ in range(iterations):
        d = ((points[:, None, :] - centres[None, :, :]) ** 2).sum(axis=2)
        new = np.argmin(d, axis=1)
        for c in range(k):
            if np.any(new == c):
                centres[c] = points[new == c].mean(axis=0)
        if np.array_equal(new, labels) and _ > 0:
            break
        labels = new
    return labels, centres


@dataclass
class CheckpointWeek:
    checkpoint: str
    week: str
    episodes: int
    episodes_with_intervention: int
    interventions: int
    by_trigger: dict[str, int]
    by_operator: dict[str, int]

    @property
    def rate(self) -> float:
        return self.interventions / self.episodes if self.episodes else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "interventions_per_episode": self.rate,
                "share_with_intervention": self.episodes_with_intervention / self.episodes if self.episodes else 0.0}


@dataclass
class FlywheelStats:
    source: str
    episodes: int
    per_checkpoint_week: list[CheckpointWeek]
    episodes_per_task: dict[str, int]
    episodes_per_operator: dict[str, int]
    clusters: list[dict[str, Any]]
    cluster_rule: str
    current_checkpoint: str | None
    current: dict[str, Any]
    throughput: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    tracking: list[JointTrackingSummary] = field(default_factory=list)  # datasets: the follower against the command
    # datasets with observation.effort: how hard the operators pressed, "(all)" and per operator
    mashing: dict[str, MashingSummary] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["per_checkpoint_week"] = [c.to_dict() for c in self.per_checkpoint_week]
        return d


def _is_policy(rec: EpisodeRecord) -> bool:
    return bool(rec.checkpoint)


def compute(
    records: list[EpisodeRecord],
    source: str,
    starts: np.ndarray | None = None,
    box: tuple[np.ndarray, np.ndarray] | None = None,
    k: int = 4,
    joints: list[str] | None = None,
    break_s: float = BREAK_S,
) -> FlywheelStats:
    notes: list[str] = []
    groups: dict[tuple[str, str], list[EpisodeRecord]] = defaultdict(list)
    for rec in records:
        if _is_policy(rec):
            groups[(rec.checkpoint or "", iso_week(rec.recorded_wall_ns))].append(rec)
    rows = []
    for (ckpt, week), recs in sorted(groups.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        triggers: Counter[str] = Counter()
        operators: Counter[str] = Counter()
        for r in recs:
            for t in r.triggers or []:
                triggers[t or UNLABELLED] += 1
                operators[r.operator or "unknown"] += 1
        rows.append(CheckpointWeek(ckpt, week, len(recs), sum(1 for r in recs if r.num_interventions),
                                   sum(r.num_interventions or 0 for r in recs), dict(triggers), dict(operators)))
    if any(_is_policy(r) and r.triggers is None for r in records):
        notes.append("some policy episodes carry no intervention metadata: counted as 0 interventions")
    per_task = Counter(r.task or "(no task)" for r in records)
    per_operator = Counter(r.operator or "unknown" for r in records)

    clusters: list[dict[str, Any]] = []
    rule = "none (bags: start states need decoded joints; run stats on the converted dataset)"
    if starts is not None and len(starts):
        lo, hi = box if box is not None else (starts.min(axis=0), starts.max(axis=0))
        width = np.where(hi - lo > 0, hi - lo, 1.0)
        labels, centres = kmeans(starts / width, k)
        rule = (f"k-means, k={len(centres)}, on start states divided by the visited joint-range widths; "
                "seeded with farthest-point picks (deterministic)")
        for c in range(len(centres)):
            members = [records[i] for i in np.flatnonzero(labels == c)]
            clusters.append({"cluster": c, "episodes": len(members),
                             "centre": dict(zip(joints or [str(j) for j in range(starts.shape[1])],
                                                (centres[c] * width).round(3).tolist(), strict=True)),
                             "per_task": dict(Counter(r.task or "(no task)" for r in members)),
                             "episode_index": [r.episode_index for r in members]})

    policy = [r for r in records if _is_policy(r)]
    current = None
    summary: dict[str, Any] = {}
    if policy:
        timed = [r for r in policy if r.recorded_wall_ns is not None]
        latest = max(timed, key=lambda r: r.recorded_wall_ns or 0) if timed else policy[-1]
        current = latest.checkpoint
        mine = [r for r in policy if r.checkpoint == current]
        n_int = sum(r.num_interventions or 0 for r in mine)
        last_week = iso_week(latest.recorded_wall_ns)
        week_rows = [r for r in rows if r.checkpoint == current and r.week == last_week]
        summary = {"episodes": len(mine), "interventions": n_int, "interventions_per_episode": n_int / len(mine),
                   "share_with_intervention": sum(1 for r in mine if r.num_interventions) / len(mine),
                   "latest_week": last_week,
                   "latest_week_interventions_per_episode": week_rows[0].rate if week_rows else None}
    else:
        notes.append("no policy episodes (no checkpoint in the metadata): intervention rates are empty")
    return FlywheelStats(source, len(records), rows, dict(per_task), dict(per_operator), clusters, rule,
                         current, summary, throughput_report(records, break_s), notes)


def stats_for(paths: list[Path], k: int = 4, break_s: float = BREAK_S) -> FlywheelStats:
    if len(paths) == 1 and (paths[0] / INFO_PATH).is_file():
        ds = LeRobotDataset.open(paths[0])
        data = load(ds)
        records = {r.episode_index: r for r in episode_records(ds)}
        recs = [records[int(e)] for e in data.spans.episode_index]
        box = (np.nanmin(data.state, axis=0).astype(float), np.nanmax(data.state, axis=0).astype(float))
        joints = ds.joint_names(data.state_feature)
        out = compute(recs, str(paths[0]), data.start_states, box, k, joints, break_s)
        episodes = [int(e) for e in data.spans.episode_index]
        out.tracking = tracking_summary(content_audit(ds, episodes, joints), episodes)
        measures = dataset_mashing(ds, data)
        if measures is None:
            out.notes.append("no observation.effort: how hard the operators pressed is not measured")
        else:
            out.mashing = {"(all)": summarise(measures, [r.length for r in recs], ds.fps),
                           **by_operator(measures, recs, ds.fps)}
        return out
    return compute(bag_records(paths), ", ".join(map(str, paths)), k=k, break_s=break_s)


def format_text(s: FlywheelStats) -> str:
    lines = [
        f"flywheel stats for {s.source}: {s.episodes} episodes",
        "",
        f"{'checkpoint':<20} {'week':<9} {'eps':>4} {'int':>4} {'int/ep':>7} {'share':>6}  by trigger / by operator",
    ]
    for r in s.per_checkpoint_week:
        share = r.episodes_with_intervention / r.episodes
        lines.append(f"{r.checkpoint:<20} {r.week:<9} {r.episodes:>4} {r.interventions:>4} {r.rate:>7.2f} "
                     f"{100 * share:>5.0f}%  {r.by_trigger or '-'} / {r.by_operator or '-'}")
    if s.current_checkpoint:
        c = s.current
        week_rate = c["latest_week_interventions_per_episode"]
        lines += ["", f"current checkpoint {s.current_checkpoint}: {c['interventions_per_episode']:.2f} interventions"
                  f"/episode over {c['episodes']} episodes ({100 * c['share_with_intervention']:.0f} % with one);"
                  f" week {c['latest_week']}: " + ("?" if week_rate is None else f"{week_rate:.2f}/episode")]
    lines += ["", "episodes per task: " + ", ".join(f"{t}: {n}" for t, n in s.episodes_per_task.items()),
              "episodes per operator: " + ", ".join(f"{t}: {n}" for t, n in s.episodes_per_operator.items()),
              f"start-state clusters ({s.cluster_rule}):"]
    for c in s.clusters:
        centre = ", ".join(f"{k.removesuffix('.pos')} {v:.1f}" for k, v in c["centre"].items())
        lines.append(f"  cluster {c['cluster']}: {c['episodes']} episodes  centre [{centre}]  per task {c['per_task']}")
    lines += ["", *format_lines(s.throughput)]
    lines += ["", *tracking_lines(s.tracking)] if s.tracking else []
    if s.mashing:
        lines += ["", f"how hard the operators pressed ({thresholds_line()}):"]
        lines += ["  " + line for op, m in s.mashing.items() for line in summary_lines(m, op)]
    lines += [f"note: {n}" for n in s.notes]
    return "\n".join(lines)

