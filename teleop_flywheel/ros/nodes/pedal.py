"""`pedal` node: a USB foot pedal (Linux evdev) to `/pedal/joy` (sensor_msgs/Joy).

`buttons[0]` is the takeover pedal (debounced level), `buttons[1..5]` pulse when a key mapped
to a trigger label is pressed (TRIGGER_LABELS order). `header.stamp` is the kernel's event
time, never the time this node read it, taken on CLOCK_MONOTONIC and converted to ROS time as the
message is published (`common.stamp`; the teleop node converts it back to compare it with its own
clock). The node asks the kernel for
monotonic stamps (EVIOCSCLOCKID); where the kernel refuses, its CLOCK_REALTIME stamps are
converted with a realtime−monotonic offset measured by bracketing clock reads and re-measured
every check period (NTP may step realtime). `/diagnostics` says which clock is in use.

python-evdev finds a device given by name (its EVIOCGNAME, instead of parsing
/proc/bus/input/devices); the records themselves are read as raw `struct input_event` bytes,
so a FIFO is a device too: the simulator's virtual pedal writes kernel-format records into one
and the tests exercise the same decoding. The device is grabbed exclusively so pedal presses
do not type into a terminal. One this user may not read is `/diagnostics` ERROR "permission
denied on <path>" with its owner, mode and the fix (group `input`, or a udev rule), retried once
a second like a missing one.

Unplug: a read error (ENODEV), or the configured path no longer leading to the open file
(checked every second: a removed FIFO never errors, a replugged USB pedal comes back as a new
/dev/input/eventN behind the same by-id link) → `/diagnostics` ERROR naming the device and the
reason, the device is closed and reopened once a second until it returns. The node then publishes
a Joy **without buttons** — "the pedal is lost" — never a pedal-up: a pedal held down in a takeover
and unplugged was not released by anyone, and the teleop node holds the follower on it instead of
handing the arm back to the policy the operator stepped in to stop (docs/teleop.md). When the
device is back the node publishes its state (up, until it is pressed again), which ends that hold.
Both are stamped when the node noticed.

Heartbeat: once the device has been opened, the node also publishes its last state every
`1 / heartbeat_hz` s (10 Hz: 100 ms) with `frame_id` `pedal_heartbeat` (edges say `pedal`), stamped
when sent — the state while the device is open, a Joy without buttons while it is lost. A pedal
whose process died is then told from one nobody presses: the teleop node holds the follower when
no message of this node came for its
`pedal_timeout_ms` (500 ms: five heartbeats missed). A device never opened sends no heartbeat: a rig
without a pedal (the console's space bar stands in, `frame_id` `console`) is not held for it.
"""
from __future__ import annotations

import os
import select
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from diagnostic_msgs.msg import DiagnosticArray
from rclpy.node import Node
from sensor_msgs.msg import Joy

from teleop_flywheel.core.clock import (
    NS_PER_S,
    ClockMapping,
    now_ns,
    sample_mapping,
)
from teleop_flywheel.core.labels import TRIGGER_LABELS
from teleop_flywheel.core.resources import config_path
from teleop_flywheel.core.topics import DIAGNOSTICS, PEDAL_FRAME, PEDAL_HEARTBEAT_FRAME, PEDAL_JOY
from teleop_flywheel.hw.pedal.events import (
    MONOTONIC,
    REALTIME,
    WRITER,
    KeyMap,
    PedalState,
    device_changed,
    open_device,
    read_available,
    realtime_to_monotonic,
    resolve_device,
)
from teleop_flywheel.ros.errors import ParameterError
from teleop_flywheel.ros.nodes.common import STREAM_QOS, diag_array, diag_status, spin_node, stamp
from teleop_flywheel.ros.params import NodeParameters, NodeParams, spec

CHECK_NS = NS_PER_S  # how often the device path is checked (and a realtime offset re-measured)
HEARTBEAT_HZ = 10.0  # against the teleop node's 500 ms bound: five missed beats, not one late one


@dataclass
class PedalParams(NodeParams):
    device: str = spec("/dev/input/by-id/usb-foot-pedal-event-kbd", "event device: path, by-id link or evdev name "
                       "(a FIFO of input_event records works too)", required=True)
    keymap_file: str = spec("", "key map YAML; empty = the shipped config/pedal.yaml")
    grab: bool = spec(True, "grab the device exclusively (presses do not type into a terminal)")
    heartbeat_hz: float = spec(HEARTBEAT_HZ, "the last state is re-published this often once the device was opened "
                               "(Hz): a teleop node holds when it stops", range=(1.0, 100.0))


