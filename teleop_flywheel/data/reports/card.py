"""`teleop-flywheel card DATASET [--validation report.json]`: a data card (README.md) beside the dataset.

How and on what hardware the data was collected, how many episodes were recorded, rejected (with
the validator's reason breakdown) and accepted, who recorded them, which tasks, how much of the
start-state space they cover, and what the data must not be used for. Every number comes from the
dataset's own metadata, the audit, or the validator's JSON report; nothing is typed in by hand.
A README.md that this command did not write is never overwritten (without --force).

The outcome mix is there so the bias towards success is visible: successes, failures, outcomes
not set, and mismatches — an operator's flag disagreeing with the task spec's success predicate,
among the kept episodes (`outcome_check`, kept with `--trust-operator`) and among the rejected ones
(OUTCOME_MISMATCH in the validation record) — with the spec content ids the episodes were recorded
under. `card DATASET --manifest M` writes the card of a manifest's episodes (`<M>.card.md` beside it,
or `--out`): the outcome mix and spec ids of those episodes and the filter expressions that chose
them, before the dataset's own sections.

How hard the operators pressed (`reports/mashing.py`: time at the follower gripper's force limit,
excess load in contact, approaches to the servos' overload protection, and how much of the contact
the leader let them feel) is a section of its own, per operator.

The card opens with the Hugging Face front matter LeRobot's hub cards carry (license, tags with
`LeRobot`, task_categories `robotics`, the parquet data files), so `huggingface-cli upload` of the
folder gives a hub page like LeRobot's own (where the filesystem has no RENAME_EXCHANGE, of a
`cp -rL` copy: closed chunks are then directory symlinks the upload skips, `commit.upload_note`,
which the `card` verb prints); it names the dataset's repo id and how to load it. A
section for the operator's own words sits between two markers and is kept, as written, every time
the card is regenerated (and its license and tags, unless given again).
"""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from teleop_flywheel.core.files import replace_atomic
from teleop_flywheel.data.errors import DatasetError
from teleop_flywheel.data.lerobot.dataset import LeRobotDataset
from teleop_flywheel.data.lerobot.episode_table import EpisodeRecord, episode_records
from teleop_flywheel.data.provenance.manifest import identities, load_manifest
from teleop_flywheel.data.provenance.reviews import ReviewTally, review_tally, tally_lines
from teleop_flywheel.data.reports.audit import AuditReport, audit, card_lines, load
from teleop_flywheel.data.reports.mashing import by_operator, dataset_mashing, summarise, thresholds_line
from teleop_flywheel.data.validate.dataset_record import RECORD_DIR, has_record, read_verdicts
from teleop_flywheel.data.validate.reasons import OUTCOME_MISMATCH

MARKER = "<!-- written by teleop-flywheel card; regenerate, do not edit (except the operator's notes below) -->"
NOTES_BEGIN = "<!-- operator notes: begin (yours to edit; kept when the card is regenerated) -->"
NOTES_END = "<!-- operator notes: end -->"
NOTES_TEMPLATE = ("_Write here what the numbers cannot say: the task and scene (objects, lighting, table), anything "
                  "unusual in these sessions, known problems, and who to ask about this data._")
LICENSE = "apache-2.0"  # LeRobot's push_to_hub default
# the validation record convert keeps (data/convert/refresh.py); the default report
@dataclass
class ValidationSummary:
    """Counts from a validator JSON report: one entry per episode, pass/fail and reason codes."""

    source: str
    recorded: int
    accepted: int
    rejected: int
    reasons: dict[str, int] = field(default_factory=dict)
    reviews: ReviewTally = field(default_factory=ReviewTally)  # the rejections a person reviewed on the review page


def _entries(report: Any) -> list[dict[str, Any]]:
    if isinstance(report, list):
        return report
    for key in ("episodes", "results", "bags"):
        if isinstance(report, dict) and isinstance(report.get(key), list):
            return report[key]
    raise DatasetError("validation report has no per-episode list (expected 'episodes', 'results' or 'bags')")


def _passed(entry: dict[str, Any]) -> bool:
    for key in ("passed", "ok", "pass"):
        if isinstance(entry.get(key), bool):
            return bool(entry[key])
    status = str(entry.get("status", entry.get("verdict", ""))).upper()
    if status in ("PASS", "FAIL"):
        return status == "PASS"
    raise DatasetError(f"validation entry without a pass/fail verdict: {json.dumps(entry)[:200]}")


