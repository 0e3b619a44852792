"""One rig's session as Prometheus metrics, from the messages the session already publishes (no ROS).

The `metrics` node (ros/nodes/metrics.py) decodes messages to plain values and feeds them here;
`prometheus_client` does the exposition (`exposition()`, `MetricsServer`). Nothing here is sampled
from a node's internals: every figure is one the rig publishes anyway.

- `/diagnostics` of the rig's arm drivers: achieved and configured loop rate, ticks, overruns,
  read errors and each fast read's latency, counted per `hw.arm.health.READ_BUCKETS_MS` since the
  driver started — rebuilt here as a histogram; of its cameras: frames, frames dropped at the
  source, achieved fps; of its teleop node, once a second: the mode, so the seconds the policy
  drove are the time in policy mode less the takeovers (`rate(interventions) / rate(policy_seconds)`
  is disengagements per policy-second — `stats`' definition, from bags);
- the recorder's `~/status`: operator and task, recording or not, messages and drops per topic
  (per episode there; made monotonic here), the bag's size (the write rate the disk alert needs),
  each camera's receive − capture latency and content-estimated lag (the last verdict's, when its
  standard error is within `camera_lag_max_stderr_ms`), each episode's start and stop (episode and
  reset durations) and its verdict with reason codes and the operator's keep or discard;
- `teleop/intervention` events: takeovers (`kind` intervention: a policy segment ended by the
  human, a *disengagement*) and corrections, counted as they start, and each one's trigger label
  when it is first given; a takeover's start and end are taken out of the policy's seconds;
- `policy/joint_command`'s `header.frame_id`: the checkpoint.

Labels: `rig` on every metric; the session's `operator`, `task` and `checkpoint` on what a person
or a policy did (interventions, policy seconds, verdicts, episodes and their durations), as they
were when it happened, so last week's rate of a checkpoint is still there next week. Hardware
metrics carry `rig` (and `role`, `camera`, `topic`) only; `teleop_session_info` holds the current
operator, task and checkpoint for a join. Counters the rig reports as totals since a node started
(or, the recorder's, since an episode started) advance by their increase; a total that goes down
is a restart and counts from zero. Events already there when the exporter starts (a latched
history) are its baseline, never counted.
"""
from __future__ import annotations

import os
import shutil
import socket
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import HistogramMetricFamily
from prometheus_client.registry import Collector

from teleop_flywheel.core.episode import BREAK_S
from teleop_flywheel.core.labels import INTERVENTION_KIND, MODES, SPAN_KINDS, TRIGGER_LABELS
from teleop_flywheel.data.validate.reasons import CODES, ValidateConfig
from teleop_flywheel.hw.arm.health import READ_BUCKETS_MS, read_bucket_key

UNSET, NO_POLICY = "unset", "none"
SESSION_LABELS = ("rig", "operator", "task", "checkpoint")
VERDICTS = ("PASS", "FAIL", "not_validated")
# Teleop statuses come once a second: further apart than this (the node stopped, the exporter was
# starved), the time between them is not counted as the policy's.
STATUS_GAP_S = 2.5
EPISODE_BUCKETS_S = (5.0, 10.0, 20.0, 30.0, 45.0, 60.0, 90.0, 120.0, 180.0, 300.0, 600.0)
RESET_BUCKETS_S = (2.0, 5.0, 10.0, 15.0, 20.0, 30.0, 45.0, 60.0, 120.0, 300.0, BREAK_S)
NS = 1_000_000_000


def default_rig(namespace: str) -> str:
    """The rig label: the session's namespace (`/rig_a` → `rig_a`), else this host's name."""
    return namespace.strip("/").replace("/", "_") or socket.gethostname()


def _seconds(ns: float) -> float:
    return ns / NS


class _Totals:
    """Totals reported since some restart → increases of a counter that never goes down."""

    def __init__(self) -> None:
        self._last: dict[Any, float] = {}

    def increase(self, key: Any, total: float, baseline: bool = False) -> float:
        """What `total` adds since the last one of `key` (all of it after a restart; nothing the
        first time when `baseline`)."""
        last = self._last.get(key)
        self._last[key] = total
        if last is None:
            return 0.0 if baseline else total
        return total - last if total >= last else total

    def forget(self, kinds: tuple[str, ...]) -> None:
        """Start again from zero for every key whose first part is one of `kinds`."""
        for key in [k for k in self._last if k[0] in kinds]:
            del self._last[key]


