"""`teleop-flywheel ingest WATCH_DIR... --dataset DS`: the flywheel turns by itself.

Every episode the recorder closes in WATCH_DIR (its `output_dir`) is validated, then quarantined
or converted into the dataset (an append), and the dataset's validation record, data card, sample
weights and the audit are refreshed — without anyone running four commands.

Many stations, one dataset: give every rig's output folder (or the one folder they share), and one
ingest takes the closed bags of all of them; its validation and encoding fan out over `--workers`
local processes or, with `--executor ray`, over a Ray cluster's machines (`data/parallel.py`; the
bags and the dataset on a filesystem they all mount). Several ingests into one dataset are safe:
they take turns, a pass at a time (the ingest lock), and each append is one commit under the
dataset's lock, so episode indices, tasks and video offsets are those of the same appends one after
the other.

When a bag is taken: it is closed (metadata.yaml written), it has the recorder's verdict
(`verdict.json`, `recording/recorder/verdict.py`) and the operator kept it — or the grace period
(`--grace`, default 30 s) has passed since the verdict without a discard. A discarded bag has
been moved to `<output_dir>/discarded/` by the recorder and is never looked at. `--without-verdict`
also takes bags that have none (recorded before verdicts existed) once their metadata.yaml is
older than the grace period.

Idempotent and resumable: a state file `<DS>.ingest.json` beside the dataset (replaced
atomically after every batch) lists every bag taken and what became of it, and the converter
itself skips episodes already in the dataset (content ids), and an append a crash interrupted was
never published (`data/lerobot/commit/`). A crash at any point therefore re-does at most the last
batch. One ingest pass at a time per dataset (`<DS>.ingest.lock`: a second ingest waits its turn); its
convert waits for whatever else holds the dataset (`<DS>.lock`: a user's convert, curate or doctor)
rather than fail — a user's command that finds the dataset held by ingest is refused as busy.

Encoded ahead (`data/convert/preencode.py`; `--no-pre-encode`: not): the camera video of every bag being
recorded, or closed and about to be taken (waiting for its verdict, a keep or the grace period),
is encoded in segments as it is written, and the convert remuxes the segments that hold exactly
its frames — a kept 60 s episode reaches the dataset seconds after its stop instead of after a
full encode (`bench/ingest.py`). The segments lie beside the dataset (`<DS>.ingest.segments/`)
until the bag is taken.

Safe while recording continues: the bag being recorded has no metadata.yaml yet and no verdict;
the process runs at low priority (`--nice`, default 10, and SCHED_BATCH; in a session of its own —
`setsid`, or a session started by `teleop-flywheel run` — its autogroup is niced too), and
converts with one worker by default.

Rejected bags are moved (never deleted) to `--quarantine` (default `<WATCH_DIR>/../quarantine`)
under their first reason code, with a JSON record of why; the dataset's record says where they
went (`--no-quarantine`: they stay where they are, rejected in the state file). A dataset this run
could not append to (another fps or codec) is refused at start. `--once` ingests what is ready and exits (cron, tests);
otherwise it polls every `--poll` s.

In a session (`ingest:=true`: the `ingest` node, `ros/nodes/ingest.py`) the same loop runs on the
session's own output_dir; its dataset lies inside that folder (`recording/recorder/output_layout.py`) and
rejected bags go to `<output_dir>/quarantine/` (or stay where they are: `quarantine=None`).
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from teleop_flywheel.core.files import replace_atomic
from teleop_flywheel.data.convert.converter import ConvertResult, convert
from teleop_flywheel.data.convert.preencode import PreEncoding
from teleop_flywheel.data.convert.refresh import update_record
from teleop_flywheel.data.errors import DatasetError
from teleop_flywheel.data.filelock import locked
from teleop_flywheel.data.lerobot import v3_layout
from teleop_flywheel.data.lerobot.dataset import LeRobotDataset
from teleop_flywheel.data.lerobot.encoder_process import ENCODE_STALL_S
from teleop_flywheel.data.provenance.reviews import decisions, review_folders
from teleop_flywheel.data.reports.audit import audit, write_html
from teleop_flywheel.data.validate.reasons import ValidateConfig
from teleop_flywheel.data.validate.validator import EpisodeReport, display, find_bags, quarantine
from teleop_flywheel.recording.recorder.verdict import DISCARD, KEEP, decision, read_verdict

STATE_FORMAT = "teleop_flywheel.ingest/1"
GRACE_S = 30.0
RECORDING, NO_VERDICT, GRACE = "still recording (no metadata.yaml)", "no verdict yet", "grace period"
# A closed bag still without a verdict this long after its close is not about to be taken (recorded
# before verdicts, or by a recorder without them): not encoded ahead.
AHEAD_UNJUDGED_S = 120.0


@dataclass
class IngestConfig:
    watch: list[Path]  # the rigs' output folders (one, or one per rig)
    dataset: Path
    quarantine: Path | None  # None: rejected bags stay where they are (recorded as rejected in the state)
    grace_s: float = GRACE_S
    codec: str = "libsvtav1"
    fps: int = 30
    validate: ValidateConfig = field(default_factory=ValidateConfig.load)
    trim_dead_air: bool = False
    without_verdict: bool = False
    workers: int = 1
    executor: str = "local"  # or "ray": validation and conversion as tasks on a Ray cluster
    audit_html: Path | None = None
    repo_id: str | None = None
    admit_reviewed: bool = False  # act on the watch folders' review logs (`provenance.reviews`), read each pass
    encode_stall_s: float = ENCODE_STALL_S  # an encode making no progress this long stops the ingest


def state_path(dataset: Path) -> Path:
    return dataset.with_name(dataset.name + ".ingest.json")


def read_state(dataset: Path) -> dict[str, Any]:
    path = state_path(dataset)
    if not path.is_file():
        return {"format": STATE_FORMAT, "bags": {}}
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise DatasetError(f"{path}: unreadable ingest state: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("bags"), dict):
        raise DatasetError(f"{path}: not an ingest state")
    return doc


def _since_ns(bag: Path, verdict: dict[str, Any] | None) -> int:
    """When the bag became ready to wait out the grace period: the verdict's time, else its close."""
    validated = (verdict or {}).get("validated") or {}
    if isinstance(validated, dict) and isinstance(validated.get("wall_ns"), int):
        return int(validated["wall_ns"])
    target = bag / "verdict.json" if verdict is not None else bag / "metadata.yaml"
    return target.stat().st_mtime_ns


