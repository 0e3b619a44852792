"""`teleop-flywheel validate PATH...`: PASS/FAIL per episode bag, with reason codes and the numbers behind them.

A 0 % rejection rate means the checks are not checking (the seeds' lesson), so a run that rejects
nothing says so loudly. Rejected bags can be MOVED (never deleted, never overwriting) into
`--quarantine DIR/<reason>/` with a JSON record of why. Exit status 0 whenever it ran.

Codes (thresholds: `config/validate.yaml`, documented there and in docs/data_engine.md):
MISSING_STREAM, FRAME_GAP, CLOCK_OFFSET, DURATION_OUT_OF_RANGE, OUTCOME_UNSET,
UNLABELLED_INTERVENTION, DEAD_AIR, SCHEMA_MISMATCH, TRUNCATED, CORRUPT.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
from collections import Counter
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from teleop_flywheel.core.resources import config_path
from teleop_flywheel.core.topics import AUTHORITY, FOLLOWER_COMMAND, FOLLOWER_STATE, LEADER_STATE, camera_image
from teleop_flywheel.data.parallel import add_arguments_to, parallel_map
from teleop_flywheel.recording.reader import CORRUPT, TRUNCATED, Bag, BagReadError, open_bag

MISSING_STREAM = "MISSING_STREAM"
FRAME_GAP = "FRAME_GAP"
CLOCK_OFFSET = "CLOCK_OFFSET"
DURATION_OUT_OF_RANGE = "DURATION_OUT_OF_RANGE"
OUTCOME_UNSET = "OUTCOME_UNSET"
UNLABELLED_INTERVENTION = "UNLABELLED_INTERVENTION"
DEAD_AIR = "DEAD_AIR"
SCHEMA_MISMATCH = "SCHEMA_MISMATCH"
CODES = (MISSING_STREAM, FRAME_GAP, CLOCK_OFFSET, DURATION_OUT_OF_RANGE, OUTCOME_UNSET,
         UNLABELLED_INTERVENTION, DEAD_AIR, SCHEMA_MISMATCH, TRUNCATED, CORRUPT)
# Streams whose receive-minus-stamp latency is checked. Not the pedal's Joy: its takeover is
# published only after the debounce window (30 ms) with the kernel's event time, by design.
STAMPED_TYPES = ("sensor_msgs/msg/JointState", "sensor_msgs/msg/CompressedImage")


@dataclass
class ValidateConfig:
    fps: float = 30.0
    max_gap_s: float | None = None
    required_topics: list[str] = field(default_factory=lambda: [
        FOLLOWER_STATE, FOLLOWER_COMMAND, AUTHORITY])
    min_messages: int = 2
    gap_topics_extra: list[str] = field(default_factory=lambda: [LEADER_STATE])
    min_duration_s: float = 2.0
    max_duration_s: float = 600.0
    min_latency_ms: float = -1.0
    max_camera_latency_ms: float = 25.0
    max_joint_latency_ms: float = 10.0
    max_ptp_offset_ms: float = 1.0
    max_leading_dead_s: float = 3.0
    max_internal_dead_s: float = 5.0
    command_topic: str = FOLLOWER_COMMAND
    cameras: list[str] | None = None

    @property
    def gap_bound_s(self) -> float:
        return 2.0 / self.fps if self.max_gap_s is None else float(self.max_gap_s)

    @classmethod
    def load(cls, path: str | Path | None = None) -> "ValidateConfig":
        """Defaults, overridden by the YAML file (the shipped one unless `path` is given)."""
        p = Path(path) if path is not None else config_path("validate.yaml")
        if path is None and not p.is_file():
            return cls()
        try:
            data = yaml.safe_load(p.read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise ValueError(f"validate config {p}: {exc}") from exc
        if not isinstance(data, dict):
            raise ValueError(f"validate config {p}: expected a mapping")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"validate config {p}: unknown key(s) {unknown}; known: {sorted(known)}")
        return cls(**data)


@dataclass
class Reason:
    code: str
    detail: str
    numbers: dict[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        return f"{self.code}({self.detail})"


@dataclass
class EpisodeReport:
    path: str
    name: str
    episode_id: str | None
    reasons: list[Reason] = field(default_factory=list)
    cameras: list[str] = field(default_factory=list)
    duration_s: float | None = None
    quarantined_to: str | None = None

    @property
    def passed(self) -> bool:
        return not self.reasons

    @property
    def codes(self) -> list[str]:
        return sorted({r.code for r in self.reasons}, key=CODES.index)

    def line(self) -> str:
        ident = (self.episode_id or "-" * 12)[:12]
        status = "PASS" if self.passed else "FAIL"
        return f"{ident} {status} {self.name}" + ("" if self.passed else " " + " ".join(map(str, self.reasons)))

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["passed"] = self.passed
        d["codes"] = self.codes
        return d


# -- checks ------------------------------------------------------------------------------------

def _gaps(name: str, stamps: np.ndarray, bound_s: float, t0: int, t1: int) -> Reason | None:
    """The largest silence of a stream over the episode [t0, t1] — between its messages, and also
    before its first and after its last: a camera that dies 3 s before the end is a 3 s gap (the
    converter would otherwise just end the episode early, without a word)."""
    if len(stamps) == 0:
        return None
    edges = np.concatenate(([min(t0, int(stamps[0]))], stamps, [max(t1, int(stamps[-1]))]))
    d = np.diff(edges)
    i = int(np.argmax(d))
    if d[i] / 1e9 > bound_s:
        n_over = int(np.count_nonzero(d > bound_s * 1e9))
        where = " (before its first message)" if i == 0 else (" (after its last message, to the episode's end)"
                                                              if i == len(d) - 1 else "")
        return Reason(FRAME_GAP, f"{name} gap {d[i] / 1e9:.3f}s at t={(edges[i] - t0) / 1e9:.2f}s{where} > "
                      f"{bound_s:.3f}s" + (f", {n_over} gaps over" if n_over > 1 else ""),
                      {"stream": name, "gap_s": d[i] / 1e9, "at_s": (edges[i] - t0) / 1e9, "bound_s": bound_s,
                       "gaps_over": n_over})
    return None


def _latency_check(bag: Bag, topic: str, cfg: ValidateConfig, camera: bool) -> Reason | None:
    """Median receive-minus-stamp latency on the wall clock, through the episode's clock mapping."""
    ep = bag.episode
    assert ep is not None and ep.clock_start
    raw = bag.raw(topic)
    if len(raw) < 2:
        return None
    off0 = int(ep.clock_start["wall_ns"]) - int(ep.clock_start["mono_ns"])
    if ep.clock_end:
        off1 = int(ep.clock_end["wall_ns"]) - int(ep.clock_end["mono_ns"])
        m0, m1 = int(ep.clock_start["mono_ns"]), int(ep.clock_end["mono_ns"])
        frac = (raw.publish_ns - m0) / max(m1 - m0, 1)
        offset = off0 + frac * (off1 - off0)
    else:
        offset = np.full(len(raw.publish_ns), float(off0))
    latency_ms = (raw.log_ns - raw.publish_ns - offset) / 1e6
    med = float(np.median(latency_ms))
    hi = cfg.max_camera_latency_ms if camera else cfg.max_joint_latency_ms
    if cfg.min_latency_ms <= med <= hi:
        return None
    why = "stamp ahead of its own arrival" if med < cfg.min_latency_ms else "stamp far behind arrival"
    return Reason(CLOCK_OFFSET, f"{topic} median receive-stamp latency {med:+.1f}ms outside "
                  f"[{cfg.min_latency_ms:g}, {hi:g}]ms ({why})",
                  {"stream": topic, "median_latency_ms": med, "min_ms": cfg.min_latency_ms, "max_ms": hi})


