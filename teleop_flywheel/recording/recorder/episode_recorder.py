"""One episode at a time into one bag, without ROS: what the recorder node records and how.

`EpisodeRecorder(RecorderConfig)` is the recorder node's logic; the node only takes messages off
DDS and serves parameters, services and status over it:

- `add_topic(name, type, offered_qos)` registers a stream (added to the open bag at once);
- `write(topic, cdr_bytes, info)` is the hot path: drops counted per publisher from publication
  sequence numbers, `log_time` = the DDS reception stamp, `publish_time` = the DDS source
  timestamp (both wall clock, as rosbag2 records them; the data engine reads time from the header
  stamps in the bytes, ROS time), intervention events and policy checkpoints picked up on the way;
  nothing is written between episodes, and a message stamped up to `BEFORE_START_NS` before the
  episode's start is not written into it either, however late it arrives (a starved camera
  delivering frames captured seconds earlier; the counts per stream are the metadata's
  `before_start`; an older stamp is another clock's or none, and is recorded for the validator to
  judge; the latched fault states have no header: the one in force opens each episode);
- `start(fields)` opens `<output_dir>/<episode_prefix>_<YYYYmmdd_HHMMSS>[_n]` (never an existing
  one) with the episode metadata known at start: operator fields, calibration documents, the first
  (monotonic, wall) clock sample, `stamp_clock: ros`, the rig's namespace, PTP/chrony offset
  (`ptp_offset_ns` if given, else the configured probe), and the task spec it records under
  (`RecorderConfig.task_spec`: its canonical content and id; its instruction is the task text
  unless the operator set another);
- `sample_clock()` (the node calls it every second) adds a (monotonic, wall) sample to the
  episode's `clock_samples` once a second, and warns when the system clock stepped since the last;
- `settle(stop_ns)` begins a stop: the streams live at `stop_ns` (≥ 10 Hz this episode, heard from
  within the last 250 ms, with a header) are awaited until each has delivered a message stamped at or
  after it (`settled()`), so a camera's frames captured before the stop but still in flight are
  kept rather than lost; that message is each one's last, so every stream ends at the stop however
  late its delivery (a state stream does not run on while a camera is awaited); the node takes
  messages until then (bounded) and calls `stop`;
- `stop(fields)` closes it with the final metadata: outcome (never defaulted: `unset`), attempts,
  failure label, machine check, the task spec's success predicate judged on the last follower
  state the episode recorded (`outcome_check`, with the operator's answer when the rig asked about
  a flag it disagrees with), interventions overlapping the episode (their times and the
  episode's `started_ros_ns`/`stopped_ros_ns` are ROS time), drops, checkpoints, the last clock
  sample and probe, teleop-mode correction spans beside the interventions; `discard(fields)` closes
  it the same way and moves it to `<output_dir>/discarded/` with a `verdict.json` saying so (never
  deletes); a write error (disk full) stops the episode and keeps the partial bag for
  `teleop-flywheel recover`.

Topic names are fully qualified (`add_topic` qualifies a relative name in `namespace`): a rig
under `namespace:=rig_a` records `/rig_a/leader/joint_states`, and the reader strips the
namespace the metadata names.


What the recorder is configured with and told about an episode: `RecorderConfig` (fixed for its
life), `EpisodeFields` (what the operator or session says), a recorded stream's counters
(`TopicEntry`) and the calibration documents copied into the metadata. Calibration files are
given as `ROLE=PATH` (stored under the role, e.g. `follower`) or a plain `PATH` (stored under the
file's stem, as bags did before roles).
"""
from __future__ import annotations

