"""The demo's closing summary: where everything is, the key numbers, the injected failures apart
from the ones nobody injected, and what force feedback changed in the feedback take."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from teleop_flywheel.core.resources import config_path
from teleop_flywheel.core.task_spec import load_task_spec
from teleop_flywheel.ros.commands.demo_plan import TASK_SPEC, EpisodePlan, classify

if TYPE_CHECKING:
    from teleop_flywheel.ros.commands.demo import IngestLog, VerdictLog


def summarise(out: Path, bags: Path, report: Path, plans: list[EpisodePlan], verdicts: VerdictLog,
              ingested: IngestLog, domain: str) -> list[str]:
    """Print where everything is with the key numbers, the failures injected on purpose apart from the
    ones nobody injected; returns the checks that failed (ingest disagreeing with the batch convert)."""
    dataset, quarantine = out / "dataset", out / "quarantine"
    batch = json.loads(report.read_text())
    summary = batch["summary"]
    reports = {e["name"]: e["reasons"] for e in batch["episodes"] if e.get("error") is None}
    caught, missed, unexpected = classify(plans, verdicts.names, reports)
    agree = sum(1 for n, d in verdicts.docs.items() if n in reports
                and set(d.get("codes") or []) == {r["code"] for r in reports[n]})
    times = sorted(verdicts.seconds.values())
    agrees, ingest_line = ingested.agreement(dataset)
    print("\n=== demo summary ===")
    print(f"bags:        {bags}  (rejected ones moved to {quarantine}/<reason>/ with a JSON record)")
    if (dataset / "meta" / "info.json").exists():
        print(f"dataset:     {dataset}  (LeRobot v3.0; data card {dataset / 'README.md'})")
    else:
        print("dataset:     none written: no episode passed validation")
    written = [p for p in (report, out / "audit.html", out / "curation.png") if p.exists()]
    print(f"reports:     {', '.join(map(str, written))}  (every file the demo writes: README.md)")
    rate = 100 * summary["rejection_rate"]
    reasons = ", ".join(f"{c} {n}" for c, n in summary["reasons"].items()) or "none"
    print(f"rejected:    {summary['rejected']}/{summary['episodes']} episodes ({rate:.0f} %): {reasons}")
    print(f"verdicts:    {len(verdicts.docs)}/{len(plans)} episodes judged at stop"
          + (f" (stop -> verdict median {times[len(times) // 2]:.1f} s, max {times[-1]:.1f} s)" if times else "")
          + f"; the same as the batch validation for {agree}/{len(reports)}")
    print(f"ingest:      {ingest_line}")
    print(f"injected:    {len(caught) + len(missed)} failures injected on purpose, {len(caught)} caught"
          + (": " + "; ".join(caught) if caught else ""))
    if missed:
        print(f"NOT CAUGHT:  {'; '.join(missed)} — injected on purpose and not rejected: the validator missed it")
    print(f"unexpected:  {len(unexpected)} failure(s) nobody injected"
          + (": " + "; ".join(unexpected) + " (on a loaded machine the OS can stall a node's process for a moment)"
             if unexpected else ""))
    print(f"ROS graph:   domain {domain}, discovery {os.environ['ROS_AUTOMATIC_DISCOVERY_RANGE']}")
    takeovers = [p for p in plans if not p.feedback]
    print(f"interventions: {len(takeovers)} takeovers in {len(plans)} episodes (1 per episode but the feedback "
          f"take's teleop turn), {sum(p.label is None for p in takeovers)} left unlabelled on purpose")
    for line in feedback_lines(dataset, batch["episodes"], plans, verdicts.names):
        print(line)
    flagged = [f"episode {i} (flagged {c['outcome']}: {c['detail']})" for i, c in sorted(verdicts.checks.items())
               if c["disagrees"]]
    print(f"task spec:   config/{TASK_SPEC} (id {load_task_spec(config_path(TASK_SPEC)).id}): "
          f"{len(verdicts.checks)}/{len(plans)} final poses "
          f"judged at stop, {sum(p.misses for p in plans)} placed on the wrong square on purpose; "
          f"{len(flagged)} flag(s) the predicate disagrees with, caught at the rig"
          + (": " + "; ".join(flagged) if flagged else ""))
    return [] if agrees else ["ingest (its dataset disagrees with the batch convert)"]


def feedback_lines(dataset: Path, reports: list[dict[str, Any]], plans: list[EpisodePlan],
                   names: dict[int, str]) -> list[str]:
    """What the leader rendered in the feedback take and how hard the operator pressed there against
    the dataset's other episodes: its `complementary_info.feedback` and the converter's mashing
    measures (`data/reports/mashing.py`, the episodes table's columns)."""
    from teleop_flywheel.data.errors import DatasetError
    from teleop_flywheel.data.lerobot.dataset import LeRobotDataset
    from teleop_flywheel.data.lerobot.flywheel_schema import FEEDBACK, LEADER_STATE
    from teleop_flywheel.data.reports.audit import EFFORT
    from teleop_flywheel.data.reports.mashing import GRIPPER_CONTACT_LOAD

    take = next((p for p in plans if p.feedback), None)
    if take is None or take.index not in names:
        return []
    name = names[take.index]
    try:
        ds = LeRobotDataset.open(dataset)
    except DatasetError:
        return [f"feedback:    episode {take.index} {name} recorded with feedback; no dataset to measure it in"]
    ids = {e["name"]: e.get("episode_id") for e in reports}
    table = ds.episodes.set_index("episode_id", drop=False)
    if ids.get(name) not in table.index or not all(ds.has_column(c) for c in (FEEDBACK, LEADER_STATE, EFFORT)):
        return [f"feedback:    episode {take.index} {name} recorded with feedback, not in the dataset (rejected: "
                "see above): nothing to measure"]
    index, feedback = ds.column("episode_index"), ds.column(FEEDBACK)
    # Per joint: goal offsets, then the torque ceilings; NaN (nothing heard yet) rendered nothing.
    ceilings = np.nan_to_num(feedback[:, feedback.shape[1] // 2:])
    demo = {ids.get(n): i for i, n in names.items()}
    # How far the trigger ran past the follower's jaws while they held the object (load at a grasp's):
    # the operator's squeeze beyond what the follower could do, in the gripper's 0-100 of its range.
    held = np.abs(ds.column(EFFORT)[:, ds.joint_names(EFFORT).index("gripper.effort")]) >= GRIPPER_CONTACT_LOAD
    past = (ds.column("observation.state")[:, ds.joint_names("observation.state").index("gripper.pos")]
            - ds.column(LEADER_STATE)[:, ds.joint_names(LEADER_STATE).index("gripper.pos")])

    def pressed(row: Any) -> str:
        mine = index == int(row["episode_index"])
        rows = ceilings[mine]
        squeezed = past[mine & held]
        beyond = (f"trigger past the holding jaws: mean {np.nanmean(squeezed):.1f} %, max {np.nanmax(squeezed):.0f} % "
                  "of the gripper's range" if squeezed.size else "the jaws never held")
        felt = rows[(rows > 0).any(axis=1)]
        return (f"rendered {len(felt) / ds.fps:.1f} s (ceiling up to {float(felt.max(initial=0.0)):.2f}); pressed "
                f"at the grip "
                f"limit {float(row['grip_limit_s']):.1f} s, excess load {float(row['excess_load_s']):.2f} load·s "
                f"(peak {float(row['excess_load_peak']):.2f}); {beyond}")

    mine = table.loc[ids[name]]
    others = table[table["episode_id"] != ids[name]]
    lines = [f"feedback:    episode {take.index} {name}, the operator's turn teleoperated with the leader's "
             f"`gripper` feedback: {pressed(mine)}"]
    if others.empty:
        lines.append("             no other episode in the dataset to compare (the default 6 episodes have some)")
    for _i, row in others.iterrows():
        lines.append(f"             against episode {demo.get(row['episode_id'], '?')}, a pedal takeover (policy mode: "
                     f"nothing rendered): {pressed(row)}")
    return lines