def _dead_air(stamps: np.ndarray, cmd: np.ndarray, cfg: ValidateConfig) -> list[Reason]:
    """Runs of bit-identical consecutive commands, by duration."""
    if len(cmd) < 2:
        return []
    bits = np.ascontiguousarray(cmd).view(np.uint8).reshape(len(cmd), -1)
    changed = np.any(bits[1:] != bits[:-1], axis=1)
    starts = np.concatenate(([0], np.flatnonzero(changed) + 1))
    ends = np.concatenate((starts[1:] - 1, [len(cmd) - 1]))
    dur = (stamps[ends] - stamps[starts]) / 1e9
    out = []
    if dur[0] > cfg.max_leading_dead_s:
        out.append(Reason(DEAD_AIR, f"leading {dur[0]:.1f}s of identical commands > {cfg.max_leading_dead_s:g}s",
                          {"kind": "leading", "seconds": float(dur[0]), "bound_s": cfg.max_leading_dead_s}))
    internal = np.flatnonzero(dur[1:] > cfg.max_internal_dead_s) + 1
    if len(internal):
        i = int(internal[np.argmax(dur[internal])])
        out.append(Reason(DEAD_AIR, f"{dur[i]:.1f}s of identical commands at t={(stamps[starts[i]] - stamps[0]) / 1e9:.1f}s"
                          f" > {cfg.max_internal_dead_s:g}s ({len(internal)} stretch(es))",
                          {"kind": "internal", "seconds": float(dur[i]), "at_s": (stamps[starts[i]] - stamps[0]) / 1e9,
                           "stretches": len(internal), "bound_s": cfg.max_internal_dead_s}))
    return out


