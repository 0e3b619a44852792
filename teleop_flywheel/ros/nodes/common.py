"""Small rclpy helpers every node shares: stamped messages, QoS, diagnostics, entry points.

Kept deliberately thin: nodes translate between topics and the ROS-free core, nothing more.

Time at a node's edge (SPEC §4): sources and control timing work on CLOCK_MONOTONIC; a header
carries ROS time. `stamp` is the one way a node writes a header stamp (the monotonic source instant
through `clock.to_ros_ns`), and `msg_stamp_ns` the one way it reads one back onto its own
monotonic clock (`clock.from_ros_ns`) before comparing it with `now_ns()`.
"""
from __future__ import annotations

import contextlib
import faulthandler
import importlib
import os
import sys
import threading
from array import array
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import rclpy
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.context import Context
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
from rclpy.guard_condition import GuardCondition
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from rclpy.signals import SignalHandlerOptions
from sensor_msgs.msg import JointState

from teleop_flywheel.core.clock import fill_stamp, from_ros_ns, now_ns, stamp_to_ns, to_ros_ns
from teleop_flywheel.core.errors import FlywheelError
from teleop_flywheel.core.priority import request_realtime
from teleop_flywheel.core.signals import SignalStop
from teleop_flywheel.recording.mcap.msgdefs import normalize_type

# Reliable everywhere data is recorded: a dataset must not silently lose samples.
STREAM_QOS = QoSProfile(
    history=HistoryPolicy.KEEP_LAST, depth=50, reliability=ReliabilityPolicy.RELIABLE
)
# Control-loop inputs: the newest sample, never a backlog. A loop that fell behind must act on
# the present, not work through a queue of stale targets (each would only be held as stale).
CONTROL_QOS = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=1, reliability=ReliabilityPolicy.RELIABLE)
IMAGE_QOS = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=10, reliability=ReliabilityPolicy.RELIABLE)
# Late joiners (recorder, console) still get the last event/state.
LATCHED_QOS = QoSProfile(
    history=HistoryPolicy.KEEP_LAST,
    depth=20,
    reliability=ReliabilityPolicy.RELIABLE,
    durability=DurabilityPolicy.TRANSIENT_LOCAL,
)

LEVELS = {"OK": DiagnosticStatus.OK, "WARN": DiagnosticStatus.WARN, "ERROR": DiagnosticStatus.ERROR,
          "STALE": DiagnosticStatus.STALE}


def stamp(header_stamp: Any, mono_ns: int) -> Any:
    """Write a monotonic source instant into a `builtin_interfaces/Time` as ROS time, in place."""
    return fill_stamp(header_stamp, to_ros_ns(mono_ns))


def joint_state(
    names: Sequence[str],
    positions: Sequence[float],
    stamp_ns: int,
    velocities: Sequence[float] = (),
    efforts: Sequence[float] = (),
    frame_id: str = "",
) -> JointState:
    """A JointState stamped with a source time (`stamp_ns`: monotonic ns; the header gets ROS time)."""
    msg = JointState()
    stamp(msg.header.stamp, stamp_ns)
    msg.header.frame_id = frame_id
    msg.name = list(names)
    # array('d') passes rosidl's field check in one step (a list is checked element by element):
    # arm drivers and the teleop node build one of these every tick.
    msg.position = array("d", positions)
    msg.velocity = array("d", velocities)
    msg.effort = array("d", efforts)
    return msg


def message_class(type_name: str) -> Any:
    """The Python class of a ROS message type, from `pkg/msg/Name` or `pkg/Name` (ImportError or
    AttributeError if it is not installed)."""
    pkg, kind, name = normalize_type(type_name).split("/")
    return getattr(importlib.import_module(f"{pkg}.{kind}"), name)


def positions_by_name(msg: JointState) -> dict[str, float]:
    return dict(zip(msg.name, msg.position, strict=False))


def msg_stamp_ns(msg: object) -> int:
    """The source stamp of a stamped message (ROS time) on this host's monotonic clock, to compare
    with `now_ns()`."""
    return from_ros_ns(stamp_to_ns(msg.header.stamp))  # type: ignore[attr-defined]


def diag_status(
    name: str, level: str, message: str, values: Mapping[str, object] | None = None, hardware_id: str = ""
) -> DiagnosticStatus:
    status = DiagnosticStatus()
    status.level = LEVELS[level]
    status.name = name
    status.message = message
    status.hardware_id = hardware_id
    status.values = [KeyValue(key=str(k), value=str(v)) for k, v in (values or {}).items()]
    return status


def diag_array(statuses: Sequence[DiagnosticStatus]) -> DiagnosticArray:
    arr = DiagnosticArray()
    stamp(arr.header.stamp, now_ns())
    arr.status = list(statuses)
    return arr