class _BusLatency(Collector):
    """Each fast read's latency per arm as a histogram, rebuilt from the drivers' cumulative counts."""

    NAME = "teleop_bus_read_latency_seconds"

    def __init__(self, rig: str) -> None:
        self._rig = rig
        self._lock = threading.Lock()
        self._last: dict[str, tuple[list[float], float]] = {}  # role -> the driver's totals (buckets + reads, sum s)
        self._hist: dict[str, tuple[list[float], float]] = {}  # role -> what is exported, the same shape

    def feed(self, role: str, values: Mapping[str, str]) -> None:
        raw = [float(values[read_bucket_key(le)]) for le in READ_BUCKETS_MS] + [float(values["reads"])]
        raw_s = float(values["read_sum_ms"]) / 1e3
        with self._lock:
            last = self._last.get(role)
            self._last[role] = (raw, raw_s)
            if last is not None and raw[-1] >= last[0][-1]:
                raw, raw_s = [v - w for v, w in zip(raw, last[0], strict=True)], raw_s - last[1]
            # else: the first report, or the driver restarted (its counts went down): all of it is new
            counts, total_s = self._hist.get(role, ([0.0] * len(raw), 0.0))
            self._hist[role] = ([c + a for c, a in zip(counts, raw, strict=True)], total_s + raw_s)

    def collect(self) -> Iterable[HistogramMetricFamily]:
        family = HistogramMetricFamily(self.NAME, "Round trip of each fast sync read on an arm's bus (request to "
                                       "reply, as the host saw it)", labels=["rig", "role"])
        with self._lock:
            for role, (counts, total_s) in sorted(self._hist.items()):
                buckets = [(f"{le / 1e3:g}", counts[i]) for i, le in enumerate(READ_BUCKETS_MS)]
                family.add_metric([self._rig, role], [*buckets, ("+Inf", counts[-1])], total_s)
        yield family

    def describe(self) -> Iterable[HistogramMetricFamily]:
        return self.collect()


@dataclass
class _Episode:
    start_ns: int  # wall clock
    labels: tuple[str, str, str, str]


