"""`recorder` node: raw, source-stamped, crash-safe MCAP bags, one per episode.

A thin node over `recording.episode_recorder.EpisodeRecorder` (bag naming, metadata,
interventions, checkpoints, drops, calibration, clock probe — no ROS). Here: subscriptions with
`raw=True` to the configured topics (types discovered from the graph, QoS matched to the
publishers like rosbag2: reliable if every publisher is, transient-local if every publisher is),
one thread that takes the received CDR bytes off every queue and hands them over untouched,
parameters, services and status.

Topics are given relative (`leader/joint_states`, the default set) or absolute (`/diagnostics`) and
resolved in this node's namespace: a rig under `namespace:=rig_a` records `/rig_a/…`, and the
episode metadata names the namespace (the data engine strips it). Times: `log_time` = DDS
reception, `publish_time` = DDS source timestamp (rosbag2's), header stamps (ROS time) untouched
in the bytes; (monotonic, wall) clock samples about once a second go into the episode's
`clock_samples`, with `stamp_clock: ros`.

Lifecycle (std_srvs/Trigger): `~/start`, `~/stop`, `~/discard`, `~/keep` (= `/recorder/start` … with
the default node name). At every stop the bag is validated at once — the checks and thresholds of
`teleop-flywheel validate`, the camera set against this session's `cameras` — by a worker process
(`recorder_verdict`), so the next episode is never delayed. A stop first waits (at most
`stop_settle_ms`) until every live stream has delivered a message stamped after it: a camera's
frames captured before the stop but still in flight are kept, not silently cut, and every live
stream ends at the stop instant; the verdict goes to `<bag>/verdict.json`,
`~/status` (`verdict`, `verdicts`) and the log. `~/discard` moves the episode being recorded, or the
last one stopped, to `<output_dir>/discarded/` (never deletes) and marks its verdict.json; `~/keep`
marks the last one stopped as kept (what `ingest` waits for, besides a grace period).

What is said about one episode — outcome, attempts, failure_label, machine_check (an evaluation's
automatic verdict, kept in the metadata's `extra`), outcome_answer (asked at the rig about a flag
the task spec's success predicate disagrees with: `kept` or `changed`) — goes to `~/label_episode`
(rcl_interfaces/SetParameters: named values, each accepted or refused with its reason), is stored
at stop and cleared for the next episode. These are messages about an episode, not node
configuration, so they are not parameters. The outcome is never defaulted: stopped without one the
bag says `unset`. The session's episode fields (task, operator, condition, …) are parameters,
changeable at run time; the task spec (`task_spec`: its content, never a path, read-only) is in
every episode's metadata with its id, and `~/status` carries its live checks (`task_spec`: the
follower's pose against the start region and the success predicate; the last episode's check at
stop beside its flag); operator text is at most 1000 characters without control characters.
Everything that decides where data goes, which files are read or what runs
(output_dir, episode_prefix, topics, cameras, calibration_files, ptp_probe, the take loop's
settings) is read-only: any participant of the graph can call set_parameters. Status: `~/status`
(std_msgs/String JSON, latched; `last_saved` is the last bag saved) and `/diagnostics`. See
docs/recording.md.
"""
from __future__ import annotations

import json
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from diagnostic_msgs.msg import DiagnosticArray
from rcl_interfaces.msg import SetParametersResult
from rcl_interfaces.srv import SetParameters
from rclpy.clock import ROSClock
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from rclpy.subscription import Subscription
from std_msgs.msg import String
from std_srvs.srv import Trigger

from teleop_flywheel.core.errors import TaskSpecError
from teleop_flywheel.core.names import IDENTIFIER_PATTERN
from teleop_flywheel.core.task_spec import TaskSpec, parse_task_spec
from teleop_flywheel.core.topics import DIAGNOSTICS, RECORDED, camera_image
from teleop_flywheel.recording.errors import RecordingError
from teleop_flywheel.recording.mcap import msgdefs
from teleop_flywheel.recording.mcap.metadata import INFINITE_NS, Qos
from teleop_flywheel.recording.recorder import clock_probe, verdict
from teleop_flywheel.recording.recorder.episode_recorder import (
    OUTCOMES,
    SAFE_NAME,
    EpisodeFields,
    EpisodeRecorder,
    RecorderConfig,
    TopicEntry,
)
from teleop_flywheel.recording.recorder.spec_checks import OUTCOME_ANSWERS
from teleop_flywheel.ros.errors import ParameterError
from teleop_flywheel.ros.nodes.common import diag_array, diag_status, message_class, spin_node
from teleop_flywheel.ros.nodes.recorder_verdict import ValidatorProcess
from teleop_flywheel.ros.params import Invalid, NodeParameters, NodeParams, spec