def _interventions(bag: Bag) -> list[Reason]:
    ep = bag.episode
    assert ep is not None
    out = [Reason(UNLABELLED_INTERVENTION, f"intervention {i.id} has no trigger label in the metadata",
                  {"intervention_id": i.id}) for i in ep.unlabelled_interventions]
    labelled = {i.id for i in ep.interventions if i.labelled}
    flagged = {i.id for i in ep.unlabelled_interventions}
    if bag.has(AUTHORITY):
        a = bag.authority()
        if {"intervention_id", "trigger"} <= set(a.names):
            ids = a.position[:, a.names.index("intervention_id")]
            trig = a.position[:, a.names.index("trigger")]
            for iid in np.unique(ids[ids > 0]).astype(int):
                if iid in labelled or iid in flagged:
                    continue
                if not np.any(trig[ids == iid] > 0):
                    out.append(Reason(UNLABELLED_INTERVENTION,
                                      f"intervention {iid} on {AUTHORITY} never got a trigger label",
                                      {"intervention_id": int(iid)}))
    return out


def check_bag(bag: Bag, cfg: ValidateConfig) -> list[Reason]:
    """Every per-episode check on an opened bag (schema is checked across the batch)."""
    reasons = [Reason(d.code, f"{Path(d.file).name}: {d.detail}", {"file": d.file}) for d in bag.damage]
    ep = bag.episode
    cameras = bag.camera_topics()
    expected = list(cfg.required_topics) + [t for t in (ep.topics if ep else []) if t not in cfg.required_topics]
    for cam in (ep.cameras if ep else []):
        topic = camera_image(cam)
        if cam not in cameras and topic not in expected:
            expected.append(topic)
    for topic in expected:
        n = len(bag.raw(topic)) if topic in bag.topics else 0
        needed = 1 if topic.endswith("/intervention") else cfg.min_messages
        if topic.endswith("/intervention") and ep is not None and not ep.interventions:
            continue
        if n < needed:
            reasons.append(Reason(MISSING_STREAM, f"{topic} has {n} messages (< {needed})",
                                  {"stream": topic, "messages": n}))
    if ep is None:
        reasons.append(Reason(OUTCOME_UNSET, "no episode metadata record at all"))
        return reasons
    state_topic = cfg.required_topics[0] if cfg.required_topics else FOLLOWER_STATE
    gap_topics = [t for t in list(cfg.required_topics) + list(cfg.gap_topics_extra) + list(cameras.values())
                  if bag.has(t)]
    state = bag.raw(state_topic) if bag.has(state_topic) else None
    t0 = int(state.publish_ns[0]) if state is not None else 0
    for topic in dict.fromkeys(gap_topics):
        raw = bag.raw(topic)
        if state is None:  # no reference span: gaps between messages only
            r = _gaps(topic, raw.publish_ns, cfg.gap_bound_s, int(raw.publish_ns[0]), int(raw.publish_ns[-1]))
        else:
            # The stream's end is the state's last stamp less how much later than the state this
            # stream arrives (a camera's pipeline latency: its last frames were still in flight
            # at stop). log − publish mixes wall and monotonic clocks; the offset cancels.
            extra = int(np.median(raw.log_ns - raw.publish_ns) - np.median(state.log_ns - state.publish_ns))
            r = _gaps(topic, raw.publish_ns, cfg.gap_bound_s, t0, int(state.publish_ns[-1]) - max(0, extra))
        if r:
            reasons.append(r)
    if bag.has(state_topic):
        span = (bag.raw(state_topic).publish_ns[-1] - t0) / 1e9
        if not cfg.min_duration_s <= span <= cfg.max_duration_s:
            reasons.append(Reason(DURATION_OUT_OF_RANGE, f"{span:.1f}s outside [{cfg.min_duration_s:g}, "
                                  f"{cfg.max_duration_s:g}]s", {"seconds": span}))
    if not ep.clock_start:
        reasons.append(Reason(CLOCK_OFFSET, "no monotonic→wall clock mapping recorded: stamps unverifiable"))
    else:
        for topic, type_name in bag.topics.items():
            if type_name in STAMPED_TYPES and bag.has(topic):
                r = _latency_check(bag, topic, cfg, camera=type_name.endswith("CompressedImage"))
                if r:
                    reasons.append(r)
    if ep.ptp_offset_ns is not None and abs(ep.ptp_offset_ns) / 1e6 > cfg.max_ptp_offset_ms:
        reasons.append(Reason(CLOCK_OFFSET, f"PTP offset {ep.ptp_offset_ns / 1e6:+.3f}ms beyond "
                              f"±{cfg.max_ptp_offset_ms:g}ms", {"ptp_offset_ns": ep.ptp_offset_ns}))
    if ep.outcome == "unset":
        reasons.append(Reason(OUTCOME_UNSET, "outcome was never set (success/failure)"))
    reasons += _interventions(bag)
    if bag.has(cfg.command_topic):
        js = bag.joint_state(cfg.command_topic)
        reasons += _dead_air(js.stamps_ns, js.position, cfg)
    return reasons