class SessionMetrics:
    """The metrics of one rig's session (see the module doc); thread-safe, one instance per rig."""

    def __init__(self, rig: str, output_dir: str | os.PathLike[str] = "", start_ns: int = 0,
                 lag_max_stderr_ms: float = ValidateConfig.camera_lag_max_stderr_ms) -> None:
        self.rig = rig
        self.registry = CollectorRegistry(auto_describe=True)
        self._lock = threading.Lock()
        self._start_ns = start_ns  # ROS time the exporter started: events before it are the baseline
        self._lag_max_stderr_ms = lag_max_stderr_ms
        self.operator = self.task = UNSET
        self.checkpoint = NO_POLICY
        self._totals = _Totals()
        self._spans: dict[tuple[str, int], str | None] = {}  # (kind, id) -> trigger
        self._takeovers: dict[int, tuple[int, int | None]] = {}  # id -> (start, end or None), ROS time
        self._mode: tuple[int, bool] | None = None  # (the teleop status's stamp, in policy mode)
        self._status_seen = False
        self._episode_name = ""  # the recorder's current (or last) episode
        self._episodes: dict[str, _Episode] = {}
        self._recording = ""
        self._last_stop_ns: int | None = None
        self._verdicts: dict[str, str | None] = {}  # episode -> decision seen
        r, session = self.registry, [*SESSION_LABELS]
        self.info = Gauge("teleop_session_info", "The session's current operator, task and checkpoint (always 1)",
                          session, registry=r)
        self.interventions = Counter("teleop_interventions", "Takeovers as they start: kind intervention = a policy "
                                     "segment ended by the human (a disengagement); correction = the pedal in "
                                     "teleop mode", [*session, "kind"], registry=r)
        self.triggers = Counter("teleop_intervention_triggers", "Interventions and corrections by the trigger label "
                                "the operator gave (counted when first given)", [*session, "kind", "trigger"],
                                registry=r)
        self.policy_seconds = Counter("teleop_policy_seconds", "Seconds the policy drove the follower (policy mode, "
                                      "no takeover running)", session, registry=r)
        self.verdicts = Counter("teleop_verdicts", "Episodes judged by the validator at stop, by verdict",
                                [*session, "verdict"], registry=r)
        self.reasons = Counter("teleop_verdict_reasons", "Reason codes of rejected episodes (one per code per episode)",
                               [*session, "code"], registry=r)
        self.kept = Counter("teleop_episodes_kept", "Episodes that passed the validator and were not discarded by "
                            "then", session, registry=r)
        self.discarded = Counter("teleop_episodes_discarded", "Episodes the operator discarded", session, registry=r)
        self.episode_s = Histogram("teleop_episode_duration_seconds", "Recorded length of each episode (start to "
                                   "stop)", session, buckets=EPISODE_BUCKETS_S, registry=r)
        self.reset_s = Histogram("teleop_reset_duration_seconds", f"Gap between an episode's stop and the next one's "
                                 f"start (the scene reset; gaps of {BREAK_S:g} s or more are breaks, not counted)",
                                 session, buckets=RESET_BUCKETS_S, registry=r)
        self.loop_hz = Gauge("teleop_driver_loop_rate_hz", "Achieved bus loop rate of an arm driver (Hz, over its "
                             "last 1000 ticks)", ["rig", "role"], registry=r)
        self.target_hz = Gauge("teleop_driver_target_rate_hz", "Configured bus loop rate of an arm driver (Hz)",
                               ["rig", "role"], registry=r)
        self.ticks = Counter("teleop_driver_ticks", "Bus loop ticks of an arm driver", ["rig", "role"], registry=r)
        self.overruns = Counter("teleop_driver_overruns", "Ticks that ended after the next one was due",
                                ["rig", "role"], registry=r)
        self.read_errors = Counter("teleop_driver_read_errors", "Bus transactions that failed (timeouts, bad "
                                   "checksums after retries)", ["rig", "role"], registry=r)
        self.bus = _BusLatency(rig)
        r.register(self.bus)
        self.camera_fps = Gauge("teleop_camera_fps", "Frames a camera delivered per second", ["rig", "camera"],
                                registry=r)
        self.camera_frames = Counter("teleop_camera_frames", "Frames a camera delivered", ["rig", "camera"],
                                     registry=r)
        self.camera_dropped = Counter("teleop_camera_dropped_frames", "Frames missing from a camera's stamps (a gap "
                                      "above 1.5 periods)", ["rig", "camera"], registry=r)
        self.camera_latency = Gauge("teleop_camera_latency_seconds", "Receive minus capture stamp of a camera's "
                                    "frames at the recorder (median of the last frames)", ["rig", "camera"],
                                    registry=r)
        self.camera_lag = Gauge("teleop_camera_lag_seconds", "A camera's lag behind the joints estimated from its "
                                "pixels (the last confident verdict; > 0: stamped late)", ["rig", "camera"],
                                registry=r)
        self.recording = Gauge("teleop_recorder_recording", "1 while an episode is being recorded", ["rig"],
                               registry=r)
        self.messages = Counter("teleop_recorder_messages", "Messages recorded", ["rig", "topic"], registry=r)
        self.drops = Counter("teleop_recorder_dropped_messages", "Messages lost before the recorder (gaps in the "
                             "publishers' sequence numbers)", ["rig", "topic"], registry=r)
        self.written = Counter("teleop_recorder_written_bytes", "Bytes of bags written", ["rig"], registry=r)
        self.disk_free = Gauge("teleop_disk_free_bytes", "Free space under the session's output directory",
                               ["rig"], registry=r)
        self._output_dir = Path(output_dir).expanduser() if output_dir else None
        self.disk_free.labels(rig).set_function(self._free_bytes)
        self.recording.labels(rig).set(0)
        self.written.labels(rig)
        self._session_changed()

    # -- labels ------------------------------------------------------------------------------
    def _labels(self) -> tuple[str, str, str, str]:
        return (self.rig, self.operator, self.task, self.checkpoint)

    def _session_changed(self) -> None:
        """Publish the current labels in `teleop_session_info`, and every series they name at zero,
        so the first event is an increase `rate()` sees, not a series appearing."""
        self.info.clear()
        labels = self._labels()
        self.info.labels(*labels).set(1)
        for kind in SPAN_KINDS:
            self.interventions.labels(*labels, kind)
            for trigger in TRIGGER_LABELS:
                self.triggers.labels(*labels, kind, trigger)
        for verdict in VERDICTS:
            self.verdicts.labels(*labels, verdict)
        for code in CODES:
            self.reasons.labels(*labels, code)
        for metric in (self.policy_seconds, self.kept, self.discarded, self.episode_s, self.reset_s):
            metric.labels(*labels)

    def _set_session(self, operator: str | None = None, task: str | None = None, checkpoint: str | None = None) -> None:
        new = (operator or UNSET if operator is not None else self.operator,
               task or UNSET if task is not None else self.task,
               checkpoint or NO_POLICY if checkpoint is not None else self.checkpoint)
        if new != (self.operator, self.task, self.checkpoint):
            self.operator, self.task, self.checkpoint = new
            self._session_changed()

    # -- inputs ------------------------------------------------------------------------------
    def on_checkpoint(self, checkpoint: str) -> None:
        """The checkpoint id a policy command carried."""
        with self._lock:
            self._set_session(checkpoint=checkpoint)

    def on_intervention(self, event: Mapping[str, Any]) -> None:
        """One `teleop/intervention` event (JSON: id, start_ns, end_ns, trigger, kind)."""
        kind = str(event.get("kind") or INTERVENTION_KIND)
        key = (kind, int(event["id"]))
        trigger = event.get("trigger")
        with self._lock:
            if kind == INTERVENTION_KIND:
                end = event.get("end_ns")
                self._takeovers[key[1]] = (int(event["start_ns"]), None if end is None else int(end))
            labels = self._labels()
            if key not in self._spans:
                self._spans[key] = None
                if int(event.get("start_ns") or 0) < self._start_ns:
                    self._spans[key] = trigger or ""  # before the exporter: the baseline, its label too
                    return
                self.interventions.labels(*labels, kind).inc()
            if trigger and self._spans[key] is None:
                self._spans[key] = str(trigger)
                self.triggers.labels(*labels, kind, str(trigger)).inc()

    def on_diagnostics(self, name: str, values: Mapping[str, str], stamp_ns: int = 0) -> None:
        """One DiagnosticStatus of this rig (name and key/values as published; `stamp_ns`: its
        DiagnosticArray's header stamp, ROS time)."""
        with self._lock:
            if name.startswith("camera/"):
                self._camera(name[len("camera/"):], values)
            elif "role" in values and "overruns" in values:
                self._driver(values)
            elif "mode" in values and "interventions" in values:
                self._teleop(values["mode"], stamp_ns)

    def _teleop(self, mode: str, stamp_ns: int) -> None:
        """The time since the last teleop status, if the policy drove then, less its takeovers."""
        last = self._mode
        self._mode = (stamp_ns, mode == MODES[1])
        if last is None or not last[1] or not 0 < stamp_ns - last[0] <= STATUS_GAP_S * NS:
            return
        a, b = last[0], stamp_ns
        taken = sum(max(0, min(b, end if end is not None else b) - max(a, start))
                    for start, end in self._takeovers.values())
        self.policy_seconds.labels(*self._labels()).inc(_seconds(max(b - a - taken, 0)))
        for key in [k for k, (_start, end) in self._takeovers.items() if end is not None and end < a]:
            del self._takeovers[key]  # over before anything still to be counted

    def _driver(self, v: Mapping[str, str]) -> None:
        role = v["role"]
        self.loop_hz.labels(self.rig, role).set(float(v["rate_hz"]))
        self.target_hz.labels(self.rig, role).set(float(v["target_rate_hz"]))
        for counter, key in ((self.ticks, "ticks"), (self.overruns, "overruns"), (self.read_errors, "read_errors")):
            counter.labels(self.rig, role).inc(self._totals.increase(("driver", role, key), float(v[key])))
        self.bus.feed(role, v)

    def _camera(self, camera: str, v: Mapping[str, str]) -> None:
        self.camera_fps.labels(self.rig, camera).set(float(v.get("rate_hz", 0.0)))
        for counter, key in ((self.camera_frames, "frames"), (self.camera_dropped, "dropped")):
            if key in v:
                counter.labels(self.rig, camera).inc(self._totals.increase(("camera", camera, key), float(v[key])))

    def on_recorder_status(self, status: Mapping[str, Any], wall_ns: int) -> None:
        """The recorder's `~/status` (JSON, decoded), received at `wall_ns` (system clock)."""
        with self._lock:
            baseline = not self._status_seen
            self._status_seen = True
            self._set_session(operator=str(status.get("operator") or ""), task=str(status.get("task") or ""))
            self._episode_edges(status, wall_ns)
            self._topic_counts(status, baseline)
            self._cameras_at_recorder(status)
            summaries = status.get("verdicts") or []
            for summary in summaries:
                self._verdict(summary, baseline)
            # the recorder lists its last episodes only: one that left the list never comes back
            listed = {str(v.get("episode") or "") for v in summaries} | {self._recording}
            self._verdicts = {k: v for k, v in self._verdicts.items() if k in listed}
            self._episodes = {k: v for k, v in self._episodes.items() if k in listed}

    def _episode_edges(self, s: Mapping[str, Any], wall_ns: int) -> None:
        name = str(s.get("episode") or "") if s.get("state") == "recording" else ""
        self.recording.labels(self.rig).set(1 if name else 0)
        if name and name != self._episode_name:  # a new episode: its per-episode counts start at 0
            self._episode_name = name
            self._totals.forget(("topic", "bag"))
        if name and name not in self._episodes:
            start = wall_ns - int(float(s.get("elapsed_s") or 0.0) * NS)
            self._episodes[name] = _Episode(start, self._labels())
            if self._last_stop_ns is not None and 0 <= start - self._last_stop_ns < BREAK_S * NS:
                self.reset_s.labels(*self._labels()).observe(_seconds(start - self._last_stop_ns))
        if self._recording and name != self._recording:  # the episode we saw recording has stopped
            ep = self._episodes.get(self._recording)
            if ep is not None:
                self.episode_s.labels(*ep.labels).observe(_seconds(max(wall_ns - ep.start_ns, 0)))
            self._last_stop_ns = wall_ns
        self._recording = name
        if name and s.get("bag"):
            size = _bag_bytes(Path(str(s["bag"])))
            self.written.labels(self.rig).inc(self._totals.increase(("bag", name), size))

    def _topic_counts(self, s: Mapping[str, Any], baseline: bool) -> None:
        for topic, t in (s.get("topics") or {}).items():
            for counter, key in ((self.messages, "count"), (self.drops, "drops")):
                counter.labels(self.rig, topic).inc(self._totals.increase(("topic", topic, key), float(t.get(key, 0)),
                                                                          baseline))

    def _cameras_at_recorder(self, s: Mapping[str, Any]) -> None:
        for camera, c in ((s.get("clock") or {}).get("cameras") or {}).items():
            if c.get("latency_ms") is not None:
                self.camera_latency.labels(self.rig, camera).set(float(c["latency_ms"]) / 1e3)
            lag = c.get("lag") or {}
            if lag.get("lag_ms") is not None and lag.get("stderr_ms") is not None \
                    and float(lag["stderr_ms"]) <= self._lag_max_stderr_ms:
                self.camera_lag.labels(self.rig, camera).set(float(lag["lag_ms"]) / 1e3)

    def _verdict(self, v: Mapping[str, Any], baseline: bool) -> None:
        name = str(v.get("episode") or "")
        if not name or v.get("status") == "pending":
            return
        ep = self._episodes.get(name)
        labels = ep.labels if ep is not None else self._labels()
        decision = v.get("decision")
        if name not in self._verdicts:
            self._verdicts[name] = decision
            if baseline:
                return
            verdict = v.get("verdict") or "not_validated"
            self.verdicts.labels(*labels, verdict).inc()
            for code in v.get("codes") or []:
                self.reasons.labels(*labels, str(code)).inc()
            if verdict == "PASS" and decision != "discard":
                self.kept.labels(*labels).inc()
        elif decision == self._verdicts[name]:
            return
        self._verdicts[name] = decision
        if decision == "discard" and not baseline:
            self.discarded.labels(*labels).inc()

    # -- outputs -----------------------------------------------------------------------------
    def _free_bytes(self) -> float:
        if self._output_dir is None:
            return float("nan")
        probe = self._output_dir
        while not probe.exists() and probe != probe.parent:
            probe = probe.parent  # not made yet: the disk it will be on
        try:
            return float(shutil.disk_usage(probe).free)
        except OSError:
            return float("nan")

    def exposition(self) -> bytes:
        """The text a scrape gets (Prometheus text format 0.0.4)."""
        with self._lock:
            return generate_latest(self.registry)

    def collector(self) -> Collector:
        """What an HTTP endpoint serves: the registry, collected under the model's lock."""
        return _Locked(self)


def _bag_bytes(bag: Path) -> int:
    try:
        return sum(entry.stat().st_size for entry in os.scandir(bag) if entry.is_file())
    except OSError:
        return 0


class _Locked(Collector):
    """The registry collected under the model's lock: a scrape never sees half an update."""

    def __init__(self, metrics: SessionMetrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterable[Any]:
        with self._metrics._lock:
            return list(self._metrics.registry.collect())