STATUS_QOS = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=1, reliability=ReliabilityPolicy.RELIABLE,
                        durability=DurabilityPolicy.TRANSIENT_LOCAL)


def _text(default: str, description: str) -> Any:
    return spec(default, description, text=True, read_only=False)


def _name(default: str, description: str) -> Any:
    """An identifier the data engine reads back as one (`core/names.py`): a bag is never recorded with
    a name `validate` would reject as UNSAFE_NAME."""
    return spec(default, description, pattern=IDENTIFIER_PATTERN, read_only=False)


@dataclass
class RecorderParams(NodeParams):
    topics: list[str] = spec(list(RECORDED), "topics to record (types discovered from the graph)")
    cameras: list[str] = spec([], "camera names; adds /cameras/<name>/image/compressed",
                              pattern=IDENTIFIER_PATTERN)
    output_dir: str = spec("bags", "directory that receives one bag directory per episode", required=True)
    episode_prefix: str = spec("episode", "bag names: <prefix>_<YYYYmmdd_HHMMSS>[_n]", pattern=SAFE_NAME,
                               required=True)
    max_chunk_age_s: float = spec(0.5, "close a zstd chunk at least this often (s): the crash loss bound",
                                  range=(0.01, 60.0))
    chunk_size_mb: float = spec(1.0, "close a chunk at this size (MiB)", range=(0.01, 1024.0))
    fsync: bool = spec(True, "fsync after every chunk")
    queue_depth: int = spec(500, "subscription history depth (absorbs bursts)", range=(1, 100_000))
    take_batch_ms: float = spec(20.0, "take every queue dry this often (ms): messages gather in between, so "
                                "queue_depth must hold rate x this", range=(1.0, 10_000.0))
    stop_settle_ms: float = spec(500.0, "at stop, keep taking messages up to this long until every live stream "
                                 "has delivered one stamped after the stop (ms): a camera's frames still in "
                                 "flight are kept; 0 = close at once", range=(0.0, 10_000.0))
    ptp_probe: str = spec("", "clock offset probe, a fixed mechanism: 'pmc' (linuxptp pmc TIME_STATUS_NP), "
                          "'chrony' (chronyc -c tracking) or empty for none", choices=("", *clock_probe.PROBES))
    calibration_files: list[str] = spec([], "calibration YAML files stored in the episode metadata: "
                                        "ROLE=PATH (leader/follower) or PATH (stored under its stem)")
    discovery_period_s: float = spec(0.5, "graph discovery period (s)", range=(0.01, 60.0))
    status_period_s: float = spec(0.5, "status/diagnostics period (s)", range=(0.01, 60.0))
    auto_start: bool = spec(False, "start an episode as soon as the node is up")
    verdict: bool = spec(True, "validate every stopped episode at once (a worker process) and write "
                         "<bag>/verdict.json: the checks and thresholds of teleop-flywheel validate")
    validate_config: str = spec("", "thresholds YAML of the verdict at stop; empty = the shipped config/validate.yaml")
    task: str = _text("", "task description")
    operator: str = _text("", "who teleoperated")
    rig_id: str = _name("", "rig / robot id")
    robot_type: str = _name("so101_follower", "robot type")
    session_kind: str = _name("teleop", "teleop | rollout | …")
    policy_checkpoint: str = _text("", "checkpoint id; empty = from /policy/joint_command frame_id")
    protocol_hash: str = _text("", "data-collection protocol id")
    condition: str = _text("", "experimental condition")
    task_spec: str = spec("", "the task spec's canonical content as JSON (the session's `task` argument loads and "
                          "checks the file and passes this): in every episode's metadata with its id, its "
                          "instruction the task text unless `task` is set, its success predicate judged at stop; "
                          "empty = none")
    ptp_offset_ns: int | str = spec("", "measured PTP/chrony offset in ns, if known (int); empty = not measured",
                                    text=True, read_only=False)

    def check(self) -> None:
        self.parsed_spec()
        if isinstance(self.ptp_offset_ns, str) and self.ptp_offset_ns:
            try:
                int(self.ptp_offset_ns)
            except ValueError:
                raise Invalid("ptp_offset_ns", "an integer (ns) or empty") from None

    def parsed_spec(self) -> TaskSpec | None:
        """The task spec the `task_spec` parameter holds (Invalid naming the field a bad one breaks)."""
        if not self.task_spec:
            return None
        try:
            return parse_task_spec(json.loads(self.task_spec), "task_spec")
        except (ValueError, TaskSpecError) as exc:  # JSONDecodeError is a ValueError
            raise Invalid("task_spec", f"a task spec's content as JSON ({exc})") from None

    def fields(self, labels: EpisodeLabels) -> EpisodeFields:
        ptp = None if self.ptp_offset_ns == "" else int(self.ptp_offset_ns)
        return EpisodeFields(self.task, self.operator, self.rig_id, self.robot_type, self.session_kind,
                             self.policy_checkpoint, self.protocol_hash, self.condition, ptp, labels.outcome,
                             labels.attempts, labels.failure_label, labels.machine_check, labels.outcome_answer)