def ready(bag: Path, cfg: IngestConfig, now_ns: int | None = None) -> tuple[bool, str]:
    """(take it now, why not)."""
    if not bag.is_dir() or not (bag / "metadata.yaml").is_file():
        return False, RECORDING
    try:
        verdict = read_verdict(bag)
    except ValueError as exc:
        return False, f"unreadable verdict: {exc}"
    if verdict is None and not cfg.without_verdict:
        return False, NO_VERDICT
    said = decision(verdict)
    if said == DISCARD:
        return False, "discarded by the operator"
    if said == KEEP:
        return True, ""
    waited = ((now_ns or time.time_ns()) - _since_ns(bag, verdict)) / 1e9
    if waited < cfg.grace_s:
        return False, f"{GRACE}: {cfg.grace_s - waited:.0f} s left for a keep or discard"
    return True, ""


def waiting_bags(cfg: IngestConfig, state: dict[str, Any]) -> tuple[list[Path], list[Path]]:
    """(bags ready to take now, bags worth encoding ahead: being recorded or about to be taken)
    among the bags in the watch folders not taken before (discarded/ and the quarantine skipped)."""
    bags, _errors = find_bags(list(cfg.watch), exclude=cfg.quarantine)
    done = state["bags"]
    now, ahead = [], []
    for bag in bags:
        if not bag.is_dir() or str(bag.resolve()) in done:
            continue
        take, why = ready(bag, cfg)
        if take:
            now.append(bag)
        elif why == RECORDING or why.startswith(GRACE) or (why == NO_VERDICT and _closed_s_ago(bag) < AHEAD_UNJUDGED_S):
            ahead.append(bag)
    return now, ahead