import contextlib
import json
import re
import shutil
import statistics
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from teleop_flywheel import __version__
from teleop_flywheel.core.clock import NS_PER_S, ClockMapping, clock_steps, now_ns, sample_mapping
from teleop_flywheel.core.episode import (
    BEFORE_START,
    CALIBRATION_ROLES,
    CAMERA_PUBLISHERS,
    STAMP_CLOCK_ROS,
    EpisodeMeta,
    Intervention,
)
from teleop_flywheel.core.labels import CORRECTION_KIND, span_kind
from teleop_flywheel.core.task_spec import TaskSpec
from teleop_flywheel.core.topics import (
    FOLLOWER_STATE,
    INTERVENTION,
    POLICY_COMMAND,
    STATE_TOPICS,
    camera_name,
    normalize_namespace,
    qualify,
    strip_namespace,
)
from teleop_flywheel.recording.errors import ClockProbeError, RecordingError
from teleop_flywheel.recording.mcap.cdr import (
    SequenceTracker,
    cdr_string,
    header_frame_id,
    header_stamp_ns,
    starts_with_header,
)
from teleop_flywheel.recording.mcap.exceptions import BagError, BagExistsError, BagWriteError, CdrError
from teleop_flywheel.recording.mcap.metadata import Qos
from teleop_flywheel.recording.mcap.msgdefs import normalize_type
from teleop_flywheel.recording.mcap.writer import BagWriter
from teleop_flywheel.recording.recorder import clock_probe, verdict
from teleop_flywheel.recording.recorder.spec_checks import live_checks, outcome_check, outcome_disagrees

LATENCY_WINDOW = 64  # a camera's last receive-minus-stamp latencies kept for the status
# A message stamped at most this long before an episode's start is a late delivery from the time before
# it (a starved camera's frames have come 2.4 s late): not the episode's. A stamp older still is on
# another clock, or none (0): recorded, for the validator to judge the stream's stamps.
BEFORE_START_NS = 10_000_000_000

SAFE_NAME = r"[A-Za-z0-9_.-]+"
OUTCOMES = ("", "success", "failure")  # "" = unset (stored as "unset")
Log = Callable[[str, str], None]  # (level "info" | "warning" | "error", message)


@dataclass(frozen=True)
class RecorderConfig:
    """Fixed for the recorder's life: where data goes and what is recorded."""

    output_dir: Path
    topics: tuple[str, ...] = ()
    cameras: tuple[str, ...] = ()
    episode_prefix: str = "episode"
    chunk_size_mb: float = 1.0
    max_chunk_age_s: float = 0.5
    fsync: bool = True
    calibration_files: tuple[str, ...] = ()
    ptp_probe: str = ""
    namespace: str = ""  # the rig's ROS namespace ("/rig_a"; "" = none): relative topics resolve in it
    task_spec: TaskSpec | None = None  # the task spec every episode is recorded under (`core/task_spec.py`)

    def __post_init__(self) -> None:
        if not re.fullmatch(SAFE_NAME, self.episode_prefix):
            raise ValueError(f"episode_prefix {self.episode_prefix!r} must be letters, digits, '-', '_' or '.'")
        clock_probe.check_probe(self.ptp_probe)
        object.__setattr__(self, "namespace", normalize_namespace(self.namespace))
        object.__setattr__(self, "topics", tuple(qualify(t, self.namespace) for t in self.topics))


@dataclass
class EpisodeFields:
    """What the operator or the session says about an episode (start: the first block; stop: all)."""

    task: str = ""
    operator: str = ""
    rig_id: str = ""
    robot_type: str = "so101_follower"
    session_kind: str = "teleop"
    policy_checkpoint: str = ""  # empty: the checkpoint ids seen on /policy/joint_command
    protocol_hash: str = ""
    condition: str = ""
    ptp_offset_ns: int | None = None  # measured elsewhere; None: ask the probe, if any
    outcome: str = ""  # success | failure; "" = unset
    attempts: int = 0  # 0 = unset
    failure_label: str = ""
    machine_check: str = ""
    outcome_answer: str = ""  # spec_checks.OUTCOME_ANSWERS


@dataclass
class TopicEntry:
    """One recorded stream and its counters (this episode; `window_count` since the last status)."""

    name: str
    type: str
    has_header: bool
    offered: list[Qos]
    tracker: SequenceTracker = field(default_factory=SequenceTracker)
    count: int = 0
    drops: int = 0
    window_count: int = 0
    camera: str | None = None  # the camera's name for a camera image stream
    last_recv_ns: int = 0  # wall clock: is the stream live at stop?
    state: bool = False  # a latched state topic (core.topics.STATE_TOPICS): its latest message opens each episode
    latest: tuple[bytes, int, int] | None = None  # a state topic's latest (data, source stamp, sequence number)
    latencies_ns: deque[int] = field(default_factory=lambda: deque(maxlen=LATENCY_WINDOW))  # receive − stamp
    publishers: list[str] = field(default_factory=list)  # a camera's publisher GIDs (hex) this episode, as first seen
    before_start: int = 0  # messages stamped before this episode's start, not written into it