def log_at(node: Node, level: str, message: str) -> None:
    """Log at a level chosen at run time ("error" | "warning" | "info"): the ROS-free drivers report
    through a `(level, message)` callback. One call site per severity: rclpy refuses a call site
    whose severity changes between calls."""
    logger = node.get_logger()
    if level == "error":
        logger.error(message)
    elif level == "warning":
        logger.warning(message)
    else:
        logger.info(message)


# How long a node may take to stop once told to: its own `close()` (an open episode saved, a verdict
# waited for, torque released: each bounded, ~10 s at most). Beyond it the process prints every
# thread's stack and exits 1: a hang in our own stop is a bug to see. A supervisor escalates to
# SIGKILL itself, but a node stopped by the parent-death signal (its supervisor was killed) has
# nobody to do that.
SHUTDOWN_BOUND_S = 25.0
# After a clean `close()` only the middleware's teardown is left (destroying publishers announces
# our leaving to peers; the process's exit does as much). Fast DDS can wait forever there on a peer
# that died holding shared state: seen in CI, a leader arm parked and closed, then 25 s inside
# `destroy_publisher`, and its session reported "did not stop cleanly". Past this bound the node
# says so in one line and exits with the code its own stop earned.
TEARDOWN_BOUND_S = 5.0
NODE_POLL_S = 1.0  # how often a node process looks at its node's `failure` when nothing else wakes it


def spin_node(factory: Callable[[], Node], args: Sequence[str] | None = None, name: str = "",
              shutdown_bound_s: float = SHUTDOWN_BOUND_S) -> int:
    """Console-script body shared by every node: start, spin until SIGINT/SIGTERM, stop cleanly.

    rclpy's own signal handlers would shut the context down first, while the node's background
    threads (bus loop, camera loop, recorder take loop) may still publish: each then dies with
    `RCLError: publisher's context is invalid`. Here a signal only ends the spin loop; the node's
    `close()` stops its threads, and only then are the node and the context shut down. A node that
    cannot start (a `FlywheelError`: bad parameter, calibration file, …), or that reports a
    `failure` while running (an arm whose EEPROM holds another calibration), prints one line and
    returns 1. Stopping is bounded (`shutdown_bound_s`): past it, every thread's stack and exit 1;
    the middleware's teardown after a clean stop is bounded apart (`TEARDOWN_BOUND_S`).
    """
    # A crash in native code (Fast DDS, rclpy, a driver's library) prints every thread's Python stack
    # before the process dies of its signal: the supervisor relays it, so a SIGSEGV says where it was.
    faulthandler.enable()
    argv = list(sys.argv if args is None else args)
    try:
        rclpy.init(args=argv, signal_handler_options=SignalHandlerOptions.NO)
    except RuntimeError as exc:  # rcl's error on malformed --ros-args (`-p name:=` with no value): a usage error
        print(f"{name or 'node'}: cannot parse the ROS arguments {argv[1:]}: {exc}", file=sys.stderr, flush=True)
        return 2
    stop = threading.Event()
    with SignalStop(stop):  # a signal only ends the spin loop
        return _spin(factory, name, shutdown_bound_s, stop)


def _spin(factory: Callable[[], Node], name: str, shutdown_bound_s: float, stop: threading.Event) -> int:
    node: Node | None = None
    label = name or getattr(factory, "__name__", "node")
    code = 1
    try:
        try:
            node = factory()
        except FlywheelError as exc:
            print(exc if str(exc).startswith("/") else f"{label}: {exc}", file=sys.stderr, flush=True)
            return code
        label = node.get_fully_qualified_name()
        _realtime_process(node)
        executor = SingleThreadedExecutor()
        executor.add_node(node)
        # A signal wakes the executor at once; a node's `failure` (a reason it cannot go on) is seen
        # within a poll. A poll costs the process a wait-set build (~0.3 ms of CPU): at 0.1 s that
        # was a tenth of an arm driver's budget beside its 200 Hz bus loop.
        threading.Thread(target=_wake_on, args=(stop, node.create_guard_condition(lambda: None)),
                         name="stop-waker", daemon=True).start()
        try:
            while not stop.is_set() and rclpy.ok() and not getattr(node, "failure", ""):
                executor.spin_once(timeout_sec=NODE_POLL_S)
        except ExternalShutdownException:
            pass
        finally:
            faulthandler.dump_traceback_later(shutdown_bound_s, exit=True)
            close = getattr(node, "close", None)
            if callable(close):
                close()
            executor.remove_node(node)
            executor.shutdown()
            faulthandler.cancel_dump_traceback_later()
        failure = getattr(node, "failure", "")
        if failure:
            print(f"{label}: {failure}", file=sys.stderr, flush=True)
            return code
        code = 0
        return code
    finally:
        _teardown(node, label, code)


