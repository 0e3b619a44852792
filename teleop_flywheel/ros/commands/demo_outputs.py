"""Every file and folder `teleop-flywheel demo --out DIR` writes, once, machine-readable.

The README's list of the demo's outputs is rendered from this (`teleop_flywheel.ros.reference`),
and the end-to-end demo test checks that each one exists after a run and that the demo wrote
nothing else at the top of DIR (`test/ros/commands/test_demo.py`): the list cannot drift from the demo.
"""
from __future__ import annotations

from dataclasses import dataclass

ALWAYS = ""
IF_PASSED = "an episode passed validation"
IF_REJECTED = "an episode was rejected: the injected failures are"


@dataclass(frozen=True)
class Output:
    path: str  # relative to --out; a trailing "/" is a folder
    what: str
    when: str = ALWAYS  # the condition under which it exists; ALWAYS = every run


OUTPUTS: tuple[Output, ...] = (
    Output("bags/", "the episodes that passed validation: one rosbag2 bag each (metadata.yaml + <name>_0.mcap, "
                    "open the .mcap in Foxglove) and its verdict at stop (verdict.json); and bags/dataset/, the "
                    "dataset the session's ingest kept current as episodes were added (the same episodes as "
                    "dataset/; what it took: bags/dataset.ingest.json)"),
    Output("quarantine/", "the rejected bags, moved to <REASON>/<bag>/ with <bag>.json saying why (never deleted)",
           IF_REJECTED),
    Output("validation.json", "the validator's verdict per episode (PASS/FAIL, reason codes) and the rejection rate"),
    Output("policy.yaml", "the scripted policy the session ran (every second move heads for a wrong waypoint; it "
                          "ends holding the place pose of the task spec config/task_demo.yaml)"),
    Output("policy_miss.yaml", "the same policy putting the brick on the wrong square: the episodes whose final "
                               "pose misses the spec (one flagged success on purpose: OUTCOME_MISMATCH)"),
    Output("dataset/", "the LeRobot v3.0 dataset of the episodes that passed (meta/, data/, videos/): a pointer to "
                       "its current version", IF_PASSED),
    Output("dataset.versions/", "the dataset's versions, one per commit, unchanged files shared (docs/convert.md)",
           IF_PASSED),
    Output("dataset/README.md", "its data card: how it was collected, rejections by reason, what not to use it for",
           IF_PASSED),
    Output("dataset/meta/sample_weights.parquet", "per-episode training weights (interventions 2.5x, recency)",
           IF_PASSED),
    Output("dataset.lock", "the converter's lock beside the dataset (one convert at a time)"),
    Output("audit.html", "the audit: numbers, then each plot with a sentence on how to read it", IF_PASSED),
    Output("audit_files/", "its plots: joint_ranges.png, start_states.png, episode_lengths.png", IF_PASSED),
    Output("curation.png", "the four curation scores per episode, jerky or odd-length ones in red", IF_PASSED),
    Output("curation_starts.png", "start states recorded, and where to send operators next", IF_PASSED),
)


def expected(passed: bool, rejected: bool) -> list[str]:
    """The outputs a run with (some episode passed, some rejected) must have written."""
    return [o.path for o in OUTPUTS
            if o.when == ALWAYS or (o.when == IF_PASSED and passed) or (o.when == IF_REJECTED and rejected)]


def markdown(out: str = "demo_out") -> str:
    """The README's list: one line per output, under `out`."""
    width = max(len(out) + 1 + len(o.path) for o in OUTPUTS) + 2
    lines = ["```text"]
    for o in OUTPUTS:
        note = f" (if {o.when})" if o.when not in (ALWAYS, IF_PASSED) else ""
        lines.append(f"{out}/{o.path}".ljust(width) + o.what + note)
    lines.append("```")
    return "\n".join(lines)