def validate_bag(job: tuple[str, ValidateConfig]) -> EpisodeReport:
    """One bag → its report; never raises for a bad bag (picklable, for parallel_map)."""
    path, cfg = job
    p = Path(path)
    try:
        bag = open_bag(p)
    except (BagReadError, OSError) as exc:
        return EpisodeReport(str(p), p.name, None, [Reason(CORRUPT, f"unreadable: {exc}")])
    try:
        reasons = check_bag(bag, cfg)
    except Exception as exc:  # a malformed message must not stop the batch: report it with the file
        reasons = [Reason(CORRUPT, f"{bag.mcap_path.name}: undecodable content: {type(exc).__name__}: {exc}")]
    span = None
    if bag.has(FOLLOWER_STATE):
        ps = bag.raw(FOLLOWER_STATE).publish_ns
        span = (int(ps[-1]) - int(ps[0])) / 1e9
    return EpisodeReport(str(p), bag.name, bag.episode_id, reasons, sorted(bag.camera_topics()), span)


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


def find_bags(paths: list[str | Path]) -> list[Path]:
    """Bag directories / .mcap files named, or found below the directories named (sorted, unique)."""
    out: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if not p.exists():
            raise FileNotFoundError(f"{p}: no such file or directory")
        if p.is_file():
            out.append(p)
        elif any(p.glob("*.mcap")):
            out.append(p)
        else:
            out += sorted({m.parent if m.parent != p else m for m in p.rglob("*.mcap")})
    return list(dict.fromkeys(out))


