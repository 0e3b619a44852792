"""`recorder` node: raw, source-stamped, crash-safe MCAP bags, one per episode.

Subscribes with `raw=True` to the configured topics (types discovered from the graph, QoS
matched to the publishers like rosbag2: reliable if every publisher is, transient-local if
every publisher is) and writes the received CDR bytes untouched through `BagWriter`:
log_time = DDS received_timestamp, publish_time = header.stamp read straight from the bytes
(messages without a header: the DDS source_timestamp mapped onto CLOCK_MONOTONIC with the
episode's clock mapping). Drops are counted per publisher from publication sequence numbers.

Lifecycle (std_srvs/Trigger): `~/start`, `~/stop`, `~/discard` (= `/recorder/start` … with the
default node name). Episode fields are parameters, set with the standard
`/recorder/set_parameters` service (or `ros2 param set /recorder outcome success`). The
outcome is never defaulted: stopped without one the bag says `unset`, and outcome, attempts,
failure_label and machine_check (an evaluation's automatic verdict, kept in the metadata's
`extra`) are cleared for the next episode. Status: `~/status` (std_msgs/String JSON,
latched) and `/diagnostics`. See docs/recording.md.
"""
from __future__ import annotations

import importlib
import json
import re
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from diagnostic_msgs.msg import DiagnosticArray
from rcl_interfaces.msg import ParameterDescriptor, SetParametersResult
from rclpy.impl.implementation_singleton import rclpy_implementation as _rclpy
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from rclpy.subscription import Subscription
from std_msgs.msg import String
from std_srvs.srv import Trigger

from teleop_flywheel import __version__
from teleop_flywheel.core.clock import ClockMapping, now_ns, sample_mapping
from teleop_flywheel.core.episode import EpisodeMeta, Intervention
from teleop_flywheel.core.topics import DIAGNOSTICS, INTERVENTION, POLICY_COMMAND, RECORDED, camera_image
from teleop_flywheel.recording import clock_probe, msgdefs
from teleop_flywheel.recording.cdr import (
    CdrError,
    SequenceTracker,
    cdr_string,
    header_frame_id,
    header_stamp_ns,
    starts_with_header,
)
from teleop_flywheel.recording.metadata import INFINITE_NS, Qos
from teleop_flywheel.recording.writer import BagError, BagExistsError, BagWriter, DiskFullError
from teleop_flywheel.ros.nodes.common import diag_array, diag_status, spin_node

DEFAULT_TOPICS = list(RECORDED)
LABEL_PARAMS = {"outcome": "", "attempts": 0, "failure_label": "", "machine_check": ""}  # cleared after every episode
OUTCOMES = ("", "success", "failure")
MAX_TEXT = 1000  # operator-set text parameters (task, operator, …)
_SAFE_NAME = re.compile(r"[A-Za-z0-9_.-]+")


def _qos_from_ros(profile: QoSProfile) -> Qos:
    """rclpy QoSProfile (as a publisher offers it) → our rosbag2-vocabulary Qos."""

    def ns(d: Any) -> int:
        return min(int(d.nanoseconds), INFINITE_NS)

    return Qos(history=profile.history.name.lower(), depth=int(profile.depth),
               reliability=profile.reliability.name.lower(), durability=profile.durability.name.lower(),
               deadline_ns=ns(profile.deadline), lifespan_ns=ns(profile.lifespan),
               liveliness=profile.liveliness.name.lower(),
               liveliness_lease_duration_ns=ns(profile.liveliness_lease_duration),
               avoid_ros_namespace_conventions=bool(profile.avoid_ros_namespace_conventions))


def _msg_class(type_name: str) -> type:
    pkg, kind, name = msgdefs.normalize_type(type_name).split("/")
    return getattr(importlib.import_module(f"{pkg}.{kind}"), name)


@dataclass
class _Topic:
    name: str
    type: str
    has_header: bool
    offered: list[Qos]
    tracker: SequenceTracker = field(default_factory=SequenceTracker)
    count: int = 0  # this episode
    drops: int = 0  # this episode
    window_count: int = 0  # since the last status


