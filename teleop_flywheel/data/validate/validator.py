"""`teleop-flywheel validate PATH...`: PASS/FAIL per episode bag, with reason codes and the numbers behind them.

A 0 % rejection rate means the checks are not checking (the seeds' lesson), so a run that rejects
nothing says so loudly. Rejected bags can be MOVED (never deleted, never overwriting) into
`--quarantine DIR/<reason>/` with a JSON record of why.

One bad input never stops the batch: a damaged bag is a verdict (TRUNCATED, CORRUPT, …); a path
that is no bag (missing, a FIFO, unreadable, a bag directory inside another) is one error line
naming it. Exit status: 0 ran to completion (rejections are results), 1 ran but some inputs could
not be processed (or moved to quarantine), 2 usage error or nothing could be read.

The checks are in `checks.py` (decode path `decode.py`, time base `timebase.py`), the codes and thresholds in
`reasons.py` and `config/validate.yaml`, all in `data/validate/`.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from teleop_flywheel.core.episode import EpisodeMeta
from teleop_flywheel.core.errors import FileExistsRefused, UsageError, error_line
from teleop_flywheel.core.files import create_exclusive
from teleop_flywheel.data.parallel import parallel_map
from teleop_flywheel.data.validate.checks import STAMPED_TYPES, Inspection, check_bag, inspect_bag
from teleop_flywheel.data.validate.lag_pool import apply_lag_pools
from teleop_flywheel.data.validate.reasons import (
    CLOCK_OFFSET,
    CLOCK_STEP,
    CODES,
    CORRUPT,
    DEAD_AIR,
    DURATION_OUT_OF_RANGE,
    FRAME_GAP,
    MISSING_STREAM,
    OUTCOME_UNSET,
    SCHEMA_MISMATCH,
    TRUNCATED,
    UNLABELLED_INTERVENTION,
    Reason,
    Supplied,
    ValidateConfig,
)
from teleop_flywheel.data.validate.session_drift import DriftFit, apply_session_drift, clock_points, session_of
from teleop_flywheel.recording.mcap.exceptions import BagReadError, NotABagError
from teleop_flywheel.recording.mcap.reader import open_bag
from teleop_flywheel.recording.recorder.verdict import DISCARDED_DIR

__all__ = ["CODES", "MISSING_STREAM", "FRAME_GAP", "CLOCK_OFFSET", "CLOCK_STEP", "DURATION_OUT_OF_RANGE",
           "OUTCOME_UNSET", "UNLABELLED_INTERVENTION", "DEAD_AIR", "SCHEMA_MISMATCH", "TRUNCATED", "CORRUPT",
           "STAMPED_TYPES", "Reason", "Supplied", "ValidateConfig", "EpisodeReport", "check_bag", "inspect_bag",
           "validate_bag", "validate_batch", "validate_paths", "find_bags", "quarantine", "summary", "display"]


def display(text: str | os.PathLike[str]) -> str:
    """A path or name as printable text: bytes that are not UTF-8 (a bag named on a Latin-1 disk)
    become `\\xNN` escapes instead of crashing a strict UTF-8 stdout or a parquet string column."""
    return os.fsencode(os.fspath(text)).decode("utf-8", "backslashreplace")


@dataclass
class EpisodeReport:
    path: str
    name: str
    episode_id: str | None
    reasons: list[Reason] = field(default_factory=list)
    cameras: list[str] = field(default_factory=list)
    duration_s: float | None = None
    quarantined_to: str | None = None
    error: str | None = None  # the input could not be processed (not a bag): no verdict
    episode_id_v1: str | None = None
    warnings: list[Reason] = field(default_factory=list)  # a third outcome: printed, never a rejection
    camera_lag: dict[str, dict[str, Any]] = field(default_factory=dict)  # camera -> LagEstimate.to_dict()
    tracking_lag_ms: list[float | None] = field(default_factory=list)  # per joint
    tracking_outrun_share: list[float | None] = field(default_factory=list)  # per joint (`tracking.py`)
    task_spec_id: str | None = None  # the task spec it was judged by
    session: str = ""  # `session_drift.session_of`: rig and UTC day ("" = none)
    clock_points: dict[str, list[list[float]]] = field(default_factory=dict)  # `session_drift.clock_points`
    camera_instance: dict[str, str] = field(default_factory=dict)  # camera -> instance id (`lag_pool`)
    camera_pool: dict[str, dict[str, Any]] = field(default_factory=dict)  # camera -> its `lag_pool.LagPool`
    review: dict[str, Any] | None = None  # the episode's latest review (`provenance/reviews.py`), where convert had one
    overruled: list[Reason] = field(default_factory=list)  # rejections a review overruled: admitted, kept on record

    @property
    def passed(self) -> bool:
        return not self.reasons and self.error is None

    @property
    def status(self) -> str:
        """PASS, WARN (passed, with warnings) or FAIL."""
        return "FAIL" if not self.passed else ("WARN" if self.warnings else "PASS")

    @property
    def codes(self) -> list[str]:
        return sorted({r.code for r in self.reasons}, key=lambda c: CODES.index(c) if c in CODES else len(CODES))

    def line(self) -> str:
        if self.error is not None:
            return f"error: {self.error}"
        ident = (self.episode_id or "-" * 12)[:12]
        return (f"{ident} {self.status} {display(self.name)}" + "".join(f" {r}" for r in self.reasons)
                + "".join(f" warning: {w}" for w in self.warnings))

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["path"], d["name"] = display(self.path), display(self.name)
        if self.quarantined_to:
            d["quarantined_to"] = display(self.quarantined_to)
        d["passed"] = self.passed
        d["status"] = self.status
        d["codes"] = self.codes
        d["warning_codes"] = sorted({w.code for w in self.warnings})
        return d


def validate_bag(job: tuple[str, ValidateConfig] | tuple[str, ValidateConfig, Supplied | None]) -> EpisodeReport:
    """One bag → its report; never raises (picklable, for parallel_map): one bad bag never stops a batch."""
    path, cfg = job[0], job[1]
    supplied = job[2] if len(job) > 2 else None  # type: ignore[misc]
    p = Path(path)
    try:
        bag = open_bag(p)
    except NotABagError as exc:
        return EpisodeReport(str(p), p.name, None, error=str(exc))
    except (BagReadError, OSError) as exc:
        return EpisodeReport(str(p), p.name, None, [Reason(CORRUPT, f"unreadable: {exc}")])
    except Exception as exc:  # noqa: BLE001 - a verdict, never a traceback that stops the batch
        return EpisodeReport(str(p), p.name, None, [Reason(CORRUPT, f"unreadable: {type(exc).__name__}: {exc}")])
    other = _other_spec(bag.episode, supplied)
    if other is not None:
        return EpisodeReport(str(p), bag.name, bag.episode_id, error=f"{display(p)}: {other}")
    try:
        ins = inspect_bag(bag, cfg, supplied)
    except Exception as exc:  # noqa: BLE001 - a malformed message must not stop the batch
        return EpisodeReport(str(p), bag.name, bag.episode_id, [Reason(CORRUPT, f"{bag.mcap_path.name}: undecodable "
                             f"content: {type(exc).__name__}: {exc}")], sorted(bag.camera_topics()),
                             episode_id_v1=bag.episode_id_v1)
    return report_of(str(p), bag.name, bag.episode_id, bag.episode_id_v1, sorted(bag.camera_topics()), ins)


def _other_spec(ep: EpisodeMeta | None, supplied: Supplied | None) -> str | None:
    """Why a bag cannot be judged by `--task` (recorded under another spec), or None."""
    spec = supplied.task_spec if supplied is not None else None
    if spec is None or ep is None or not ep.task_spec_id or ep.task_spec_id == spec.id:
        return None
    name = ep.task_spec.get("name", "?") if isinstance(ep.task_spec, dict) else "?"
    return (f"recorded under task spec {name} ({ep.task_spec_id}), not --task {spec.path} ({spec.name}, {spec.id}); "
            "validate it without --task (its own spec judges it) or with the spec it was recorded under")


def report_of(path: str, name: str, episode_id: str | None, episode_id_v1: str | None, cameras: list[str],
              ins: Inspection) -> EpisodeReport:
    """The report of an inspected bag (validate; convert reports its verdicts the same way)."""
    lags = {c: e.to_dict() for c, e in ins.camera_lag.items()}
    return EpisodeReport(path, name, episode_id, list(ins.reasons), cameras, ins.span_s, episode_id_v1=episode_id_v1,
                         warnings=list(ins.warnings), camera_lag=lags, tracking_lag_ms=[j.lag_ms for j in ins.tracking],
                         tracking_outrun_share=[j.outrun_share for j in ins.tracking],
                         task_spec_id=ins.task_spec_id, session=session_of(ins.episode, ins.foreign),
                         clock_points=clock_points(None if ins.foreign else ins.episode, lags),
                         camera_instance=dict(ins.camera_instance))


def apply_schema(reports: list[EpisodeReport], cameras: list[str] | None) -> list[str]:
    """SCHEMA_MISMATCH for episodes whose camera set differs from `cameras` (or the batch's most
    common set among readable bags); returns the reference set."""
    readable = [r for r in reports if r.episode_id is not None]
    if cameras is None:
        counts = Counter(tuple(r.cameras) for r in readable)
        first_seen = {k: i for i, k in enumerate(counts)}
        common: tuple[str, ...] = max(counts, key=lambda k: (counts[k], -first_seen[k])) if counts else ()
        ref = list(common)
    else:
        ref = sorted(cameras)
    for r in readable:
        if r.cameras != ref:
            extra, missing = sorted(set(r.cameras) - set(ref)), sorted(set(ref) - set(r.cameras))
            r.reasons.append(Reason(SCHEMA_MISMATCH, f"cameras {r.cameras} vs {ref}"
                                    + (f" (+{extra})" if extra else "") + (f" (-{missing})" if missing else ""),
                                    {"cameras": r.cameras, "expected": ref}))
    return ref


def _is_bag_dir(d: Path) -> bool:
    try:
        return any(e.name.endswith(".mcap") for e in os.scandir(d))
    except OSError:
        return False


def find_bags(paths: list[str | Path], exclude: Path | None = None) -> tuple[list[Path], list[str]]:
    """(bag directories / .mcap files named or found below the directories named, errors).

    A directory holding `.mcap` files is a bag; the walk does not descend into a bag (a bag
    directory inside another is an error naming both: validate it by naming it), follows no
    symlinked directory, and skips `exclude` (the quarantine) and everything below it, and the
    recorder's `discarded/` folders (episodes the operator threw away; name one to read it).
    """
    out: list[Path] = []
    errors: list[str] = []
    skip = exclude.resolve() if exclude is not None else None
    for raw in paths:
        p = Path(raw)
        if not p.exists() and not p.is_symlink():
            errors.append(f"{display(p)}: no such file or directory")
        elif p.is_file() or _is_bag_dir(p):
            out.append(p)
        elif not p.is_dir():
            out.append(p)  # a FIFO or device: open_bag names it (an error, never opened)
        else:
            for root, dirs, _files in os.walk(p, onerror=lambda e: errors.append(f"{display(e.filename)}: "
                                                                                  f"{e.strerror}")):
                here = Path(root)
                if (skip is not None and here.resolve() == skip) or (here != p and here.name == DISCARDED_DIR):
                    dirs[:] = []
                    continue
                if here != p and _is_bag_dir(here):
                    out.append(here)
                    nested = [here / d for d in dirs if _contains_bag(here / d)]
                    errors.extend(f"{display(n)}: bag directory inside bag directory {display(here)}; skipped "
                                  "(validate it by naming it)" for n in nested)
                    dirs[:] = []
                dirs.sort()
    return sorted(dict.fromkeys(out)), errors


def _contains_bag(d: Path) -> bool:
    return any(_is_bag_dir(Path(root)) for root, _dirs, _files in os.walk(d))


def validate_batch(paths: list[Path], cfg: ValidateConfig, workers: int | None = None,
                   executor: str = "local", desc: str | None = None,
                   supplied: Supplied | None = None) -> tuple[list[EpisodeReport], list[DriftFit]]:
    """Every bag's report, with the batch-wide checks (camera set, each camera instance's pooled lag
    and the clock drift across each session), and the sessions' clock fits."""
    reports = parallel_map(validate_bag, [(str(p), cfg, supplied) for p in paths], workers=workers,
                           executor=executor, desc=desc)
    apply_schema(reports, cfg.cameras)
    apply_lag_pools(reports, cfg)
    return reports, apply_session_drift(reports, cfg)


