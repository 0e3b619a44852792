"""Every per-episode check of the validator on one opened bag (no ROS import; the batch-wide
camera-set check is in `validate.apply_schema`).

All times are header stamps read from the CDR (`Bag.stamps`, the decoded streams); MCAP
publish_time is never read. Receive times (log_time, wall clock) meet stamps only through the
episode's time base (`timebase.py`). The decode path is `decode.py`, the one `convert` uses.

Checks that read the episode's content rather than its stamps:

- **Camera lag** (`camera_lag.py`): each camera's frames against the follower's joint motion.
  A camera whose lag is beyond `camera_lag_max_ms` (default 15 ms) with 95 % confidence (one-sided:
  |lag| − bound > 1.645 standard errors), its standard error within `camera_lag_max_stderr_ms`, is
  CLOCK_OFFSET, the estimate and its 95 % interval in the detail; an estimate less certain than
  that is the warning CAMERA_LAG_UNKNOWN (too little motion to tell) — a third outcome, never a
  pass by default and never a rejection. An estimate past the bound but not surely so is left to
  the camera's session pool (`lag_pool.py`), which pools the episodes of one camera instance.
- **Tracking** (`tracking.py`): per joint, the follower's lag behind the command sent and the share
  of the episode during which the command's speed or acceleration outran the follower's, the
  gripper's grasp at its force limit left out. A share above `tracking_outrun_max_share` on any
  joint is FOLLOWER_OUTRUN (the seeds' "leader accelerations the follower cannot achieve"); a lag
  above `tracking_lag_max_ms` is the warning TRACKING_LAG.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from teleop_flywheel.core.bag_topics import AUTHORITY, FOLLOWER_FAULT, FOLLOWER_STATE, LEADER_FAULT, camera_image
from teleop_flywheel.core.episode import EXPORT_RECORD, EpisodeMeta
from teleop_flywheel.data.errors import DecodeError
from teleop_flywheel.data.validate import task_checks, timebase
from teleop_flywheel.data.validate.camera_lag import LagEstimate, beyond, estimate_lag
from teleop_flywheel.data.validate.decode import (
    COMPRESSED_IMAGE,
    JOINT_STATE,
    Decoded,
    decode_streams,
    episode_of,
    image_problems,
    metadata_problems,
    type_problems,
)
from teleop_flywheel.data.validate.lag_pool import camera_instances
from teleop_flywheel.data.validate.reasons import (
    CAMERA_LAG_UNKNOWN,
    CLOCK_OFFSET,
    CLOCK_STEP,
    CORRUPT,
    DEAD_AIR,
    DURATION_OUT_OF_RANGE,
    EXPORTED,
    FRAME_GAP,
    MISSING_STREAM,
    OUTCOME_UNSET,
    SERVO_FAULT,
    UNLABELLED_INTERVENTION,
    UNSAFE_NAME,
    Reason,
    Supplied,
    ValidateConfig,
)
from teleop_flywheel.data.validate.tracking import JointTracking, tracking, tracking_reasons
from teleop_flywheel.recording.mcap.exceptions import CdrError
from teleop_flywheel.recording.mcap.reader import Bag, ImageStream, Stream


def camera_lags(images: dict[str, ImageStream], energies: dict[str, np.ndarray], follower: Stream,
                cfg: ValidateConfig) -> tuple[dict[str, LagEstimate], list[Reason], list[Reason]]:
    """(estimate per camera, rejections, warnings)."""
    lags: dict[str, LagEstimate] = {}
    reasons: list[Reason] = []
    warnings: list[Reason] = []
    for cam, energy in sorted(energies.items()):
        est = estimate_lag(images[cam].stamps_ns, energy, follower.stamps_ns, follower.values,
                           cfg.camera_lag_search_ms, cfg.camera_lag_max_stderr_ms)
        lags[cam] = est
        numbers = {"camera": cam, **est.to_dict(), "bound_ms": cfg.camera_lag_max_ms}
        if not est.confident(cfg.camera_lag_max_stderr_ms):
            why = est.note or f"standard error {est.stderr_ms:.1f} ms > {cfg.camera_lag_max_stderr_ms:g} ms"
            warnings.append(Reason(CAMERA_LAG_UNKNOWN, f"camera {cam}: lag behind the joints not measurable "
                                   f"from the content ({why}; estimate {est})", numbers))
        elif beyond(est.lag_ms, est.stderr_ms, cfg.camera_lag_max_ms):
            low, high = est.interval() or (0.0, 0.0)
            how = "lags" if (est.lag_ms or 0.0) > 0 else "leads"
            reasons.append(Reason(CLOCK_OFFSET, f"camera {cam} {how} the joints by {abs(est.lag_ms or 0.0):.1f} ± "
                                  f"{est.stderr_ms:.1f} ms (95 % {low:+.0f}…{high:+.0f} ms, from its content) "
                                  f"> {cfg.camera_lag_max_ms:g} ms", numbers))
    return lags, reasons, warnings


FAULT_LEVEL = 2  # diagnostic_msgs/DiagnosticStatus.ERROR: an arm held for a servo fault (WARN: an e-stop)
# Streams whose receive-minus-stamp latency is checked. Not the pedal's Joy: its takeover is
# published only after the debounce window (30 ms) with the kernel's event time, by design.
STAMPED_TYPES = (JOINT_STATE, COMPRESSED_IMAGE)


@dataclass
class Inspection:
    """A bag as the validator saw it: reasons (rejections), warnings (a third outcome: never a
    rejection), the metadata used, the decoded streams (for convert), what the content says about
    its clocks (camera lag per camera, the follower's tracking lag per joint)."""

    reasons: list[Reason]
    episode: EpisodeMeta | None
    foreign: bool = False
    decoded: Decoded | None = None
    time_base: timebase.TimeBase | None = None
    span_s: float | None = None
    notes: list[str] = field(default_factory=list)
    warnings: list[Reason] = field(default_factory=list)
    camera_lag: dict[str, LagEstimate] = field(default_factory=dict)
    tracking: list[JointTracking] = field(default_factory=list)  # per joint, JOINT_NAMES order
    camera_instance: dict[str, str] = field(default_factory=dict)  # camera -> its instance id (`lag_pool`)
    task_spec_id: str | None = None  # the spec the episode was judged by (None: none)


def _gaps(name: str, stamps: np.ndarray, bound_s: float, t0: int, t1: int) -> Reason | None:
    """The largest silence of a stream over the episode [t0, t1] — between its messages, and also
    before its first and after its last: a camera that dies 3 s before the end is a 3 s gap (the
    converter would otherwise just end the episode early, without a word). Only silence inside
    [t0, t1] counts: a message stamped after the end (the leader's last feedback, published as it
    drops the feedback at the hold that ends a take) opens no gap back to the one before it."""
    if len(stamps) == 0:
        return None
    edges = np.clip(np.concatenate(([t0], stamps, [t1])), min(t0, t1), max(t0, t1))
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


def _latency(bag: Bag, topic: str, tb: timebase.TimeBase, cfg: ValidateConfig, camera: bool) -> Reason | None:
    """Median receive-minus-stamp latency, both on the wall clock (the time base's rule)."""
    raw = bag.raw(topic)
    if len(raw) < 2:
        return None
    latency_ms = (raw.log_ns.astype(np.float64) - bag.stamps(topic).astype(np.float64)) / 1e6  # both wall clock
    med = float(np.median(latency_ms))
    hi = cfg.max_camera_latency_ms if camera else cfg.max_joint_latency_ms
    if cfg.min_latency_ms <= med <= hi:
        return None
    why = "stamp ahead of its own arrival" if med < cfg.min_latency_ms else "stamp far behind arrival"
    return Reason(CLOCK_OFFSET, f"{topic} median receive-stamp latency {med:+.1f}ms outside "
                  f"[{cfg.min_latency_ms:g}, {hi:g}]ms ({why}; {tb.clock} stamps)",
                  {"stream": topic, "median_latency_ms": med, "min_ms": cfg.min_latency_ms, "max_ms": hi,
                   "stamp_clock": tb.clock})


def dead_runs(stamps: np.ndarray, cmd: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(first, last index, seconds) of every run of bit-identical consecutive commands."""
    bits = np.ascontiguousarray(cmd).view(np.uint8).reshape(len(cmd), -1)
    changed = np.any(bits[1:] != bits[:-1], axis=1)
    starts = np.concatenate(([0], np.flatnonzero(changed) + 1))
    ends = np.concatenate((starts[1:] - 1, [len(cmd) - 1]))
    return starts, ends, (stamps[ends] - stamps[starts]) / 1e9


def _dead_air(stamps: np.ndarray, cmd: np.ndarray, cfg: ValidateConfig) -> list[Reason]:
    """Runs of bit-identical consecutive commands, by duration: leading, trailing, internal."""
    if len(cmd) < 2:
        return []
    starts, ends, dur = dead_runs(stamps, cmd)
    out = []
    if dur[0] > cfg.max_leading_dead_s:
        out.append(Reason(DEAD_AIR, f"leading {dur[0]:.1f}s of identical commands > {cfg.max_leading_dead_s:g}s",
                          {"kind": "leading", "seconds": float(dur[0]), "bound_s": cfg.max_leading_dead_s}))
    if len(dur) > 1 and dur[-1] > cfg.max_trailing_dead_s:
        out.append(Reason(DEAD_AIR, f"trailing {dur[-1]:.1f}s of identical commands > {cfg.max_trailing_dead_s:g}s",
                          {"kind": "trailing", "seconds": float(dur[-1]), "bound_s": cfg.max_trailing_dead_s}))
    internal = np.flatnonzero(dur[1:-1] > cfg.max_internal_dead_s) + 1
    if len(internal):
        i = int(internal[np.argmax(dur[internal])])
        out.append(
            Reason(
                DEAD_AIR,
                f"{dur[i]:.1f}s of identical commands at t={(stamps[starts[i]] - stamps[0]) / 1e9:.1f}s"
                f" > {cfg.max_internal_dead_s:g}s ({len(internal)} stretch(es))",
                {
                    "kind": "internal",
                    "seconds": float(dur[i]),
                    "at_s": (stamps[starts[i]] - stamps[0]) / 1e9,
                    "stretches": len(internal),
                    "bound_s": cfg.max_internal_dead_s,
                },
            )
        )
    return out


def _interventions(ep: EpisodeMeta, authority: np.ndarray | None) -> list[Reason]:
    out = [Reason(UNLABELLED_INTERVENTION, f"intervention {i.id} has no trigger label in the metadata",
                  {"intervention_id": i.id}) for i in ep.unlabelled_interventions]
    out += [Reason(UNLABELLED_INTERVENTION, f"correction {c.id} (teleop mode) has no trigger label in the metadata",
                   {"correction_id": c.id}) for c in ep.unlabelled_corrections]
    known = {i.id for i in ep.interventions}
    if authority is not None and len(authority):
        ids, trig = authority[:, 1], authority[:, 2]
        for iid in np.unique(ids[ids > 0]).astype(int):
            if iid not in known and not np.any(trig[ids == iid] > 0):
                out.append(
                    Reason(
                        UNLABELLED_INTERVENTION,
                        f"intervention {iid} on {AUTHORITY} never got a trigger label",
                        {"intervention_id": int(iid)},
                    )
                )
    return out


def _servo_faults(bag: Bag) -> list[Reason]:
    """An arm held for a servo fault during the episode (its `<role>/fault` at ERROR, the latched one
    it started with included): a joint hung limp or the arm froze, so it demonstrates nothing."""
    out = []
    for topic in (LEADER_FAULT, FOLLOWER_FAULT):
        if topic not in bag.topics:
            continue
        try:
            faults = [s.message for s in bag.decode(topic) if s.level == FAULT_LEVEL]
        except Exception as exc:  # noqa: BLE001 - whatever rosbags raises on bytes that are not the type
            out.append(Reason(CORRUPT, f"{topic}: undecodable ({exc})", {"stream": topic}))
            continue
        if faults:
            out.append(
                Reason(
                    SERVO_FAULT,
                    f"{topic}: {faults[0]}" + (f" (+{len(faults) - 1} more)" if faults[1:] else ""),
                    {"stream": topic, "faults": faults},
                )
            )
    return out


def _missing(bag: Bag, ep: EpisodeMeta, cfg: ValidateConfig) -> list[Reason]:
    cameras = bag.camera_topics()
    expected = list(cfg.required_topics) + [t for t in ep.topics if isinstance(t, str) and t not in cfg.required_topics]
    for cam in ep.cameras:
        if isinstance(cam, str) and cam not in cameras and camera_image(cam) not in expected:
            expected.append(camera_image(cam))
    out = []
    for topic in expected:
        n = len(bag.raw(topic)) if topic in bag.topics else 0
        if topic.endswith("/intervention") and ep.interventions:
            needed = 1  # the events the recorded interventions came from
        elif topic in cfg.event_topics:
            continue  # published only when something happens (a pedal press): no message is no fault
        else:
            needed = cfg.min_messages
        if n < needed:
            out.append(
                Reason(MISSING_STREAM, f"{topic} has {n} messages (< {needed})", {"stream": topic, "messages": n})
            )
    return out


def _rates(bag: Bag, span_s: float, cfg: ValidateConfig) -> list[Reason]:
    """MISSING_STREAM for a recorded stream whose mean rate over the episode's span is below its
    `min_rate_hz` (a stream with no message at all is `_missing`'s)."""
    out = []
    for topic, rate in sorted(cfg.min_rate_hz.items()):
        n = len(bag.raw(topic)) if topic in bag.topics else 0
        if n and span_s > 0 and n / span_s < rate:
            out.append(Reason(MISSING_STREAM, f"{topic} at {n / span_s:.1f} Hz (< {rate:g} Hz over {span_s:.1f}s)",
                              {"stream": topic, "messages": n, "rate_hz": n / span_s, "min_rate_hz": rate}))
    return out


def _stream_stamps(bag: Bag, decoded: Decoded | None) -> dict[str, np.ndarray]:
    """Sorted header stamps of every stream the gap check may look at."""
    out: dict[str, np.ndarray] = {}
    if decoded is not None:
        for s in (decoded.follower, decoded.command, decoded.leader, decoded.policy, decoded.authority):
            if s is not None:
                out[s.name] = s.stamps_ns
        for im in decoded.images.values():
            out[im.name] = im.stamps_ns
    for topic, type_name in bag.topics.items():
        if topic not in out and type_name in STAMPED_TYPES and bag.has(topic):
            out[topic] = np.sort(bag.stamps(topic), kind="stable")
    return out


def _timing(bag: Bag, ep: EpisodeMeta, foreign: bool, decoded: Decoded | None, cfg: ValidateConfig,
            ins: Inspection) -> list[Reason]:
    """FRAME_GAP, DURATION_OUT_OF_RANGE, CLOCK_OFFSET and CLOCK_STEP, all on header stamps."""
    out: list[Reason] = []
    stamps = _stream_stamps(bag, decoded)
    state = stamps.get(cfg.required_topics[0] if cfg.required_topics else FOLLOWER_STATE)
    gap_topics = list(cfg.required_topics) + list(cfg.gap_topics_extra) + list(bag.camera_topics().values())
    for topic in dict.fromkeys(t for t in gap_topics if t in stamps and len(stamps[t])):
        s = stamps[topic]
        if state is None or not len(state):
            r = _gaps(topic, s, cfg.gap_bound_s, int(s[0]), int(s[-1]))
        else:
            # The stream's end is the state's last stamp less how much later than the state this stream
            # arrives (a camera's pipeline latency: its last frames were still in flight at stop). Both
            # medians are receive − stamp on the same pair of clocks, so the clocks cancel.
            state_topic = cfg.required_topics[0]
            extra = int(np.median(bag.raw(topic).log_ns - bag.stamps(topic))
                        - np.median(bag.raw(state_topic).log_ns - bag.stamps(state_topic)))
            r = _gaps(topic, s, cfg.gap_bound_s, int(state[0]), int(state[-1]) - max(0, extra))
        if r:
            out.append(r)
    if state is not None and len(state):
        ins.span_s = span = (int(state[-1]) - int(state[0])) / 1e9
        if not cfg.min_duration_s <= span <= cfg.max_duration_s:
            out.append(Reason(DURATION_OUT_OF_RANGE, f"{span:.1f}s outside [{cfg.min_duration_s:g}, "
                              f"{cfg.max_duration_s:g}]s", {"seconds": span}))
        out += _rates(bag, span, cfg)
    ref = next((t for t in [cfg.required_topics[0] if cfg.required_topics else FOLLOWER_STATE, *sorted(stamps)]
                if t in stamps and bag.has(t)), None)
    tb = timebase.time_base(None if foreign else ep, bag.raw(ref).log_ns if ref else np.zeros(0),
                            bag.stamps(ref) if ref else np.zeros(0))
    ins.time_base = tb
    if not tb.verifiable:
        out.append(Reason(CLOCK_OFFSET, f"stamps unverifiable: {tb.why}", {"stamp_clock": tb.clock}))
    else:
        for topic, type_name in sorted(bag.topics.items()):
            if type_name in STAMPED_TYPES and bag.has(topic):
                r = _latency(bag, topic, tb, cfg, camera=type_name == COMPRESSED_IMAGE)
                if r:
                    out.append(r)
    for step in timebase.steps(None if foreign else ep):
        at = (step.at_mono_ns - (ep.started_mono_ns or step.at_mono_ns)) / 1e9
        out.append(Reason(CLOCK_STEP, f"system clock stepped {step.drift_ns / 1e6:+.1f}ms during the episode "
                          f"(sample at t={at:.1f}s; slewing allows {step.bound_ns / 1e6:.1f}ms): stamps and receive "
                          "times on the two sides of it are on two timelines",
                          {"drift_ns": step.drift_ns, "bound_ns": step.bound_ns, "at_mono_ns": step.at_mono_ns}))
    for name, n in sorted((decoded.backwards if decoded else {}).items()):
        out.append(Reason(CLOCK_STEP, f"{name} header stamps go backwards {n} time(s)", {"stream": name, "times": n}))
    if ep.ptp_offset_ns is not None and abs(ep.ptp_offset_ns) / 1e6 > cfg.max_ptp_offset_ms:
        out.append(Reason(CLOCK_OFFSET, f"PTP offset {ep.ptp_offset_ns / 1e6:+.3f}ms beyond "
                          f"±{cfg.max_ptp_offset_ms:g}ms", {"ptp_offset_ns": ep.ptp_offset_ns}))
    return out


def inspect_bag(bag: Bag, cfg: ValidateConfig, supplied: Supplied | None = None, images: bool = True) -> Inspection:
    """Every per-episode check on an opened bag; `images=False` skips decoding every JPEG (convert
    decodes the ones it uses itself)."""
    reasons = [Reason(d.code, f"{bag.mcap_path.name}: {d.detail}", {"file": d.file} | ({"field": d.field} if d.field
                                                                                      else {})) for d in bag.damage]
    if any(d.code == UNSAFE_NAME for d in bag.damage):
        return Inspection(reasons, None)  # no check reads a name that could be read as a path
    try:
        ep, foreign = episode_of(bag, supplied)
    except DecodeError as exc:
        reasons.append(Reason(exc.code, str(exc)))
        return Inspection(reasons, bag.episode)
    ins = Inspection(reasons, ep, foreign)
    reasons += type_problems(bag) + ([] if foreign else metadata_problems(ep))
    if any(r.detail.startswith("episode metadata") for r in reasons):
        return ins  # the metadata is not what the checks below read
    spec, spec_problems = task_checks.spec_of(ep, supplied, bag.name)
    reasons += spec_problems
    cfg = task_checks.spec_config(cfg, spec)
    ins.task_spec_id = spec.id if spec is not None else None
    reasons += _missing(bag, ep, cfg)
    try:
        ins.decoded = decode_streams(bag)
    except DecodeError as exc:
        if not any(r.code == exc.code and r.detail.startswith(str(exc).split(" ")[0]) for r in reasons):
            reasons.append(Reason(exc.code, str(exc)))
    energies: dict[str, np.ndarray] = {}
    if ins.decoded is not None and images:
        reasons += image_problems(ins.decoded.images, energies)
    try:
        reasons += _timing(bag, ep, foreign, ins.decoded, cfg, ins)
    except CdrError as exc:  # a stamped payload too short for its header
        reasons.append(Reason(CORRUPT, f"{bag.mcap_path.name}: undecodable header stamp: {exc}"))
    if ep.outcome == "unset":
        reasons.append(Reason(OUTCOME_UNSET, "outcome was never set (success/failure)" if not foreign else
                              "no episode metadata and no --outcome given"))
    reasons += task_checks.ptp_drift(ep, cfg)
    reasons += _interventions(ep, ins.decoded.authority.values if ins.decoded and ins.decoded.authority else None)
    reasons += _servo_faults(bag)
    if ins.decoded is not None and cfg.command_topic == ins.decoded.command.name:
        reasons += _dead_air(ins.decoded.command.stamps_ns, ins.decoded.command.values, cfg)
    if ins.decoded is not None:
        ins.camera_lag, lag_reasons, ins.warnings = camera_lags(ins.decoded.images, energies, ins.decoded.follower, cfg)
        ins.camera_instance = camera_instances(ins.decoded.images, None if foreign else ep)
        reasons += lag_reasons
        ins.tracking = tracking(ins.decoded.command, ins.decoded.follower, ins.decoded.effort)
        outrun, lagging = tracking_reasons(ins.tracking, cfg)
        reasons += outrun
        ins.warnings += lagging
    if spec is not None:
        poses = ins.decoded.follower.values if ins.decoded is not None and len(ins.decoded.follower.values) else None
        rejected, kept = task_checks.outcome_reasons(ep, spec, None if poses is None else poses[-1], cfg, foreign)
        reasons += rejected
        ins.warnings += kept + task_checks.start_warnings(spec, None if poses is None else poses[0])
    if EXPORT_RECORD in bag.mcap_metadata:
        ins.warnings.append(exported_warning(bag.mcap_metadata[EXPORT_RECORD]))
    return ins


def exported_warning(record: dict[str, str]) -> Reason:
    """What cannot be checked in a bag exported from a dataset: a dataset keeps header stamps on its
    fps grid, not receive times (the bag's log times are its stamps), clock samples or PTP offsets."""
    source = record.get("source_dataset", "a dataset")
    return Reason(EXPORTED, f"exported from {source} (episode {record.get('source_episode_index', '?')}): "
                  "its receive times are its header stamps and it has no clock samples or PTP offset, so "
                  "CLOCK_OFFSET's receive latency, CLOCK_STEP and the PTP checks had nothing to check",
                  {"source_dataset": source, "source_episode_id": record.get("episode_id", "")})


def check_bag(bag: Bag, cfg: ValidateConfig, supplied: Supplied | None = None) -> list[Reason]:
    """The reasons an episode fails (empty: it passes), batch-wide checks aside."""
    return inspect_bag(bag, cfg, supplied).reasons