def read_calibrations(files: Sequence[str]) -> dict[str, Any]:
    """{role or file stem: calibration document} of `ROLE=PATH` / `PATH` entries (empty ones skipped)."""
    out: dict[str, Any] = {}
    for entry in files:
        if not entry:
            continue
        role, sep, text = entry.partition("=")
        if not sep or role not in CALIBRATION_ROLES:
            role, text = "", entry
        path = Path(text).expanduser()
        try:
            out[role or path.stem] = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError) as exc:
            raise RecordingError(f"calibration file {path}: {exc}") from exc
    return out


__all__ = ["OUTCOMES", "SAFE_NAME", "EpisodeFields", "EpisodeRecorder", "Log", "RecorderConfig",
           "TopicEntry", "read_calibrations"]
CLOCK_SAMPLE_PERIOD_NS = NS_PER_S  # (monotonic, wall) samples through an episode, about this often
SETTLE_MIN_RATE_HZ = 10.0  # slower streams (diagnostics, the pedal's events) are not awaited at stop
SETTLE_LIVE_NS = 250_000_000  # nor one not heard from this long before the stop (a stalled camera)
FOLLOWER_STATES_KEPT = 400  # the follower's last states a pose is taken from (2 s at the drivers' 200 Hz)
LIVE_STATES = 40  # of those, the newest the console's live checks read (0.2 s)