def validate_paths(paths: list[Path], cfg: ValidateConfig, workers: int | None = None,
                   executor: str = "local", desc: str | None = None,
                   supplied: Supplied | None = None) -> list[EpisodeReport]:
    return validate_batch(paths, cfg, workers, executor, desc, supplied)[0]


def _free(path: Path) -> Path:
    def taken(p: Path) -> bool:
        return any(os.path.lexists(q) for q in (p, p.with_name(p.name + ".json")))

    if not taken(path):
        return path
    k = 1
    while taken(path.with_name(f"{path.name}_{k}")):
        k += 1
    return path.with_name(f"{path.name}_{k}")


def quarantine(report: EpisodeReport, root: Path) -> Path:
    """Move a rejected bag to root/<first code>/<name> (+_k if taken) with <name>.json beside it
    (created exclusively). OSError/ValueError name the bag when it cannot be moved."""
    src = Path(report.path)
    if not os.path.lexists(src):
        raise FileNotFoundError(f"{display(src)}: gone before it could be quarantined")
    if src.is_dir() and root.resolve().is_relative_to(src.resolve()):
        raise ValueError(f"{display(src)}: cannot quarantine into {display(root)}, which is inside the bag")
    dest = _free(root / report.codes[0] / src.name)
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(str(src), str(dest))
    report.quarantined_to = str(dest)
    record = dest.with_name(dest.name + ".json")
    try:
        create_exclusive(record, json.dumps(report.to_dict(), indent=2))
    except FileExistsRefused:
        create_exclusive(_free(record.with_name(dest.name + "_record")).with_suffix(".json"),
                         json.dumps(report.to_dict(), indent=2))
    return dest