def _closed_s_ago(bag: Path) -> float:
    try:
        return time.time() - (bag / "metadata.yaml").stat().st_mtime
    except OSError:
        return float("inf")


def segments_root(dataset: Path) -> Path:
    """Where ingest keeps the video segments it encodes ahead (`data/convert/preencode.py`): beside the dataset."""
    return dataset.with_name(dataset.name + ".ingest.segments")


def _quarantine(res: ConvertResult, cfg: IngestConfig) -> list[EpisodeReport]:
    moved: list[EpisodeReport] = []
    if cfg.quarantine is None:
        return moved
    for r in res.reports:
        if res.outcomes.get(r.path) == "rejected" and os.path.isdir(r.path):
            try:
                quarantine(r, cfg.quarantine)
                moved.append(r)
            except (OSError, ValueError, shutil.Error) as exc:
                print(f"ingest: quarantine of {display(r.path)} failed: {exc}", file=sys.stderr)
    return moved


def ingest_once(cfg: IngestConfig, log: Any = print, pre: PreEncoding | None = None) -> dict[str, str]:
    """One pass: take what is ready, convert/quarantine it, refresh; {bag: outcome}. Then `pre`
    (kept from pass to pass) encodes ahead the bags being recorded or about to be taken, and their
    convert uses that work."""
    with locked(cfg.dataset.with_name(cfg.dataset.name + ".ingest"), what="ingest"):
        state = read_state(cfg.dataset)
        bags, ahead = waiting_bags(cfg, state)
        outcomes = _take(cfg, state, bags, log, pre) if bags else {}
        if pre is not None:
            pre.step(ahead)
        return outcomes


def _take(cfg: IngestConfig, state: dict[str, Any], bags: list[Path], log: Any, pre: PreEncoding | None
          ) -> dict[str, str]:
    """Convert/quarantine `bags`, record them in the state, refresh the audit page."""
    t0 = time.monotonic()
    res = convert(bags, cfg.dataset, cfg.fps, cfg.codec, workers=cfg.workers, executor=cfg.executor,
                  validate=cfg.validate, progress=False, trim_dead_air=cfg.trim_dead_air, repo_id=cfg.repo_id,
                  segments=pre.segments(bags) if pre is not None else None, wait=True,
                  reviews=decisions(review_folders(cfg.watch)), admit_reviewed=cfg.admit_reviewed,
                  encode_stall_s=cfg.encode_stall_s)
    moved = _quarantine(res, cfg)
    if moved and (cfg.dataset / v3_layout.INFO_PATH).is_file():
        update_record(cfg.dataset, moved)  # where each rejected bag went
    by_path = {r.path: r for r in res.reports}
    now = time.time_ns()
    for bag in bags:
        outcome = res.outcomes.get(str(bag), "error")
        report = by_path.get(str(bag))
        reused = res.reused_frames.get(str(bag), 0)
        state["bags"][str(bag.resolve())] = {
            "name": bag.name, "outcome": outcome, "episode_id": report.episode_id if report else None,
            "codes": report.codes if report else [], "quarantined_to": report.quarantined_to if report else None,
            "at_wall_ns": now, "pre_encoded_frames": reused}
        log(f"ingest: {display(bag.name)}: {outcome}" + (f" {' '.join(report.codes)}" if report and report.codes
                                                      else "")
            + (f" -> {display(report.quarantined_to)}" if report and report.quarantined_to else "")
            + (f" ({reused} camera frames encoded while it was recorded)" if reused else ""))
    for line in res.refused + res.errors:
        log(f"ingest: not converted: {line}")
    replace_atomic(state_path(cfg.dataset), json.dumps(state, indent=1))
    if pre is not None:
        pre.forget(bags)
    if res.converted and cfg.audit_html is not None:
        write_html(audit(LeRobotDataset.open(cfg.dataset)), cfg.audit_html)
    log(f"ingest: {len(bags)} bag(s) in {time.monotonic() - t0:.1f} s")
    return {str(b): res.outcomes.get(str(b), "error") for b in bags}