def _teardown(node: Node | None, label: str, code: int) -> None:
    """Destroy the node and shut the context down, or exit with `code` past `TEARDOWN_BOUND_S`."""
    def give_up() -> None:
        print(f"{label}: stopped, but the middleware's teardown did not finish in {TEARDOWN_BOUND_S:.0f} s "
              f"(a DDS peer that is gone); exiting without it", file=sys.stderr, flush=True)
        sys.stdout.flush()
        os._exit(code)

    timer = threading.Timer(TEARDOWN_BOUND_S, give_up)
    timer.daemon = True
    timer.start()
    try:
        if node is not None:
            node.destroy_node()
        if rclpy.ok():
            rclpy.shutdown()
    finally:
        timer.cancel()


def _realtime_process(node: Node) -> None:
    """A node whose loop asks for real-time (`thread_priority`), alone in its process as here, gets
    it for every thread of the process: its executor, the middleware's threads and those started
    later. A Python thread runs only while it holds the GIL, so a loop alone at SCHED_FIFO still
    waits on any thread of its process that holds the GIL while another process preempts it.
    Measured with an arm driver's process beside three busy processes of its session: 200 Hz
    joint-state gaps at p99 18.6 and 38.8 ms with the bus thread alone real-time, 5.4 and 11.6 ms
    with every thread (docs/arm_driver.md "Scheduling"). Where nodes share a process (tests, a
    benchmark) only the loop's own thread asks."""
    values = getattr(getattr(node, "params", None), "values", None)
    priority = int(getattr(values, "thread_priority", 0))
    if priority > 0:
        request_realtime(priority, whole_process=True, lock_memory=bool(getattr(values, "lock_memory", True)),
                         say=lambda message: log_at(node, "warning", message))


def _wake_on(stop: threading.Event, wake: GuardCondition) -> None:
    """Once `stop` is set, trigger `wake`, a guard condition of the spinning node: its (empty) callback
    is work, so `spin_once` returns. `Executor.wake()` would not do: `spin_once` goes back to waiting
    until its timeout when woken with nothing to run (an idle node took NODE_POLL_S to see a signal)."""
    stop.wait()
    with contextlib.suppress(Exception):  # noqa: BLE001 - a signal after the node already stopped: it is gone
        wake.trigger()


SPIN_POLL_S = 0.05  # a node's spin thread looks at its stop flag this often when nothing arrives


class NodeSpinner:
    """Spins each node on its own SingleThreadedExecutor in its own thread, as if each were its
    own process (minus the process). Used wherever several nodes share one Python process: the
    session runner, tests, benchmarks.

    Why not one MultiThreadedExecutor: in rclpy (Kilted) its dispatch loop spins hot, holding the
    GIL, while callbacks are in flight. Measured here with two nodes and one 200 Hz stream: another
    thread of the process that sleeps 1 ms got 68 wake-ups in 3 s instead of ~2,600 (p99 2.4 s
    late) and 21 of 1,000 messages were delivered; with one executor per node: 2,451 wake-ups
    (p99 0.7 ms late) and every message. A node waiting in rcl_wait holds no GIL.
    """

    def __init__(self, context: Context) -> None:
        self.context = context
        self._spinning: dict[Node, tuple[SingleThreadedExecutor, threading.Thread, threading.Event]] = {}

    def add(self, node: Node) -> Node:
        executor = SingleThreadedExecutor(context=self.context)
        executor.add_node(node)
        stop = threading.Event()
        thread = threading.Thread(target=self._spin, args=(executor, stop), name=f"spin-{node.get_name()}",
                                  daemon=True)
        self._spinning[node] = (executor, thread, stop)
        thread.start()
        return node

    def _spin(self, executor: SingleThreadedExecutor, stop: threading.Event) -> None:
        """`spin_once` until `stop`, so `remove` shuts the executor down only once this thread has
        left it: rclpy's `Executor.shutdown` does not wait for a spinning thread (it destroys the
        executor's guard condition under it), which raised InvalidHandle in this thread on a loaded
        machine."""
        try:
            while not stop.is_set() and self.context.ok():
                executor.spin_once(timeout_sec=SPIN_POLL_S)
        except ExternalShutdownException:
            pass
        except Exception:
            if self.context.ok():  # an error raised by the shutdown itself is not a failure
                raise

    def remove(self, node: Node, timeout_s: float = 5.0) -> None:
        """Stop spinning `node`: its running callback finishes, then its thread ends, then its
        executor is shut down. The node itself stays (the caller destroys it)."""
        executor, thread, stop = self._spinning.pop(node)
        stop.set()
        if thread is not threading.current_thread():
            thread.join(timeout_s)
        executor.shutdown(timeout_sec=timeout_s)

    def shutdown(self, timeout_s: float = 5.0) -> None:
        for node in list(self._spinning):
            self.remove(node, timeout_s)