class EpisodeRecorder:
    """Thread-safe: `write` runs on the taking thread, the rest wherever the caller is."""

    def __init__(self, config: RecorderConfig, log: Log | None = None) -> None:
        self.config = config
        self.topics: dict[str, TopicEntry] = {}
        self.last_saved = ""
        self.error = ""
        self._log = log or (lambda _level, _message: None)
        self._lock = threading.RLock()
        self._bag: BagWriter | None = None
        self._meta: EpisodeMeta | None = None
        self._intervention_topic = qualify(INTERVENTION, config.namespace)
        self._policy_topic = qualify(POLICY_COMMAND, config.namespace)
        self._follower_topic = qualify(FOLLOWER_STATE, config.namespace)
        # The follower's last states, recording or not (the console's view), and the last ones written into
        # this episode (judged at stop): a few seconds' worth, as a driver with a silent servo leaves it out.
        self._follower_seen: deque[bytes] = deque(maxlen=FOLLOWER_STATES_KEPT)
        self._follower_final: deque[bytes] = deque(maxlen=FOLLOWER_STATES_KEPT)
        self.last_outcome_check: dict[str, Any] = {}  # of the last episode stopped, with its name and flag
        self._interventions: dict[int, Intervention] = {}
        self._corrections: dict[int, Intervention] = {}
        self.last_ptp_offset_ns: int | None = None  # of the latest episode (status: the clock field)
        self.last_discarded: Path | None = None
        self._checkpoints: set[str] = set()
        self._status_window = now_ns()
        self._start_ns = 0  # the episode's start, ROS time: earlier stamps belong to no episode
        self._stop_ns = 0  # a stop's ROS time, while it settles
        self._awaited: set[str] = set()  # live streams that have not yet reached it
        self._ended: set[str] = set()  # those that have: nothing more of theirs is written

    @property
    def recording(self) -> bool:
        return self._bag is not None

    @property
    def bag_path(self) -> Path | None:
        bag = self._bag
        return bag.path if bag is not None else None

    # -- streams ----------------------------------------------------------------------------
    def add_topic(self, name: str, type_name: str, offered: Sequence[Qos]) -> TopicEntry:
        """Register a stream (a relative name is qualified in the namespace); DefinitionNotFoundError/
        ValueError if its type cannot be recorded here."""
        name, type_name = qualify(name, self.config.namespace), normalize_type(type_name)
        entry = TopicEntry(name, type_name, starts_with_header(type_name), list(offered),
                           camera=camera_name(strip_namespace(name, self.config.namespace)),
                           state=strip_namespace(name, self.config.namespace) in {qualify(t) for t in STATE_TOPICS})
        with self._lock:
            self.topics[name] = entry
            if self._bag is not None:
                self._bag.add_topic(name, type_name, qos=entry.offered)
        return entry

    def write(self, entry: TopicEntry, data: bytes, info: Mapping[str, Any]) -> None:
        """One received message: `info` as DDS gives it (publisher_gid, publication_sequence_number,
        source_timestamp and received_timestamp in wall-clock ns). log_time = received,
        publish_time = the source timestamp (rosbag2's meaning; the header stamp stays in the bytes)."""
        gid = info.get("publisher_gid") or {}
        lost = entry.tracker.add(bytes(gid.get("data", b"")), info.get("publication_sequence_number"))
        recv = int(info.get("received_timestamp") or time.time_ns())
        sent = int(info.get("source_timestamp") or recv)
        stamp: int | None = None  # the header stamp, read once; None: no header, or undecodable
        if entry.has_header:
            with contextlib.suppress(CdrError):
                stamp = header_stamp_ns(data)
        if entry.name == self._intervention_topic:
            try:
                self._on_intervention(cdr_string(data, 4))
            except (CdrError, ValueError) as exc:
                self._log("warning", f"{entry.name}: undecodable bytes ({exc}); recorded anyway")
        elif entry.camera is not None and stamp is not None:
            # receive − capture stamp (both wall clock / ROS time): the status's per-camera latency
            entry.latencies_ns.append(recv - stamp)
        entry.last_recv_ns = recv
        follower = entry.name == self._follower_topic
        if follower:
            self._follower_seen.append(data)
        if entry.state:
            entry.latest = (bytes(data), sent, info.get("publication_sequence_number") or 0)
        with self._lock:
            bag = self._bag
            if bag is None:
                return
            if entry.name in self._ended:
                return
            # undecodable: recorded, for the validator to reject, and nothing to wait for at a stop
            if stamp is not None and self._start_ns - BEFORE_START_NS <= stamp < self._start_ns:
                entry.before_start += 1
                return
            if entry.name in self._awaited and (stamp is None or stamp >= self._stop_ns):
                self._awaited.discard(entry.name)
                self._ended.add(entry.name)
            if entry.name == self._policy_topic and entry.has_header:
                with contextlib.suppress(CdrError):  # already warned about this message above if it was malformed
                    self._checkpoints.add(header_frame_id(data))
            entry.count += 1
            entry.window_count += 1
            entry.drops += lost
            if entry.camera is not None and gid.get("data") is not None:
                publisher = bytes(gid["data"]).hex()
                if publisher not in entry.publishers:
                    entry.publishers.append(publisher)
            try:
                bag.write(entry.name, data, recv, sent, info.get("publication_sequence_number") or 0)
                if follower:
                    self._follower_final.append(data)
            except BagWriteError as exc:
                self._fail(exc)
            except BagError:
                pass  # the bag closed between our check and the write (stop racing the taker)

    def _on_intervention(self, text: str) -> None:
        try:
            event = json.loads(text)
            kind = span_kind(event.get("kind"))  # absent: an intervention (events before corrections)
            iv = Intervention(int(event["id"]), int(event["start_ns"]),
                              None if event.get("end_ns") is None else int(event["end_ns"]), event.get("trigger"))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            self._log("warning", f"{self._intervention_topic}: bad event {text[:120]!r}: {exc}")
            return
        with self._lock:
            (self._corrections if kind == CORRECTION_KIND else self._interventions)[iv.id] = iv

    # -- episode lifecycle ------------------------------------------------------------------
    def _new_bag_dir(self) -> Path:
        out = self.config.output_dir.expanduser()
        base = f"{self.config.episode_prefix}_{time.strftime('%Y%m%d_%H%M%S')}"
        candidate, n = out / base, 1
        # Nor the name of an episode discarded (moved aside) a moment ago: /recorder/status and
        # verdict.json know an episode by its name.
        while candidate.exists() or (out / verdict.DISCARDED_DIR / candidate.name).exists():
            n += 1
            candidate = out / f"{base}_{n}"
        return candidate

    def _ptp(self, explicit: int | None, extra: dict[str, Any], key: str) -> int | None:
        if explicit is not None:
            return explicit
        if not self.config.ptp_probe:
            return None
        try:
            return clock_probe.probe(self.config.ptp_probe)
        except ClockProbeError as exc:
            extra[f"{key}_error"] = str(exc)
            self._log("warning", str(exc))
            return None

    def start(self, fields: EpisodeFields, ros_ns: int | None = None) -> str:
        """Open a new bag; returns its path. RecordingError with the reason. `ros_ns`: the start in
        ROS time when the graph runs on simulated time (header stamps are on it); else the wall clock's."""
        with self._lock:
            if self._bag is not None:
                raise RecordingError(f"already recording {self._bag.path}")
            first = sample_mapping()  # the episode's start: its monotonic and its ROS (wall) time
            extra: dict[str, Any] = {}
            cfg = self.config
            spec = cfg.task_spec
            meta = EpisodeMeta(
                # The spec's instruction is the task text unless the operator set another.
                episode_name="", task=fields.task or (spec.instruction if spec else ""), operator=fields.operator,
                rig_id=fields.rig_id, robot_type=fields.robot_type, session_kind=fields.session_kind,
                software_version=f"teleop_flywheel {__version__}", policy_checkpoint=fields.policy_checkpoint,
                calibration=read_calibrations(cfg.calibration_files), cameras=list(cfg.cameras),
                topics=list(cfg.topics), clock_start=first.to_dict(), clock_samples=[first.to_dict()],
                stamp_clock=STAMP_CLOCK_ROS, namespace=cfg.namespace,
                ptp_offset_ns=self._ptp(fields.ptp_offset_ns, extra, "ptp_probe"),
                protocol_hash=fields.protocol_hash, condition=fields.condition, extra=extra,
                started_mono_ns=first.mono_ns, started_ros_ns=first.wall_ns,
                task_spec=dict(spec.content) if spec else {}, task_spec_id=spec.id if spec else "")
            for _attempt in range(100):
                path = self._new_bag_dir()
                meta.episode_name = path.name
                try:
                    bag = BagWriter(path, episode=meta, chunk_size=int(cfg.chunk_size_mb * 2**20),
                                    max_chunk_age_s=cfg.max_chunk_age_s, fsync=cfg.fsync)
                    break
                except BagExistsError:
                    continue  # another recorder took the name between our check and mkdir
                except OSError as exc:
                    self.error = str(exc)
                    raise RecordingError(str(exc)) from exc
            else:
                raise RecordingError(f"no free episode name under {path.parent}")
            try:
                for entry in self.topics.values():
                    entry.count = entry.drops = entry.window_count = entry.before_start = 0
                    entry.publishers = []
                    bag.add_topic(entry.name, entry.type, qos=entry.offered)
                    if entry.latest is not None:  # the state in force as the episode begins
                        data, sent, seq = entry.latest
                        bag.write(entry.name, data, first.wall_ns, sent, seq)
                        entry.count = 1
            except OSError as exc:
                bag.abort()
                self.error = str(exc)
                raise RecordingError(str(exc)) from exc
            self._checkpoints = set()
            self._follower_final.clear()
            self._bag, self._meta, self.error = bag, meta, ""
            self._start_ns = first.wall_ns if ros_ns is None else ros_ns
            self.last_ptp_offset_ns = meta.ptp_offset_ns
        self._log("info", f"episode started: {path}")
        return str(path)

    def settle(self, stop_ns: int, wall_ns: int | None = None) -> list[str]:
        """Begin a stop at `stop_ns` (ROS time, what header stamps are on) and `wall_ns` (the wall
        clock DDS reception is on; the same unless the graph runs on simulated time): returns the
        live streams now awaited (see the module docstring); `settled()` says when each has
        delivered a message stamped at or after the stop."""
        wall = stop_ns if wall_ns is None else wall_ns
        with self._lock:
            meta = self._meta
            if self._bag is None or meta is None:
                raise RecordingError("not recording")
            elapsed_s = max(wall - meta.started_ros_ns, 1) / NS_PER_S
            self._stop_ns, self._ended = stop_ns, set()
            self._awaited = {e.name for e in self.topics.values()
                             if e.has_header and e.count / elapsed_s >= SETTLE_MIN_RATE_HZ
                             and wall - e.last_recv_ns <= SETTLE_LIVE_NS}
            return sorted(self._awaited)

    def settled(self) -> list[str]:
        """The streams still awaited since `settle` (empty: the stop can close the bag)."""
        with self._lock:
            return sorted(self._awaited)

    def sample_clock(self) -> None:
        """Add a (monotonic, wall) sample to the open episode if the last is a period old; a system
        clock step since the last sample is logged (the validator rejects the episode for it)."""
        with self._lock:
            meta = self._meta
            if self._bag is None or meta is None:
                return
            last = ClockMapping.from_dict(meta.clock_samples[-1])
            if now_ns() - last.mono_ns < CLOCK_SAMPLE_PERIOD_NS:
                return
            self._add_sample(meta, last)

    def _add_sample(self, meta: EpisodeMeta, last: ClockMapping) -> ClockMapping:
        sample = sample_mapping()
        meta.clock_samples.append(sample.to_dict())
        for step in clock_steps([last, sample]):
            self._log("warning", f"the system clock stepped {step.drift_ns / 1e6:+.1f} ms during episode "
                                 f"{meta.episode_name}: ROS-time stamps on both sides of it are on two timelines "
                                 "(the validator rejects the episode)")
        return sample

    def _final_meta(self, meta: EpisodeMeta, fields: EpisodeFields) -> EpisodeMeta:
        last = self._add_sample(meta, ClockMapping.from_dict(meta.clock_samples[-1]))
        started, stopped = meta.started_ros_ns, last.wall_ns  # ROS time, the clock of intervention events
        meta.stopped_mono_ns, meta.stopped_ros_ns = last.mono_ns, last.wall_ns
        meta.clock_end = last.to_dict()
        meta.outcome = fields.outcome or "unset"
        meta.attempts = fields.attempts or None
        meta.failure_label = fields.failure_label
        if fields.machine_check:
            meta.extra["machine_check"] = fields.machine_check
        meta.outcome_check = outcome_check(self.config.task_spec, list(self._follower_final), fields.outcome_answer)
        meta.drops = {t.name: t.drops for t in self.topics.values()}
        early = {t.name: t.before_start for t in self.topics.values() if t.before_start}
        if early:
            meta.extra[BEFORE_START] = early
        publishers = {t.camera: list(t.publishers) for t in self.topics.values() if t.camera and t.publishers}
        if publishers:
            meta.extra[CAMERA_PUBLISHERS] = publishers
        meta.interventions, meta.corrections = (sorted(
            (i for i in spans.values() if i.start_ns <= stopped and (i.end_ns is None or i.end_ns >= started)),
            key=lambda i: i.id) for spans in (self._interventions, self._corrections))
        if not meta.policy_checkpoint and self._checkpoints:
            meta.policy_checkpoint = ",".join(sorted(c for c in self._checkpoints if c))
        if self.config.ptp_probe:
            end = self._ptp(None, meta.extra, "ptp_probe_end")
            if end is not None:
                meta.extra["ptp_offset_end_ns"] = end
        return meta

    def spec_status(self) -> dict[str, Any]:
        """The task spec's live checks and the last episode's (`spec_checks.live_checks`)."""
        # The newest states only: with a servo silent, every status would otherwise decode all that are kept.
        return live_checks(self.config.task_spec, list(self._follower_seen)[-LIVE_STATES:], self.last_outcome_check)

    def _close(self, fields: EpisodeFields) -> tuple[Path, int, EpisodeMeta]:
        with self._lock:
            bag, meta = self._bag, self._meta
            if bag is None or meta is None:
                raise RecordingError("not recording")
            self._bag, self._awaited, self._ended = None, set(), set()
            final = self._final_meta(meta, fields)
        try:
            summary = bag.close(episode=final)
        except OSError as exc:
            bag.abort()
            self.error = str(exc)
            raise RecordingError(f"{exc} (partial bag kept for `teleop-flywheel recover`)") from exc
        return summary.path, summary.message_count, final

    def stop(self, fields: EpisodeFields) -> str:
        """Close the bag with the final metadata; returns a one-line summary (`last_saved` is the
        bag). Everything received before must have been written (the node drains its queues first)."""
        path, count, final = self._close(fields)
        self.last_saved = str(path)
        text = f"saved {path}: {count} messages, outcome {final.outcome}"
        if final.outcome_check:
            check = final.outcome_check
            self.last_outcome_check = {**check, "episode": path.name, "outcome": final.outcome,
                                       "disagrees": outcome_disagrees(final.outcome, check["passed"])}
            text += f"; the spec's success check: {'met' if check['passed'] else 'NOT met'} ({check['detail']})"
            if self.last_outcome_check["disagrees"]:
                text += f" — DISAGREES with the flag {final.outcome}"
        self._log("info", text)
        return text

    def discard(self, fields: EpisodeFields | None = None) -> str:
        """Close the episode as `stop` does, then move it to `<output_dir>/discarded/` (`last_discarded`)
        with a `verdict.json` that says it was discarded while recording (not validated): never deleted."""
        path, _count, final = self._close(fields or EpisodeFields())
        dest = verdict.move_to_discarded(path, self.config.output_dir)
        doc = verdict.verdict_doc(dest.name, None, error="discarded while recording: not validated",
                                  expected_cameras=list(self.config.cameras),
                                  stopped_wall_ns=final.stopped_ros_ns)
        doc["decision"], doc["discarded_to"] = {"action": verdict.DISCARD, "wall_ns": time.time_ns(),
                                                "by": "operator"}, str(dest)
        verdict.write_verdict(dest, doc)
        self.last_discarded = dest
        self._log("info", f"episode discarded: {path} moved to {dest}")
        return f"discarded {path.name}: moved to {dest}"

    def check_bag(self) -> None:
        """A write error the bag's flusher thread met (disk full) stops the episode now."""
        with self._lock:
            if self._bag is not None and self._bag.error is not None:
                self._fail(self._bag.error)

    def _fail(self, exc: OSError) -> None:
        """Disk full (or another write error): stop the episode, keep the partial bag, say where."""
        bag, self._bag = self._bag, None
        self.error = f"recording stopped: {exc}"
        self._log("error", self.error)
        if bag is not None:
            bag.abort()

    # -- status -----------------------------------------------------------------------------
    def status(self, wanted: Sequence[str] = (), unrecordable: Mapping[str, str] | None = None) -> dict[str, Any]:
        """State, episode, per-topic counts/drops/rates since the last status, disk space, last saved bag,
        the task spec's live checks (`spec_status`)."""
        now = now_ns()
        with self._lock:
            dt = max((now - self._status_window) / 1e9, 1e-9)
            self._status_window = now
            bag, meta = self._bag, self._meta
            topics, cameras = {}, {}
            for t in self.topics.values():
                topics[t.name] = {"type": t.type, "count": t.count, "drops": t.drops,
                                  "rate_hz": round(t.window_count / dt, 2)}
                t.window_count = 0
                if t.camera is not None and t.latencies_ns:
                    cameras[t.camera] = {"latency_ms": round(statistics.median(t.latencies_ns) / 1e6, 2)}
        out_dir = self.config.output_dir.expanduser()
        probe = out_dir if out_dir.exists() else out_dir.parent
        try:
            free: int | None = shutil.disk_usage(probe).free
        except OSError:
            free = None
        return {
            "state": "recording" if bag is not None else ("error" if self.error else "idle"),
            "episode": bag.name if bag is not None else "",
            "bag": str(bag.path) if bag is not None else "",
            "elapsed_s": round((now - meta.started_mono_ns) / 1e9, 3) if bag is not None and meta else 0.0,
            "messages": sum(t["count"] for t in topics.values()),
            "topics": topics,
            "missing_topics": [t for t in wanted if t not in self.topics],
            "unrecordable": dict(unrecordable or {}),
            "disk_free_bytes": free,
            "output_dir": str(out_dir),
            "last_saved": self.last_saved,
            "error": self.error,
            # receive − capture stamp per camera (median of the last frames; a proxy for the camera's
            # clock offset until the verdict's content-based estimate) and the episode's PTP offset
            "clock": {"cameras": cameras, "ptp_offset_ns": self.last_ptp_offset_ns},
            "task_spec": self.spec_status(),
        }