def _codes(entry: dict[str, Any]) -> list[str]:
    raw = entry.get("reasons", entry.get("codes", []))
    codes = []
    for r in raw or []:
        codes.append(str(r.get("code")) if isinstance(r, dict) else str(r))
    return sorted(set(codes))


def read_validation(path: str | Path) -> ValidationSummary:
    """The counts of a validator JSON report (`validate --json`) at `path`."""
    path = Path(path)
    try:
        report = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise DatasetError(f"{path}: cannot read validation report: {exc}") from None
    try:
        return _validation_summary(path, _entries(report))
    except DatasetError as exc:
        raise DatasetError(f"{path}: {exc}") from None


def record_validation(root: Path) -> ValidationSummary:
    """The counts of the validation record convert/ingest keep for the dataset at `root`."""
    try:
        return _validation_summary(root / RECORD_DIR, read_verdicts(root))
    except DatasetError as exc:
        raise DatasetError(f"{root / RECORD_DIR}: {exc}") from None


def _validation_summary(source: Path, entries: list[dict[str, Any]]) -> ValidationSummary:
    reasons: Counter[str] = Counter()
    accepted = 0
    for entry in entries:
        if _passed(entry):
            accepted += 1
        else:
            reasons.update(_codes(entry) or ["(no code)"])
    return ValidationSummary(str(source), len(entries), accepted, len(entries) - accepted, dict(reasons.most_common()),
                             review_tally(e for e in entries if isinstance(e, dict)))


def passed_episode_ids(root: Path) -> set[str] | None:
    """The episode ids the dataset's validation record passed (an entry without an id, a rejected bag,
    has none); None when it has no record."""
    if not has_record(root):
        return None
    try:
        return {str(e["episode_id"]) for e in read_verdicts(root) if e.get("episode_id") and _passed(e)}
    except DatasetError as exc:
        raise DatasetError(f"{root / RECORD_DIR}: cannot read validation record: {exc}") from None


@dataclass
class ManifestView:
    """What a manifest's card says of it: its file, filter expressions and episodes."""

    path: str
    fingerprint: str
    filters: list[str]
    episodes: set[int]  # episode_index in the dataset


def manifest_view(ds: LeRobotDataset, path: str | Path) -> ManifestView:
    manifest = load_manifest(path)
    ids = {str(m["episode_id"]) for m in manifest["episodes"]}
    held = {e.episode_index for e in identities(ds) if e.episode_id in ids}
    if len(held) != len(ids):
        raise DatasetError(f"{path}: {len(ids) - len(held)} of its episodes are not in {ds.root}; "
                           f"`teleop-flywheel manifest verify {ds.root} {path}` names them")
    return ManifestView(str(path), str(manifest.get("fingerprint", "")), [str(f) for f in manifest.get("filter", [])],
                        held)


def outcome_lines(recs: list[EpisodeRecord], validation: ValidationSummary | None) -> list[str]:
    """The outcome mix (with mismatches against the spec's predicate) and the spec content ids."""
    n = len(recs)
    counts = Counter(r.outcome if r.outcome in ("success", "failure") else "not set" for r in recs)
    judged = [r for r in recs if r.mismatch is not None]
    kept_mismatch = sum(bool(r.mismatch) for r in judged)
    rejected_mismatch = validation.reasons.get(OUTCOME_MISMATCH, 0) if validation else None
    rows: list[tuple[Any, ...]] = [(k, counts[k], f"{100 * counts[k] / max(1, n):.0f} %")
                                   for k in ("success", "failure", "not set") if counts[k] or k != "not set"]
    rows.append(("mismatch, kept (operator's flag vs the spec's predicate; --trust-operator)", kept_mismatch,
                 f"{100 * kept_mismatch / max(1, len(judged)):.0f} % of {len(judged)} judged"))
    rows.append(("mismatch, rejected (OUTCOME_MISMATCH)",
                 "?" if rejected_mismatch is None else rejected_mismatch, "not in the dataset"))
    specs = Counter(r.task_spec_id or "(none)" for r in recs)
    lines = _table(("outcome", "episodes", "share"), rows)
    lines += ["", f"The spec's success predicate judged {len(judged)} of {n} episodes"
              + ("" if judged else " (recorded without a task spec: operator labels only)") + ". "
              + "These are the kept episodes' outcomes: rejected ones are not in the dataset, so the success "
              "share is not a success rate.",
              "", "Task spec content ids: " + ", ".join(f"`{k}` ({v})" for k, v in sorted(specs.items())) + "."]
    return lines