class PedalNode(Node):
    def __init__(self, node_name: str = "pedal", **kwargs: Any) -> None:
        super().__init__(node_name, **kwargs)
        p = NodeParameters(self, PedalParams).values
        self.device, self.grab = p.device, p.grab
        self._beat_ns = int(NS_PER_S / p.heartbeat_hz)
        self._opened = False  # the device was open once: from then on a heartbeat
        keymap_file = p.keymap_file or str(config_path("pedal.yaml"))
        try:
            self.state = PedalState(KeyMap.load(keymap_file))
        except ValueError as exc:
            raise ParameterError(self.get_fully_qualified_name(), "keymap_file", keymap_file, str(exc)) from None
        self._pub = self.create_publisher(Joy, PEDAL_JOY, STREAM_QOS)
        self._diag = self.create_publisher(DiagnosticArray, DIAGNOSTICS, 10)
        self._error = f"{self.device}: not opened yet"
        self._lost = ""  # why the open device was lost, until it is back
        self._path = ""  # what the device resolved to when opened
        self._stamp_clock = ""
        self._offset: ClockMapping | None = None  # realtime→monotonic, when the kernel stamps realtime
        self._events = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="pedal", daemon=True)
        self._thread.start()
        self.create_timer(1.0, self._publish_diagnostics)

    def _publish(self, stamp_ns: int, label_index: int | None = None, lost: bool = False,
                 heartbeat: bool = False) -> None:
        msg = Joy()
        stamp(msg.header.stamp, stamp_ns)
        msg.header.frame_id = PEDAL_HEARTBEAT_FRAME if heartbeat else PEDAL_FRAME
        if lost:  # no buttons: there is no pedal to read them from
            self._pub.publish(msg)
            return
        buttons = [1 if self.state.down else 0] + [0] * len(TRIGGER_LABELS)
        if label_index is not None:
            buttons[label_index + 1] = 1
        msg.buttons = buttons
        self._pub.publish(msg)
        if label_index is not None:  # a label is a press: release it right away
            msg.buttons = [buttons[0]] + [0] * len(TRIGGER_LABELS)
            self._pub.publish(msg)

    def _handle(self, actions: Sequence[tuple[str, object, int]]) -> None:
        for kind, value, stamp_ns in actions:
            self._events += 1
            if kind == "takeover":
                self._publish(stamp_ns)
            else:
                self._publish(stamp_ns, TRIGGER_LABELS.index(str(value)))

    def _open(self) -> int:
        """Resolve and open the device; -1 (with the reason in the diagnostics) if it is not there."""
        try:
            path = resolve_device(self.device)
            fd, clock = open_device(path, self.grab)
        except OSError as exc:
            why = exc.strerror or str(exc)
            self._error = f"{self._lost}; not back yet ({why})" if self._lost else f"{self.device}: {why}"
            return -1
        back = bool(self._lost)
        self._opened = True
        self._path, self._stamp_clock, self._error, self._lost = path, clock, "", ""
        self._offset = sample_mapping() if clock == REALTIME else None
        if back:  # its state ends the teleop node's lost-pedal hold
            self._publish(now_ns())
        self._publish_diagnostics()
        return fd

    def _unplug(self, fd: int, reason: str) -> None:
        """Close a lost device and say so: a Joy without buttons, never a release nobody made."""
        os.close(fd)
        self._lost = self._error = f"{self.device}: unplugged: {reason}"
        self.state.forget()
        self._publish(now_ns(), lost=True)
        self._publish_diagnostics()

    def _heartbeat(self, next_beat: int) -> int:
        """The last state again once a period (lost: a Joy without buttons); the next beat's time."""
        t = now_ns()
        if t < next_beat:
            return next_beat
        if self._opened:
            self._publish(t, lost=bool(self._lost), heartbeat=True)
        following = next_beat + self._beat_ns
        return following if following > t else t + self._beat_ns  # after a stall: on from now, no burst

    def _loop(self) -> None:
        fd = -1
        rest = b""
        next_check = 0
        next_beat = 0
        next_open = 0
        while not self._stop.is_set():
            next_beat = self._heartbeat(next_beat)
            if fd < 0:
                if now_ns() >= next_open:  # retried once a check period; beating meanwhile
                    fd, rest = self._open(), b""
                    next_open = now_ns() + CHECK_NS
                if fd < 0:
                    self._stop.wait(max(0, min(next_open, next_beat) - now_ns()) / NS_PER_S)
                    continue
                next_check = now_ns() + CHECK_NS
            if now_ns() >= next_check:
                next_check = now_ns() + CHECK_NS
                reason = device_changed(self._path, fd)
                if reason:
                    self._unplug(fd, reason)
                    fd = -1
                    continue
                if self._offset is not None:
                    self._offset = sample_mapping()
            try:
                ready, _, _ = select.select([fd], [], [], 0.01)
                if ready:
                    events, rest = read_available(fd, rest)
                    if self._offset is not None:
                        events = realtime_to_monotonic(events, self._offset.offset_ns)
                    for ev in events:
                        self._handle(self.state.feed(ev))
            except OSError as exc:  # a real device unplugged: ENODEV
                self._unplug(fd, f"read failed: {exc.strerror or exc}")
                fd = -1
                continue
            self._handle(self.state.settle(now_ns()))
        if fd >= 0:
            os.close(fd)

    def _clock_text(self) -> str:
        if self._stamp_clock == REALTIME and self._offset is not None:
            return (f"realtime (EVIOCSCLOCKID refused), converted: offset {self._offset.offset_ns} ns "
                    f"± {self._offset.uncertainty_ns} ns")
        return {MONOTONIC: "monotonic (EVIOCSCLOCKID)",
                WRITER: "as written (FIFO/file: the writer's monotonic stamps)"}.get(self._stamp_clock, "none yet")

    def _publish_diagnostics(self) -> None:
        level, message = ("ERROR", self._error) if self._error else ("OK", f"{self.device} open")
        values = {"device": self.device, "path": self._path, "clock": self._clock_text(),
                  "events": self._events, "down": self.state.down}
        self._diag.publish(diag_array([diag_status(f"{self.get_name()}: foot pedal", level, message,
                                                   values, hardware_id=self.device)]))

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2.0)


def main() -> int:
    return spin_node(PedalNode, name="pedal")


if __name__ == "__main__":
    sys.exit(main())