def validate_paths(paths: list[Path], cfg: ValidateConfig, workers: int | None = None,
                   executor: str = "local", desc: str | None = None) -> list[EpisodeReport]:
    reports = parallel_map(validate_bag, [(str(p), cfg) for p in paths], workers=workers, executor=executor,
                           desc=desc)
    apply_schema(reports, cfg.cameras)
    return reports


def _free(path: Path) -> Path:
    if not path.exists() and not path.with_name(path.name + ".json").exists():
        return path
    k = 1
    while path.with_name(f"{path.name}_{k}").exists() or path.with_name(f"{path.name}_{k}.json").exists():
        k += 1
    return path.with_name(f"{path.name}_{k}")


def quarantine(report: EpisodeReport, root: Path) -> Path:
    """Move a rejected bag to root/<first code>/<name> (+_k if taken) with <name>.json beside it."""
    src = Path(report.path)
    dest = _free(root / report.codes[0] / src.name)
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(str(src), str(dest))
    report.quarantined_to = str(dest)
    dest.with_name(dest.name + ".json").write_text(json.dumps(report.to_dict(), indent=2))
    return dest


def summary(reports: list[EpisodeReport]) -> dict[str, Any]:
    rejected = [r for r in reports if not r.passed]
    by_code = Counter(c for r in rejected for c in r.codes)
    return {"episodes": len(reports), "passed": len(reports) - len(rejected), "rejected": len(rejected),
            "rejection_rate": len(rejected) / len(reports) if reports else 0.0,
            "reasons": {c: by_code[c] for c in CODES if by_code[c]}}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", metavar="PATH", help="bag directories, .mcap files or folders of bags")
    parser.add_argument("--json", action="store_true", help="one JSON document instead of text lines")
    parser.add_argument("--quarantine", metavar="DIR", help="move rejected bags to DIR/<reason>/ (never deletes)")
    parser.add_argument("--config", metavar="FILE", help="thresholds YAML (default: the shipped config/validate.yaml)")
    add_arguments_to(parser)


def load_inputs(args: argparse.Namespace, command: str) -> tuple[ValidateConfig, list[Path]] | None:
    """Thresholds and bags for a CLI run (validate, convert); None after printing why it cannot run."""
    try:
        cfg = ValidateConfig.load(args.config)
        paths = find_bags(args.paths)
    except (ValueError, FileNotFoundError) as exc:
        print(f"{command}: {exc}", file=sys.stderr)
        return None
    if not paths:
        print(f"{command}: no bags found in {' '.join(args.paths)}", file=sys.stderr)
        return None
    return cfg, paths


def run(args: argparse.Namespace) -> int:
    inputs = load_inputs(args, "validate")
    if inputs is None:
        return 2
    cfg, paths = inputs
    reports = validate_paths(paths, cfg, args.workers, args.executor, None if args.json else "validate")
    if args.quarantine:
        for r in reports:
            if not r.passed:
                quarantine(r, Path(args.quarantine))
    s = summary(reports)
    if args.json:
        print(json.dumps({"episodes": [r.to_dict() for r in reports], "summary": s}, indent=2))
    else:
        for r in reports:
            print(r.line() + (f" -> {r.quarantined_to}" if r.quarantined_to else ""))
        breakdown = ", ".join(f"{c} {n}" for c, n in s["reasons"].items())
        print(f"{s['rejected']}/{s['episodes']} rejected ({100 * s['rejection_rate']:.1f} %)"
              + (f": {breakdown}" if breakdown else ""))
    if s["episodes"] and not s["rejected"]:
        print("WARNING: nothing was rejected. On a real recording session a 0 % rejection rate means the "
              "checks are not checking: look at the thresholds in config/validate.yaml.", file=sys.stderr)
    return 0