class RecorderNode(Node):
    def __init__(self, node_name: str = "recorder", **kwargs: Any) -> None:
        super().__init__(node_name, **kwargs)

        def param(name: str, default: Any, text: str, **extra: Any) -> Any:
            return self.declare_parameter(name, default, ParameterDescriptor(description=text, **extra)).value

        # Where data goes, which files are read and how the recorder runs are fixed at start
        # (read_only): any participant of the graph can call set_parameters.
        fixed = {"read_only": True}
        self._topics_wanted = list(param("topics", DEFAULT_TOPICS, "topics to record (types discovered)", **fixed))
        self._cameras = list(param("cameras", [""], "camera names; adds /cameras/<name>/image/compressed", **fixed))
        self._cameras = [c for c in self._cameras if c]
        camera_topics = [camera_image(c) for c in self._cameras]
        self._topics_wanted = list(dict.fromkeys(self._topics_wanted + camera_topics))  # unique, in order
        param("output_dir", "bags", "directory that receives one bag directory per episode", **fixed)
        prefix = str(param("episode_prefix", "episode", "bag names: <prefix>_<YYYYmmdd_HHMMSS>[_n]", **fixed))
        if not prefix or not _SAFE_NAME.fullmatch(prefix):
            raise ValueError(f"recorder: episode_prefix {prefix!r} must be letters, digits, '-', '_' or '.'")
        param("max_chunk_age_s", 0.5, "close a zstd chunk at least this often (crash loss bound)", **fixed)
        param("chunk_size_mb", 1.0, "close a chunk at this size", **fixed)
        param("fsync", True, "fsync after every chunk", **fixed)
        self._depth = int(param("queue_depth", 500, "subscription history depth (absorbs bursts)", **fixed))
        self._batch_s = float(param("take_batch_ms", 20.0, "after draining, let messages gather this long "
                                    "before waking again (0 = wake per message)", **fixed)) / 1e3
        self._clock_probe = clock_probe.check_probe(str(param(
            "ptp_probe", "", "clock offset probe, a fixed mechanism: 'pmc' (linuxptp pmc TIME_STATUS_NP), "
            "'chrony' (chronyc -c tracking) or empty for none", **fixed)))
        for name, default, text in (
            ("task", "", "task description"), ("operator", "", "who teleoperated"),
            ("rig_id", "", "rig / robot id"), ("robot_type", "so101_follower", "robot type"),
            ("session_kind", "teleop", "teleop | rollout | …"),
            ("outcome", "", "success | failure; empty = unset (cleared after every episode)"),
            ("failure_label", "", "why it failed (cleared after every episode)"),
            ("machine_check", "", "an automatic success check's verdict, stored beside the outcome (cleared after every episode)"),
            ("policy_checkpoint", "", "checkpoint id; empty = from /policy/joint_command frame_id"),
            ("protocol_hash", "", "data-collection protocol id"), ("condition", "", "experimental condition"),
        ):
            param(name, default, text)
        param("attempts", 0, "attempts until the outcome (graded success); 0 = unset (cleared after every episode)")
        param("ptp_offset_ns", "", "measured PTP/chrony offset in ns, if known (int); empty = not measured",
              dynamic_typing=True)
        param("calibration_files", [""], "calibration YAML files stored in the episode metadata", **fixed)
        self.add_on_set_parameters_callback(self._check_params)

        self._lock = threading.RLock()
        # Raw subscriptions live on a private node that no executor spins: one thread waits on
        # them and drains every ready queue (3–4× less CPU per message than executor dispatch).
        self._sub_node: Node | None = Node(f"{self.get_name()}_raw", namespace=self.get_namespace(), context=self.context,
                              start_parameter_services=False)
        self._subs: list[tuple[Subscription, _Topic]] = []
        self._stop = threading.Event()
        self._wake = threading.Event()  # cuts the batch pause short (a drain is wanted)
        self._passes = threading.Condition()
        self._passes_begun = self._passes_done = 0
        self._take_thread = threading.Thread(target=self._take_loop, name="recorder-take", daemon=True)
        self._topics: dict[str, _Topic] = {}
        self.unrecordable: dict[str, str] = {}  # topic → why (type not installed here)
        self._bag: BagWriter | None = None
        self._meta: EpisodeMeta | None = None
        self._mapping: ClockMapping = sample_mapping()
        self._interventions: dict[int, Intervention] = {}
        self._checkpoints: set[str] = set()
        self._error = ""
        self.last_saved = ""
        self._status_window = now_ns()

        self._status_pub = self.create_publisher(String, "~/status", QoSProfile(
            history=HistoryPolicy.KEEP_LAST, depth=1, reliability=ReliabilityPolicy.RELIABLE,
            durability=DurabilityPolicy.TRANSIENT_LOCAL))
        self._diag_pub = self.create_publisher(DiagnosticArray, DIAGNOSTICS, 10)
        self.create_service(Trigger, "~/start", self._srv_start)
        self.create_service(Trigger, "~/stop", self._srv_stop)
        self.create_service(Trigger, "~/discard", self._srv_discard)
        self.create_timer(float(param("discovery_period_s", 0.5, "graph discovery period", read_only=True)), self._discover)
        self.create_timer(float(param("status_period_s", 0.5, "status/diagnostics period", read_only=True)), self._publish_status)
        self._take_thread.start()
        self._discover()
        if bool(param("auto_start", False, "start an episode as soon as the node is up", read_only=True)):
            self.start_episode()

    # -- parameters ---------------------------------------------------------------------------

    def _check_params(self, params: list[Parameter]) -> SetParametersResult:
        for p in params:
            if isinstance(p.value, str) and (len(p.value) > MAX_TEXT or any(ord(c) < 32 for c in p.value)):
                return SetParametersResult(successful=False, reason=f"{p.name}: at most {MAX_TEXT} characters, "
                                           "no control characters")
            if p.name == "outcome" and p.value not in OUTCOMES:
                return SetParametersResult(successful=False, reason=f"outcome must be success or failure, not {p.value!r}")
            if p.name == "attempts" and (not isinstance(p.value, int) or p.value < 0):
                return SetParametersResult(successful=False, reason="attempts must be an integer >= 0")
            if p.name == "ptp_offset_ns" and p.value != "":
                try:
                    int(p.value)
                except (TypeError, ValueError):
                    return SetParametersResult(successful=False, reason="ptp_offset_ns must be an integer (ns) or empty")
        return SetParametersResult(successful=True)

    def _p(self, name: str) -> Any:
        return self.get_parameter(name).value

    # -- discovery and subscriptions ----------------------------------------------------------

    def _discover(self) -> None:
        missing = [t for t in self._topics_wanted if t not in self._topics and t not in self.unrecordable]
        if not missing:
            return
        graph = dict(self.get_topic_names_and_types())
        for topic in missing:
            types = graph.get(topic)
            if not types:
                continue
            if len(types) > 1:
                self.get_logger().warning(f"{topic} has several types {types}; recording {types[0]}")
            offered = [_qos_from_ros(e.qos_profile) for e in self.get_publishers_info_by_topic(topic)]
            if not offered:
                continue
            self._subscribe(topic, msgdefs.normalize_type(types[0]), offered)

    def _subscribe(self, topic: str, type_name: str, offered: list[Qos]) -> None:
        reliable = all(q.reliability == "reliable" for q in offered)
        latched = all(q.durability == "transient_local" for q in offered)
        qos = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=self._depth,
                         reliability=ReliabilityPolicy.RELIABLE if reliable else ReliabilityPolicy.BEST_EFFORT,
                         durability=DurabilityPolicy.TRANSIENT_LOCAL if latched else DurabilityPolicy.VOLATILE)
        try:
            msg_class = _msg_class(type_name)
            has_header = starts_with_header(type_name)
        except (ImportError, AttributeError, msgdefs.DefinitionNotFoundError) as exc:
            self.unrecordable[topic] = f"{type_name}: {exc}"  # said once, not retried every period
            self.get_logger().error(f"cannot record {topic} ({type_name}): {exc}")
            return
        entry = _Topic(topic, type_name, has_header, offered)
        with self._lock:
            self._topics[topic] = entry
            if self._bag is not None:
                self._add_to_bag(self._bag, entry)
        if self._sub_node is None:  # closed
            return
        sub = self._sub_node.create_subscription(msg_class, topic, lambda _d, _i: None, qos, raw=True)
        self._subs = self._subs + [(sub, entry)]
        self.get_logger().info(f"recording {topic} [{type_name}] {'reliable' if reliable else 'best_effort'}"
                               f"{' transient_local' if latched else ''}")

    def _add_to_bag(self, bag: BagWriter, entry: _Topic) -> None:
        bag.add_topic(entry.name, entry.type, qos=entry.offered)

    # -- the hot path -----------------------------------------------------------------------------

    def _take_loop(self) -> None:
        wait_set = None
        size = 0
        while not self._stop.is_set():
            subs = self._subs
            if not subs:
                self._stop.wait(0.05)
                continue
            try:
                if wait_set is None or size != len(subs):
                    wait_set, size = _rclpy.WaitSet(len(subs), 0, 0, 0, 0, 0, self.context.handle), len(subs)
                wait_set.clear_entities()
                for sub, _entry in subs:
                    wait_set.add_subscription(sub.handle)
                wait_set.wait(20_000_000)
                with self._passes:
                    self._passes_begun += 1
                    this_pass = self._passes_begun
                # Every queue, not only those the wait saw ready: a pass that begins after a drain
                # request then takes everything received before it (an empty take costs ~µs).
                for sub, entry in subs:
                    while (taken := sub.handle.take_message(sub.msg_type, True)) is not None:
                        self._on_message(entry, taken[0], taken[1])
                with self._passes:
                    self._passes_done = this_pass
                    self._passes.notify_all()
                # Waking costs more than taking: let a batch gather (the queues hold `queue_depth`;
                # log_time is DDS's reception stamp, so the delay changes no recorded time).
                self._wake.wait(self._batch_s)
                self._wake.clear()
            except Exception as exc:  # context shut down under us (process exit): stop quietly
                if self._stop.is_set() or not self.context.ok():
                    return
                self.get_logger().error(f"recorder take loop: {exc!r}")
                self._stop.wait(0.1)

    def _on_message(self, entry: _Topic, data: bytes, info: dict[str, Any]) -> None:
        gid = info.get("publisher_gid") or {}
        lost = entry.tracker.add(bytes(gid.get("data", b"")), info.get("publication_sequence_number"))
        recv = int(info.get("received_timestamp") or time.time_ns())
        try:
            if entry.has_header:
                stamp = header_stamp_ns(data)
            else:
                stamp = int(info.get("source_timestamp") or recv) - self._mapping.offset_ns
            if entry.name == INTERVENTION:
                self._on_intervention(cdr_string(data, 4))
        except (CdrError, ValueError) as exc:
            self.get_logger().warning(f"{entry.name}: undecodable bytes ({exc}); recorded anyway", throttle_duration_sec=5)
            stamp = recv - self._mapping.offset_ns
        with self._lock:
            bag = self._bag
            if bag is None:
                return
            if entry.name == POLICY_COMMAND and entry.has_header:
                try:
                    self._checkpoints.add(header_frame_id(data))
                except CdrError:
                    pass  # already warned about this message above if it was malformed
            entry.count += 1
            entry.window_count += 1
            entry.drops += lost
            try:
                bag.write(entry.name, data, recv, stamp, info.get("publication_sequence_number") or 0)
            except DiskFullError as exc:
                self._fail(exc)
            except BagError:
                pass  # the bag closed between our check and the write (stop racing a callback)

    def _on_intervention(self, text: str) -> None:
        try:
            event = json.loads(text)
            iv = Intervention(int(event["id"]), int(event["start_ns"]),
                              None if event.get("end_ns") is None else int(event["end_ns"]), event.get("trigger"))
        except (ValueError, KeyError, TypeError) as exc:
            self.get_logger().warning(f"{INTERVENTION}: bad event {text[:120]!r}: {exc}")
            return
        with self._lock:
            self._interventions[iv.id] = iv

    # -- episode lifecycle ------------------------------------------------------------------------

    def _new_bag_dir(self) -> Path:
        out = Path(str(self._p("output_dir"))).expanduser()
        base = f"{self._p('episode_prefix')}_{time.strftime('%Y%m%d_%H%M%S')}"
        candidate, n = out / base, 1
        while candidate.exists():
            n += 1
            candidate = out / f"{base}_{n}"
        return candidate

    def _calibration(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in self._p("calibration_files"):
            if not f:
                continue
            path = Path(f).expanduser()
            try:
                out[path.stem] = yaml.safe_load(path.read_text(encoding="utf-8"))
            except (OSError, yaml.YAMLError) as exc:
                raise ValueError(f"calibration file {path}: {exc}") from exc
        return out

    def _ptp(self, extra: dict[str, Any], key: str) -> int | None:
        explicit = self._p("ptp_offset_ns")
        if explicit not in ("", None):
            return int(explicit)
        if not self._clock_probe:
            return None
        try:
            return clock_probe.probe(self._clock_probe)
        except clock_probe.ClockProbeError as exc:
            extra[f"{key}_error"] = str(exc)
            self.get_logger().warning(str(exc))
            return None

    def start_episode(self) -> str:
        """Open a new bag; returns its path. Raises RuntimeError with the reason."""
        with self._lock:
            if self._bag is not None:
                raise RuntimeError(f"already recording {self._bag.path}")
            self._mapping = sample_mapping()
            extra: dict[str, Any] = {}
            meta = EpisodeMeta(
                episode_name="", task=str(self._p("task")), operator=str(self._p("operator")),
                rig_id=str(self._p("rig_id")), robot_type=str(self._p("robot_type")),
                session_kind=str(self._p("session_kind")), software_version=f"teleop_flywheel {__version__}",
                policy_checkpoint=str(self._p("policy_checkpoint")), calibration=self._calibration(),
                cameras=list(self._cameras), topics=list(self._topics_wanted),
                clock_start=self._mapping.to_dict(), ptp_offset_ns=self._ptp(extra, "ptp_probe"),
                protocol_hash=str(self._p("protocol_hash")), condition=str(self._p("condition")), extra=extra,
                started_mono_ns=now_ns())
            for _attempt in range(100):
                path = self._new_bag_dir()
                meta.episode_name = path.name
                try:
                    bag = BagWriter(path, episode=meta, chunk_size=int(float(self._p("chunk_size_mb")) * 2**20),
                                    max_chunk_age_s=float(self._p("max_chunk_age_s")), fsync=bool(self._p("fsync")))
                    break
                except BagExistsError:
                    continue  # another recorder took the name between our check and mkdir
                except OSError as exc:
                    self._error = str(exc)
                    raise RuntimeError(str(exc)) from exc
            else:
                raise RuntimeError(f"no free episode name under {path.parent}")
            try:
                for entry in self._topics.values():
                    entry.count = entry.drops = entry.window_count = 0
                    self._add_to_bag(bag, entry)
            except OSError as exc:
                bag.abort()
                self._error = str(exc)
                raise RuntimeError(str(exc)) from exc
            self._checkpoints = set()
            self._bag, self._meta, self._error = bag, meta, ""
            self.get_logger().info(f"episode started: {path}")
            return str(path)

    def _final_meta(self, meta: EpisodeMeta) -> EpisodeMeta:
        started, stopped = meta.started_mono_ns, now_ns()
        meta.stopped_mono_ns = stopped
        meta.clock_end = sample_mapping().to_dict()
        outcome = str(self._p("outcome"))
        meta.outcome = outcome or "unset"
        meta.attempts = int(self._p("attempts")) or None
        meta.failure_label = str(self._p("failure_label"))
        if self._p("machine_check"):
            meta.extra["machine_check"] = str(self._p("machine_check"))
        meta.drops = {t.name: t.drops for t in self._topics.values()}
        meta.interventions = sorted(
            (i for i in self._interventions.values()
             if i.start_ns <= stopped and (i.end_ns is None or i.end_ns >= started)), key=lambda i: i.id)
        if not meta.policy_checkpoint and self._checkpoints:
            meta.policy_checkpoint = ",".join(sorted(c for c in self._checkpoints if c))
        if self._clock_probe:
            end = self._ptp(meta.extra, "ptp_probe_end")
            if end is not None:
                meta.extra["ptp_offset_end_ns"] = end
        return meta

    def _clear_labels(self) -> None:
        self.set_parameters([Parameter(k, value=v) for k, v in LABEL_PARAMS.items()])

    def _drain(self, timeout_s: float = 1.0) -> bool:
        """Wait until the take thread has completed a pass that began after now, so everything
        received until now is in the bag (the end of an episode, the last intervention event)."""
        if not self._subs or not self._take_thread.is_alive():
            return True
        with self._passes:
            wanted = self._passes_begun + 1
        self._wake.set()
        with self._passes:
            return self._passes.wait_for(lambda: self._passes_done >= wanted, timeout_s)

    def stop_episode(self) -> str:
        """Take what has arrived, then close the bag with the final metadata; returns a summary."""
        if not self._drain():
            self.get_logger().warning("stop: the take thread did not drain within 1 s; the last messages may be missing")
        with self._lock:
            bag, meta = self._bag, self._meta
            if bag is None or meta is None:
                raise RuntimeError("not recording")
            self._bag = None
            final = self._final_meta(meta)
        try:
            summary = bag.close(episode=final)
        except OSError as exc:
            bag.abort()
            self._error = str(exc)
            raise RuntimeError(f"{exc} (partial bag kept for `teleop-flywheel recover`)") from exc
        finally:
            self._clear_labels()
        self.last_saved = str(summary.path)
        text = f"saved {summary.path}: {summary.message_count} messages, outcome {final.outcome}"
        self.get_logger().info(text)
        return text

    def discard_episode(self) -> str:
        """Abort the bag and delete its directory: nothing left behind."""
        with self._lock:
            bag = self._bag
            if bag is None:
                raise RuntimeError("not recording")
            self._bag = self._meta = None
        bag.abort()
        shutil.rmtree(bag.path, ignore_errors=False)
        self._clear_labels()
        self.get_logger().info(f"episode discarded: {bag.path}")
        return f"discarded {bag.path}"

    def _fail(self, exc: OSError) -> None:
        """Disk full (or other write error): stop the episode, keep the partial bag, say where."""
        bag = self._bag
        self._bag = None
        self._error = f"recording stopped: {exc}"
        self.get_logger().error(self._error)
        if bag is not None:
            bag.abort()

    def _trigger(self, action: Any, response: Trigger.Response) -> Trigger.Response:
        try:
            response.message = action()
            response.success = True
        except (RuntimeError, ValueError, OSError) as exc:
            response.success, response.message = False, str(exc)
        return response

    def _srv_start(self, _req: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        return self._trigger(self.start_episode, response)

    def _srv_stop(self, _req: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        return self._trigger(self.stop_episode, response)

    def _srv_discard(self, _req: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        return self._trigger(self.discard_episode, response)

    # -- status -----------------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        now = now_ns()
        dt = max((now - self._status_window) / 1e9, 1e-9)
        self._status_window = now
        with self._lock:
            bag, meta = self._bag, self._meta
            topics = {}
            for t in self._topics.values():
                topics[t.name] = {"type": t.type, "count": t.count, "drops": t.drops,
                                  "rate_hz": round(t.window_count / dt, 2)}
                t.window_count = 0
        out_dir = Path(str(self._p("output_dir"))).expanduser()
        probe = out_dir if out_dir.exists() else out_dir.parent
        try:
            free = shutil.disk_usage(probe).free
        except OSError:
            free = None
        return {
            "state": "recording" if bag is not None else ("error" if self._error else "idle"),
            "episode": bag.name if bag is not None else "",
            "bag": str(bag.path) if bag is not None else "",
            "elapsed_s": round((now - meta.started_mono_ns) / 1e9, 3) if bag is not None and meta else 0.0,
            "messages": sum(t["count"] for t in topics.values()),
            "topics": topics,
            "missing_topics": [t for t in self._topics_wanted if t not in self._topics],
            "unrecordable": dict(self.unrecordable),
            "disk_free_bytes": free,
            "output_dir": str(out_dir),
            "outcome": str(self._p("outcome")) or "unset",
            "task": str(self._p("task")),
            "operator": str(self._p("operator")),
            "last_saved": self.last_saved,
            "error": self._error,
        }

    def _publish_status(self) -> None:
        with self._lock:
            if self._bag is not None and self._bag.error is not None:  # failed in its flusher thread
                self._fail(self._bag.error)
        s = self.status()
        self._status_pub.publish(String(data=json.dumps(s)))
        drops = sum(t["drops"] for t in s["topics"].values())
        level = "ERROR" if s["error"] else ("WARN" if drops or s["missing_topics"] else "OK")
        text = s["error"] or f"{s['state']} {s['episode']}".strip()
        self._diag_pub.publish(diag_array([diag_status(
            "recorder", level, text,
            {"state": s["state"], "episode": s["episode"], "messages": s["messages"], "drops": drops,
             "missing_topics": ",".join(s["missing_topics"]), "disk_free_bytes": s["disk_free_bytes"]})]))

    def close(self) -> None:
        """Stop cleanly: an open episode is saved (outcome as set, else unset). Idempotent."""
        if self._bag is not None:  # while the take thread still runs, so it can drain
            try:
                self.stop_episode()
            except RuntimeError as exc:
                self.get_logger().error(str(exc))
        self._stop.set()
        self._wake.set()
        if self._take_thread.is_alive() and self._take_thread is not threading.current_thread():
            self._take_thread.join(timeout=5.0)
        if self._sub_node is not None:
            self._subs = []
            self._sub_node.destroy_node()
            self._sub_node = None


def main() -> int:
    return spin_node(RecorderNode)
