"""`teleop-flywheel console`: the operator's terminal UI for a live session.

It talks to the nodes only through their topics and services: it subscribes
`/teleop/authority`, `/teleop/intervention`, `/recorder/status` and `/diagnostics`, and its
keys call `/recorder/{start,stop,discard,keep}` (std_srvs/Trigger), set the episode outcome and
attempts through `/recorder/label_episode`, and switch mode / label the
intervention through the teleop node's services. Esc is the e-stop: `~/estop` of the teleop node
and of both arm drivers at once, each called the moment its service is known (never queued behind
another key's wait); `r` calls their `~/reset` (the arms' latched servo faults too). The recorder's status brings the
verdict of the last episode (validated at stop), which the screen shows with what to do about it,
and under a task spec its checks (start region, success predicate beside the outcome flag); a stop
on a flag the predicate disagrees with is asked about first (`console_view.py`). The screen is redrawn
a few times a second with plain ANSI codes, so it works over ssh and in any terminal.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import queue
import select
import sys
import termios
import threading
import time
import tty
from collections.abc import Callable
from typing import Any

from teleop_flywheel.core.errors import UsageError
from teleop_flywheel.core.topics import (
    DIAGNOSTICS,
    ESTOP,
    PEDAL_JOY,
    RECORDER_LABEL,
    RECORDER_NODE,
    RESET,
    TELEOP_NODE,
    label_service,
)
from teleop_flywheel.ros.session.console_view import KEYS, ConsoleState

SERVICE_WAIT_S = 10.0  # how long a key waits for its service to be discovered
ARM_NODES = ("follower_arm", "leader_arm")  # the session graph's arm drivers


class ConsoleNode:
    """rclpy wiring: subscriptions update a ConsoleState; actions become service calls."""

    def __init__(self, state: ConsoleState, recorder: str = RECORDER_NODE, teleop: str = TELEOP_NODE,
                 context: Any = None, arms: tuple[str, ...] = ARM_NODES) -> None:
        import rclpy
        from diagnostic_msgs.msg import DiagnosticArray
        from rcl_interfaces.srv import SetParameters
        from sensor_msgs.msg import JointState, Joy
        from std_msgs.msg import String
        from std_srvs.srv import SetBool, Trigger

        from teleop_flywheel.ros.nodes.common import LATCHED_QOS, STREAM_QOS

        self.state = state
        self.node = rclpy.create_node("operator_console", context=context)
        n = self.node
        n.create_subscription(
            JointState, f"{teleop}/authority", lambda m: state.on_authority(list(m.name), list(m.position)), STREAM_QOS
        )
        n.create_subscription(String, f"{teleop}/intervention", lambda m: state.on_intervention(m.data), LATCHED_QOS)
        n.create_subscription(String, f"{recorder}/status", lambda m: state.on_recorder_status(m.data), LATCHED_QOS)
        levels = {0: "OK", 1: "WARN", 2: "ERROR", 3: "STALE"}

        def on_diag(msg: Any) -> None:
            for s in msg.status:
                level = s.level if isinstance(s.level, int) else int.from_bytes(s.level, "little")
                state.on_diagnostic(
                    s.name, levels.get(level, str(level)), s.message, {kv.key: kv.value for kv in s.values}
                )

        n.create_subscription(DiagnosticArray, DIAGNOSTICS, on_diag, 50)
        self._trigger: dict[str, Any] = {a: n.create_client(Trigger, f"{recorder}/{a}")
                                         for a in ("start", "stop", "discard", "keep")}
        self._rec_labels: Any = n.create_client(SetParameters, f"{recorder}/{RECORDER_LABEL}")
        self._mode: Any = n.create_client(SetBool, f"{teleop}/set_policy_mode")
        self._stops: dict[str, list[Any]] = {a: [n.create_client(Trigger, f"{node}/{a}") for node in (*arms, teleop)]
                                             for a in (ESTOP, RESET)}
        self._label: dict[str, Any] = {
            label: n.create_client(Trigger, f"{teleop}/{label_service(label)}")
            for _k, (a, label) in KEYS.items()
            if a == "trigger"
        }
        # Terminal fallback for rigs without a foot pedal: the space bar toggles the takeover on
        # /pedal/joy, stamped when the key was read (the best source time a terminal offers).
        self._pedal = n.create_publisher(Joy, PEDAL_JOY, STREAM_QOS)
        self._pedal_down = False
        # Service calls go out in key order from one worker, which waits for a service that is
        # not discovered yet: a recorder's status topic can arrive before its services do, and a
        # key pressed in that window must not be lost.
        self._calls: queue.Queue[tuple[Any, Any, str, Callable[[], None] | None] | None] = queue.Queue()
        self._caller = threading.Thread(target=self._send_calls, daemon=True)
        self._caller.start()

    def _send_calls(self) -> None:
        while (item := self._calls.get()) is not None:
            client, request, what, then = item
            if not client.service_is_ready():
                name = self.node.resolve_service_name(client.srv_name)  # as resolved: /recorder/start, /rig_a/…
                self.state.message = f"{what}: waiting for {name}"
                if not client.wait_for_service(timeout_sec=SERVICE_WAIT_S):
                    self.state.message = f"{what}: service {name} not available after {SERVICE_WAIT_S:.0f} s"
                    continue
            client.call_async(request).add_done_callback(self._report(what, then))

    def _report(self, what: str, then: Callable[[], None] | None = None) -> Callable[[Any], None]:
        """A reply's callback: its outcome in state.message; `then` runs after a reply that succeeded."""
        from teleop_flywheel.ros.nodes.recorder_client import refusals

        def report(future: Any) -> None:
            res = future.result()
            if res is None:
                self.state.message = f"{what}: no reply"
            elif hasattr(res, "success"):
                self.state.message = (
                    f"{what}: {'ok' if res.success else 'FAILED'} {getattr(res, 'message', '')}".strip()
                )
            else:
                bad = refusals(res)
                self.state.message = f"{what}: {'FAILED ' + '; '.join(bad) if bad else 'ok'}"
            if then is not None and res is not None and (res.success if hasattr(res, "success") else not refusals(res)):
                then()
        return report

    def close(self) -> None:
        """Stop the call worker (calls still waiting for a service are dropped)."""
        self._calls.put(None)
        self._caller.join(SERVICE_WAIT_S + 1.0)

    def act(self, action: str, arg: str) -> None:
        """Send the request for one key; the reply lands in state.message."""
        from std_srvs.srv import SetBool, Trigger

        from teleop_flywheel.ros.nodes.recorder_client import named_values

        def call(client: Any, request: Any, what: str, then: Callable[[], None] | None = None) -> None:
            self._calls.put((client, request, what, then))

        if action in self._trigger:
            call(self._trigger[action], Trigger.Request(), action)
        elif action in self._stops:
            for client in self._stops[action]:
                if client.service_is_ready():
                    client.call_async(Trigger.Request()).add_done_callback(self._report(action))
                else:
                    call(client, Trigger.Request(), action)
            self.state.message = "E-STOP sent: the arms hold until r (reset)" if action == ESTOP else "reset sent"
        elif action == "answer":  # to the question a stop on a flag the spec disagrees with asked; then the stop
            values = {"outcome_answer": "kept"} if arg == "kept" else {"outcome": arg, "outcome_answer": "changed"}
            # The stop only once the answer is in: the recorder serves the two services in any order.
            call(self._rec_labels, named_values(**values), f"answer: {'kept the outcome' if arg == 'kept' else arg}",
                 then=lambda: call(self._trigger["stop"], Trigger.Request(), "stop"))
        elif action in ("outcome", "attempts"):
            value: str | int = int(arg) if action == "attempts" else arg
            call(self._rec_labels, named_values(**{action: value}), f"{action}={arg}")
        elif action == "mode":
            call(self._mode, SetBool.Request(data=arg == "policy"), f"mode={arg}")
        elif action == "trigger":
            call(self._label[arg], Trigger.Request(), f"trigger={arg}")
        elif action == "pedal":
            from sensor_msgs.msg import Joy

            from teleop_flywheel.core.clock import now_ns
            from teleop_flywheel.core.labels import TRIGGER_LABELS
            from teleop_flywheel.ros.nodes.common import stamp

            self._pedal_down = not self._pedal_down
            msg = Joy()
            stamp(msg.header.stamp, now_ns())  # ROS time, as the pedal node stamps
            msg.header.frame_id = "console"
            msg.buttons = [int(self._pedal_down)] + [0] * len(TRIGGER_LABELS)
            self._pedal.publish(msg)
            self.state.message = "takeover (pedal down)" if self._pedal_down else "handed back (pedal up)"