def summary(reports: list[EpisodeReport], fits: list[DriftFit] | None = None) -> dict[str, Any]:
    """Counts and the reason breakdown; with `fits`, every session's clock fit (`sessions`)."""
    judged = [r for r in reports if r.error is None]
    rejected = [r for r in judged if not r.passed]
    by_code = Counter(c for r in rejected for c in r.codes)
    warned = [r for r in judged if r.passed and r.warnings]
    by_warning = Counter(w for r in warned for w in sorted({x.code for x in r.warnings}))
    return {"episodes": len(judged), "passed": len(judged) - len(rejected), "rejected": len(rejected),
            "rejection_rate": len(rejected) / len(judged) if judged else 0.0,
            "reasons": {c: by_code[c] for c in CODES if by_code[c]},
            "warned": len(warned), "warnings": dict(sorted(by_warning.items())),
            "errors": len(reports) - len(judged)} | ({"sessions": [f.to_dict() for f in fits]} if fits is not None
                                                      else {})


def add_supplied_arguments(parser: argparse.ArgumentParser) -> None:
    """`--outcome` for bags without episode metadata (validate and convert)."""
    parser.add_argument("--outcome", choices=("success", "failure"), default=None,
                        help="outcome of bags that carry no episode metadata (a `ros2 bag record` bag); "
                             "never overrides a recorded outcome. Without it such bags fail with OUTCOME_UNSET")


def load_inputs(config: str | None, given: list[str | Path], command: str, exclude: Path | None = None
                ) -> tuple[ValidateConfig, list[Path], list[str]]:
    """Thresholds, bags and path errors for a CLI run (validate, convert); each path error is one line
    on stderr; UsageError when it cannot run at all (bad config, nothing found)."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="backslashreplace")
    try:
        cfg = ValidateConfig.load(config)
    except ValueError as exc:
        raise UsageError(str(exc), fix="config/validate.yaml shows every threshold") from exc
    paths, errors = find_bags(given, exclude)
    if not paths:
        for e in errors[:-1]:
            print(error_line(command, e), file=sys.stderr)
        what = errors[-1] if errors else f"no bags found in {' '.join(display(p) for p in given)}"
        raise UsageError(what, fix="give bag directories, .mcap files or folders of bags")
    for e in errors:
        print(error_line(command, e, fix="check the path"), file=sys.stderr)
    return cfg, paths, errors