@dataclass
class EpisodeLabels(NodeParams):
    """What is said about the episode being recorded (`~/label_episode`), validated by the same
    rules as parameters; cleared after every episode."""

    outcome: str = spec("", "success | failure; empty = unset", choices=OUTCOMES)
    attempts: int = spec(0, "attempts until the outcome (graded success); 0 = unset", range=(0, 1_000_000))
    failure_label: str = spec("", "why it failed", text=True)
    machine_check: str = spec("", "an automatic success check's verdict, stored beside the outcome", text=True)
    outcome_answer: str = spec("", "asked at the rig about an outcome the task spec's success predicate disagrees "
                               "with, the operator kept it or changed it; stored in outcome_check",
                               choices=OUTCOME_ANSWERS)

    def apply(self, name: str, value: Any, node: str) -> tuple[EpisodeLabels, str]:
        """These labels with `name` set to `value`, or (self, the reason it is refused)."""
        if name not in {f.name for f in self.fields_()}:
            return self, f"{name} is not an episode label: {', '.join(f.name for f in self.fields_())}"
        try:
            return EpisodeLabels.from_values({**self.as_dict(), name: value}, node), ""
        except ParameterError as exc:
            return self, f"{name} = {value!r} is not allowed: {exc.allowed}"


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




class RecorderNode(Node):
    def __init__(self, node_name: str = "recorder", **kwargs: Any) -> None:
        super().__init__(node_name, **kwargs)
        self.params = NodeParameters(self, RecorderParams)
        p = self.params.values
        self.labels = EpisodeLabels()
        # Fully qualified as this node resolves them (its namespace, remappings): what the bag records.
        wanted = list(
            dict.fromkeys(self.resolve_topic_name(t) for t in p.topics + [camera_image(c) for c in p.cameras])
        )
        self.episodes = EpisodeRecorder(RecorderConfig(
            Path(p.output_dir), tuple(wanted), tuple(p.cameras), p.episode_prefix, p.chunk_size_mb,
            p.max_chunk_age_s, p.fsync, tuple(p.calibration_files), p.ptp_probe, self.get_namespace(),
            p.parsed_spec()),
            log=self._log)
        self.unrecordable: dict[str, str] = {}  # topic → why (type not installed here)
        cameras = [c for c in p.cameras if c]
        self._judge = ValidatorProcess(p.validate_config, cameras) if p.verdict else None
        self._closed = False
        self.verdicts = verdict.VerdictKeeper(
            Path(p.output_dir), self._judge, cameras, p.validate_config or "config/validate.yaml (shipped)",
            log=self._log, on_change=self._publish_status)
        # Raw subscriptions live on a private node that no executor spins: one thread takes
        # every queue dry in batches (3–4× less CPU per message than executor dispatch).
        # Its own name even under a launch's `-r __node:=NAME` (a local remap wins over the global one).
        self._sub_node: Node | None = Node(f"{self.get_name()}_raw", namespace=self.get_namespace(),
                                           context=self.context, start_parameter_services=False,
                                           cli_args=["--ros-args", "-r", f"__node:={self.get_name()}_raw"])
        self._subs: list[tuple[Subscription, TopicEntry]] = []
        self._stop = threading.Event()
        self._wake = threading.Event()  # cuts the batch pause short (a drain is wanted)
        self._passes = threading.Condition()
        self._passes_begun = self._passes_done = 0
        self._take_thread = threading.Thread(target=self._take_loop, name="recorder-take", daemon=True)
        self._status_pub = self.create_publisher(String, "~/status", STATUS_QOS)
        self._diag_pub = self.create_publisher(DiagnosticArray, DIAGNOSTICS, 10)
        self.create_service(Trigger, "~/start", lambda _q, r: self._trigger(self.start_episode, r))
        self.create_service(Trigger, "~/stop", lambda _q, r: self._trigger(self.stop_episode, r))
        self.create_service(Trigger, "~/discard", lambda _q, r: self._trigger(self.discard_episode, r))
        self.create_service(Trigger, "~/keep", lambda _q, r: self._trigger(self.verdicts.keep, r))
        self.create_service(SetParameters, "~/label_episode", self._label_episode)
        self.create_timer(p.discovery_period_s, self._discover)
        self.create_timer(p.status_period_s, self._publish_status)
        self.create_timer(0.25, self.episodes.sample_clock)  # (monotonic, wall) about once a second
        self._take_thread.start()
        self._discover()
        if p.auto_start:
            self.start_episode()

    def _log(self, level: str, message: str) -> None:
        if level == "error":  # one call site per severity: rclpy refuses a site that changes it
            self.get_logger().error(message)
        elif level == "warning":
            self.get_logger().warning(message, throttle_duration_sec=1.0)
        else:
            self.get_logger().info(message)

    @property
    def last_saved(self) -> str:
        return self.episodes.last_saved

    # -- discovery and subscriptions ----------------------------------------------------------
    def _discover(self) -> None:
        wanted = self.episodes.config.topics
        missing = [t for t in wanted if t not in self.episodes.topics and t not in self.unrecordable]
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
            if offered:
                self._subscribe(topic, msgdefs.normalize_type(types[0]), offered)

    def _subscribe(self, topic: str, type_name: str, offered: list[Qos]) -> None:
        reliable = all(q.reliability == "reliable" for q in offered)
        latched = all(q.durability == "transient_local" for q in offered)
        qos = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=self.params.values.queue_depth,
                         reliability=ReliabilityPolicy.RELIABLE if reliable else ReliabilityPolicy.BEST_EFFORT,
                         durability=DurabilityPolicy.TRANSIENT_LOCAL if latched else DurabilityPolicy.VOLATILE)
        try:
            msg_class = message_class(type_name)
            entry = self.episodes.add_topic(topic, type_name, offered)
        except (ImportError, AttributeError, ValueError, msgdefs.DefinitionNotFoundError) as exc:
            self.unrecordable[topic] = f"{type_name}: {exc}"  # said once, not retried every period
            self.get_logger().error(f"cannot record {topic} ({type_name}): {exc}")
            return
        if self._sub_node is None:  # closed
            return
        sub = self._sub_node.create_subscription(msg_class, topic, lambda _d, _i: None, qos, raw=True)
        self._subs = self._subs + [(sub, entry)]
        self.get_logger().info(f"recording {topic} [{type_name}] {'reliable' if reliable else 'best_effort'}"
                               f"{' transient_local' if latched else ''}")

    # -- the hot path -------------------------------------------------------------------------
    def _take_loop(self) -> None:
        """Every `take_batch_ms`, take every subscription's queue dry, raw bytes and DDS's
        message info, without an executor: a Python callback per message would cost more than
        the recording. Waking costs more than taking, so the thread polls rather than waits on
        the queues: a batch gathers between passes (the queues hold `queue_depth`; log_time is
        DDS's reception stamp, so the delay changes no recorded time) and an idle pass is one
        empty take per topic (~µs). A drain request wakes it at once."""
        batch_s = self.params.values.take_batch_ms / 1e3
        while not self._stop.is_set():
            subs = self._subs
            try:
                with self._passes:
                    self._passes_begun += 1
                    this_pass = self._passes_begun
                for sub, entry in subs:
                    while (taken := sub.handle.take_message(sub.msg_type, True)) is not None:
                        self.episodes.write(entry, taken[0], taken[1])
                with self._passes:
                    self._passes_done = this_pass
                    self._passes.notify_all()
                self._wake.wait(batch_s)
                self._wake.clear()
            except Exception as exc:  # context shut down under us (process exit): stop quietly
                if self._stop.is_set() or not self.context.ok():
                    return
                self.get_logger().error(f"recorder take loop: {exc!r}")
                self._stop.wait(0.1)

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

    # -- episode lifecycle --------------------------------------------------------------------
    def start_episode(self) -> str:
        clock = self.get_clock()  # on simulated time, header stamps are on it, not on the wall clock
        return self.episodes.start(self.params.values.fields(self.labels),
                                   clock.now().nanoseconds
                                   if isinstance(clock, ROSClock) and clock.ros_time_is_active else None)

    def stop_episode(self) -> str:
        """Take what has arrived, then close the bag with the final metadata and hand it to the
        verdict worker; returns a summary."""
        if not self.episodes.recording:
            raise RecordingError("not recording")
        self.episodes.settle(self.get_clock().now().nanoseconds, time.time_ns())
        deadline = time.monotonic() + self.params.values.stop_settle_ms / 1e3
        while True:
            if not self._drain():
                self.get_logger().warning("stop: the take thread did not drain within 1 s; the last messages may "
                                          "be missing")
                break
            waiting = self.episodes.settled()
            if not waiting:
                break
            if time.monotonic() >= deadline:
                self.get_logger().warning(f"stop: no message stamped after the stop from {', '.join(waiting)} within "
                                          f"{self.params.values.stop_settle_ms:g} ms; its last frames may be missing")
                break
        try:
            text = self.episodes.stop(self.params.values.fields(self.labels))
        finally:
            self._clear_labels()
        self.verdicts.submit(self.episodes.last_saved)
        return text

    def discard_episode(self) -> str:
        """While recording: close the episode and move it to discarded/; else the last one stopped."""
        if not self.episodes.recording:
            return self.verdicts.discard()
        self._drain()
        try:
            text = self.episodes.discard(self.params.values.fields(self.labels))
        finally:
            self._clear_labels()
        moved = self.episodes.last_discarded
        if moved is not None:
            self.verdicts.discarded_while_recording(moved, verdict.read_verdict(moved) or {})
        return text

    def _clear_labels(self) -> None:
        self.labels = EpisodeLabels()

    def _label_episode(self, request: SetParameters.Request, response: SetParameters.Response
                       ) -> SetParameters.Response:
        """Each named value set or refused on its own, as `set_parameters` does."""
        for msg in request.parameters:
            self.labels, why = self.labels.apply(msg.name, Parameter.from_parameter_msg(msg).value, self.get_name())
            response.results.append(SetParametersResult(successful=not why, reason=why))
            if why:
                self.get_logger().warning(f"label_episode: {why}")
        self._publish_status()
        return response

    def _trigger(self, action: Any, response: Trigger.Response) -> Trigger.Response:
        try:
            response.message = action()
            response.success = True
        except (RuntimeError, ValueError, OSError) as exc:
            response.success, response.message = False, str(exc)
        return response

    # -- status -------------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        p = self.params.values
        s = self.episodes.status(self.episodes.config.topics, self.unrecordable)
        spec = self.episodes.config.task_spec
        s.update(outcome=self.labels.outcome or "unset", attempts=self.labels.attempts,
                 task=p.task or (spec.instruction if spec else ""), operator=p.operator)
        s.update(self.verdicts.status())
        for name, lag in (s["verdict"].get("camera_lag") or {}).items():  # the content-based estimate, when given
            s["clock"]["cameras"].setdefault(name, {})["lag"] = lag
        for name, pooled in (s["verdict"].get("camera_pool") or {}).items():  # over the camera instance's episodes
            s["clock"]["cameras"].setdefault(name, {})["pool"] = pooled
        return s

    def _publish_status(self) -> None:
        if self._closed:
            return
        self.episodes.check_bag()  # a write error in the bag's flusher thread stops the episode now
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
        """Stop cleanly: an open episode is saved (outcome as set, else unset), then the take
        thread stops — before the node and its context go away. Idempotent."""
        if self.episodes.recording:  # while the take thread still runs, so it can drain
            try:
                self.stop_episode()
            except RuntimeError as exc:
                self.get_logger().error(str(exc))
        self._stop.set()
        self._wake.set()
        if self._take_thread.is_alive() and self._take_thread is not threading.current_thread():
            self._take_thread.join(timeout=5.0)
        finished = self.verdicts.close(timeout_s=5.0)  # the last episode's verdict, if it comes soon
        self._closed = True  # a verdict still to come is written beside its bag, not published: the node goes
        if not finished:
            self.get_logger().warning("closing before every verdict was written (ingest validates those bags itself)")
        if self._judge is not None:
            self._judge.close()
        self.verdicts.join(5.0)  # its judge is gone: the thread ends now, before the node is destroyed
        if self._sub_node is not None:
            self._subs = []
            self._sub_node.destroy_node()
            self._sub_node = None


def main() -> int:
    return spin_node(RecorderNode, name="recorder")


if __name__ == "__main__":
    sys.exit(main())