def run(args: argparse.Namespace) -> int:
    import rclpy
    from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor

    if not sys.stdin.isatty():
        raise UsageError("standard input is not a terminal", where="standard input",
                         fix="run it in a terminal (or a pty)")
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")  # as `run` and `demo` do
    rclpy.init()
    state = ConsoleState(session=args.session)
    console = ConsoleNode(state, args.recorder, args.teleop)
    executor = SingleThreadedExecutor()
    executor.add_node(console.node)
    def spin() -> None:
        with contextlib.suppress(ExternalShutdownException):
            executor.spin()

    spinner = threading.Thread(target=spin, daemon=True)
    spinner.start()
    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    period = 1.0 / max(args.refresh_hz, 0.5)
    try:
        tty.setcbreak(fd)
        while True:
            # A fresh pty reports 0 columns: fall back to a usual width.
            columns = os.get_terminal_size(sys.stdout.fileno()).columns if sys.stdout.isatty() else 0
            sys.stdout.write("\x1b[H\x1b[2J" + "\r\n".join(state.render(columns or 100)) + "\r\n")
            sys.stdout.flush()
            ready, _, _ = select.select([fd], [], [], period)
            if not ready:
                continue
            pressed = state.key(os.read(fd, 1).decode(errors="replace"))
            if pressed is None:
                continue
            action, arg = pressed
            if action == "quit":
                break
            console.act(action, arg)
            time.sleep(0.05)
    except KeyboardInterrupt:
        pass
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)
        rclpy.shutdown()  # wakes the spinning executor, which then returns
        spinner.join(2.0)
        console.close()
        executor.shutdown()
        console.node.destroy_node()
    return 0