def _table(header: tuple[str, ...], rows: list[tuple[Any, ...]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return out


def front_matter(license_id: str, tags: list[str]) -> list[str]:
    """The Hugging Face dataset-card metadata LeRobot's hub cards carry."""
    meta = {"license": license_id, "task_categories": ["robotics"], "tags": tags,
            "configs": [{"config_name": "default", "data_files": "data/*/*.parquet"}]}
    return ["---", *yaml.safe_dump(meta, sort_keys=False).rstrip("\n").splitlines(), "---"]


def previous(text: str) -> tuple[dict[str, Any], str]:
    """(front matter, operator notes) of a card written before; ({}, "") when it has none."""
    meta: dict[str, Any] = {}
    if text.startswith("---\n") and "\n---\n" in text[4:]:
        try:
            loaded = yaml.safe_load(text[4:text.index("\n---\n", 4)])
            meta = loaded if isinstance(loaded, dict) else {}
        except yaml.YAMLError:
            meta = {}
    notes = ""
    if NOTES_BEGIN in text and NOTES_END in text.split(NOTES_BEGIN, 1)[1]:
        notes = text.split(NOTES_BEGIN, 1)[1].split(NOTES_END, 1)[0].strip("\n")
    return meta, notes


def render(ds: LeRobotDataset, a: AuditReport, validation: ValidationSummary | None,
           license_id: str = LICENSE, tags: list[str] | None = None, notes: str = "",
           manifest: ManifestView | None = None) -> str:
    recs = episode_records(ds)
    tags = list(dict.fromkeys(["LeRobot", *(tags or []), *([ds.robot_type] if ds.robot_type else []),
                               "teleoperation", "teleop_flywheel"]))
    lines = [*front_matter(license_id, tags), MARKER, *_title_lines(ds, license_id), *_notes_lines(notes),
             *_collection_lines(ds, a, recs)]
    if manifest is not None:
        lines += _manifest_lines(recs, validation, manifest)
    lines += ["## Outcomes", "", *outcome_lines(recs, validation), "", *_episode_lines(a, validation)]
    lines += _count_lines("Operators", "operator", Counter(r.operator or "unknown" for r in recs))
    lines += _count_lines("Tasks", "task", Counter(r.task or "(no task)" for r in recs))
    lines += _mashing_lines(ds, recs)
    lines += _coverage_lines(a) + _misuse_lines(ds, a)
    return "\n".join(lines) + "\n"


def _title_lines(ds: LeRobotDataset, license_id: str) -> list[str]:
    """The title, the repo id and how to load it."""
    repo = ds.repo_id or f"local/{ds.root.name}"
    return [f"# Data card: {ds.repo_id or ds.root.name}", "",
            f"Repo id `{repo}`"
            + ("" if ds.repo_id else " (none was given to `teleop-flywheel convert --repo-id`: a local name)")
            + f"; LeRobot v3.0, license {license_id}. Load it with "
            f"`LeRobotDataset({repo!r}, root=<this folder>, video_backend='pyav')`.", ""]


def _notes_lines(notes: str) -> list[str]:
    """The operator's own section, kept across regenerations between its markers."""
    return ["## Operator's notes", "", NOTES_BEGIN, notes or NOTES_TEMPLATE, NOTES_END, ""]


def _collection_lines(ds: LeRobotDataset, a: AuditReport, recs: list[EpisodeRecord]) -> list[str]:
    """How it was collected: robot, rigs, cameras, sessions, checkpoints, the recording path."""
    cameras = [n.removeprefix("observation.images.") for n, f in ds.features.items() if f.is_visual]
    rigs = sorted({r.rig_id for r in recs if r.rig_id})
    kinds = Counter(r.session_kind or "unknown" for r in recs)
    ckpts = sorted({r.checkpoint for r in recs if r.checkpoint})
    interventions = sum(r.num_interventions or 0 for r in recs)
    return ["## How it was collected", "",
            f"- Robot: `{ds.robot_type or 'unknown'}`; rigs: {', '.join(rigs) or 'not recorded'}; "
            f"cameras: {', '.join(cameras) or 'none'}; {a.fps:g} fps.",
            "- Sessions: " + (", ".join(f"{k} {v}" for k, v in kinds.items()) if set(kinds) != {"unknown"}
                               else f"{a.episodes} episodes, session kind not recorded")
            + (f"; policy checkpoints deployed: {', '.join(ckpts)}; {interventions} human interventions recorded"
               if ckpts else "") + ".",
            "- Recorded as raw MCAP bags (one clock, stamped at the source), validated, then converted to "
            "LeRobot v3.0; the action is the command actually sent to the follower."
            if any(r.episode_id for r in recs) else "- Collection method not recorded in the metadata.",
            ""]


def _manifest_lines(recs: list[EpisodeRecord], validation: ValidationSummary | None,
                    manifest: ManifestView) -> list[str]:
    """The manifest's episodes: how many, chosen by what, and their outcomes."""
    chosen = [r for r in recs if r.episode_index in manifest.episodes]
    return [f"## Manifest `{Path(manifest.path).name}`", "",
            f"{len(chosen)} of {len(recs)} episodes of this dataset (fingerprint `{manifest.fingerprint[:16]}`), "
            "chosen by " + (" and ".join(f"`{f}`" for f in manifest.filters) if manifest.filters
                            else "no filter (every episode)") + ".", "",
            "### Outcomes of the manifest's episodes", "", *outcome_lines(chosen, validation), "",
            "The sections below describe the whole dataset.", ""]


def _episode_lines(a: AuditReport, validation: ValidationSummary | None) -> list[str]:
    """Episodes: recorded, rejected and why, kept; their lengths, dead air, content and frame contract."""
    lines = ["## Episodes", ""]
    if validation:
        lines += _table(("recorded", "rejected", "accepted", "in this dataset"),
                        [(validation.recorded, validation.rejected, validation.accepted, a.episodes)])
        lines += ["", f"Rejection rate {100 * validation.rejected / max(1, validation.recorded):.1f} % "
                  f"(validator report `{Path(validation.source).name}`). Reasons (an episode can have several):", ""]
        lines += _table(("reason", "episodes"), list(validation.reasons.items())) if validation.reasons else \
            ["No episode was rejected: on a real recording session this means the checks are not checking."]
        lines += ["", *tally_lines(validation.reviews)]
        if validation.accepted != a.episodes:
            lines += ["", f"Note: the validator accepted {validation.accepted} episodes but the dataset holds "
                      f"{a.episodes} (converted with --include-failed, or from several validation runs)."]
    else:
        lines += [f"{a.episodes} episodes in the dataset; no validator report was given, so recorded and "
                  "rejected counts are unknown."]
    lines += ["", f"{a.frames} frames ({a.seconds / 60:.1f} min); episode length {a.length_seconds['min']:.1f}–"
              f"{a.length_seconds['max']:.1f} s (median {a.length_seconds['median']:.1f} s); "
              f"dead air {100 * a.dead_share:.1f} % of frames."] + card_lines(a.content, a.episode_index)
    if a.frame_contract is not None and a.frame_contract.lag_frames is not None:
        fc = a.frame_contract
        lines.append(f"Frame contract (`action` at t carries the state from t to t+1): the state lags the action by "
                     f"{fc.lag_frames:.2f} frames, decided on {100 * fc.decided_share:.0f} % of episodes; "
                     + (f"BROKEN: {fc.problem}." if fc.problem else
                        f"{len(fc.flagged)} episodes flagged." if fc.flagged else "as the contract says."))
    return lines


def _count_lines(title: str, what: str, counts: Counter[str]) -> list[str]:
    """A section that counts episodes by one field (operators, tasks)."""
    return ["", f"## {title}", "", *_table((what, "episodes"), sorted(counts.items()))]


def _mashing_lines(ds: LeRobotDataset, recs: list[EpisodeRecord]) -> list[str]:
    """How hard the operators pressed, per operator and overall (`reports/mashing.py`)."""
    lines = ["", "## How hard the operators pressed", ""]
    data = load(ds)
    measures = dataset_mashing(ds, data)
    if measures is None:
        return lines + ["Not measured: the dataset has no `observation.effort` (recorded before the follower's load "
                        "was), so nothing says how hard its operators pressed."]
    by_index = {r.episode_index: r for r in recs}
    ordered = [by_index[m.episode_index] for m in measures]
    groups = {"(all)": summarise(measures, [r.length for r in ordered], ds.fps),
              **by_operator(measures, ordered, ds.fps)}
    felt = any(g.felt_share is not None for g in groups.values())
    lines += _table(("operator", "episodes", "at the grip limit", "worst episode", "excess load peak",
                     "excess load·s / min", "protection came near") + (("contact felt",) if felt else ()),
                    [(op, g.episodes, f"{g.grip_limit_s:.1f} s ({100 * g.grip_limit_share:.1f} %)",
                      f"{g.worst_episode} ({g.worst_grip_limit_s:.1f} s)" if g.worst_grip_limit_s else "-",
                      f"{g.excess_peak:.2f}",
                      f"{g.excess_integral_per_min:.2f}",
                      f"{g.protection_near} times in {g.episodes_near_protection} episodes")
                     + ((("-" if g.felt_share is None else f"{100 * g.felt_share:.0f} %"),) if felt else ())
                     for op, g in groups.items()])
    return lines + ["", f"Measured from `observation.effort` (the follower's load, a fraction of max torque): "
                    f"{thresholds_line()}. A policy trained on demonstrations that press hard learns to press hard"
                    + ("; `contact felt`: the share of the contact time the leader rendered (force feedback, "
                       "`complementary_info.feedback`)." if felt else
                       "; no `complementary_info.feedback`: whether the operators felt the contact is not recorded.")]


def _coverage_lines(a: AuditReport) -> list[str]:
    """Start-state coverage: each joint's visited range against what is available, and the start spread."""
    lines = ["", "## Start-state coverage", "",
             "Range each joint visited against what is available, and how far start states spread:", ""]
    lines += _table(
        ("joint", "visited", "available", "share", "start-state span", "start-state std"),
        [
            (
                j.joint,
                f"{j.visited_min:.1f} … {j.visited_max:.1f}",
                "?" if j.available is None else f"{j.available_min:g} … {j.available_max:g} ({j.available_source})",
                "?" if j.share is None else f"{100 * j.share:.0f} %",
                f"{s.span:.2f}",
                f"{s.std:.2f}",
            )
            for j, s in zip(a.joint_ranges, a.start_spread, strict=True)
        ],
    )
    return lines + ["", f"Episodes starting unusually far from the mean start: {a.outliers or 'none'}."]


def _misuse_lines(ds: LeRobotDataset, a: AuditReport) -> list[str]:
    """What it must not be used for: outside its start states, another robot or calibration, success rates."""
    narrow = [s.joint for s in a.start_spread if s.span < 1.0]
    return ["", "## What it must not be used for", "",
            "Do not use it to train or evaluate a policy that must start outside the start-state ranges above"
            + (f" (every episode starts with {', '.join(narrow)} within one unit)" if narrow else "")
            + f", on a robot other than `{ds.robot_type or 'the one recorded'}` or with another calibration, or as "
            "evidence of a success rate: outcomes are operator labels and rejected episodes were removed."]


def write_card(root: str | Path, validation: str | Path | None = None, force: bool = False,
               license_id: str | None = None, tags: list[str] | None = None, manifest: str | Path | None = None,
               out: str | Path | None = None) -> Path:
    """Write (or regenerate) the card; the operator's notes, license and tags of a card written
    before are kept unless `license_id`/`tags` are given. With `manifest`: the card of its episodes,
    at `out` (default `<manifest>.card.md`)."""
    ds = LeRobotDataset.open(root)
    view = manifest_view(ds, manifest) if manifest is not None else None
    dest = Path(out) if out is not None else (
        Path(manifest).with_suffix(".card.md") if manifest is not None else ds.root / "README.md")
    old = dest.read_text(errors="replace") if dest.exists() else ""
    ours = "<!-- written by teleop-flywheel card;" in old
    if dest.exists() and not ours and not force:
        error = DatasetError(f"{dest}: exists and was not written by `teleop-flywheel card`")
        error.fix = "--force replaces it; or move it aside first"
        raise error
    meta, notes = previous(old) if ours else ({}, "")
    old_tags = [str(t) for t in meta.get("tags") or [] if isinstance(t, (str, int, float))]
    summary = read_validation(validation) if validation is not None else \
        record_validation(ds.root) if has_record(ds.root) else None  # the verdicts convert/ingest recorded
    text = render(ds, audit(ds), summary,
                  license_id or str(meta.get("license") or LICENSE), [*old_tags, *(tags or [])], notes, view)
    replace_atomic(dest, text)
    return dest

