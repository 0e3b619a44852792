"""`pedal` node: a USB foot pedal (Linux evdev) to `/pedal/joy` (sensor_msgs/Joy).

`buttons[0]` is the takeover pedal (debounced level), `buttons[1..5]` pulse when a key mapped
to a trigger label is pressed (TRIGGER_LABELS order). `header.stamp` is the kernel's event
time on CLOCK_MONOTONIC (requested with EVIOCSCLOCKID), never the time this node read it.
The device is grabbed exclusively so pedal presses do not type into a terminal. Unplugged →
`/diagnostics` ERROR naming the device, reopened once a second until it returns. A FIFO works
as a device too: the simulator's virtual pedal writes `struct input_event` records into one.
"""
from __future__ import annotations

import os
import select
import threading

from diagnostic_msgs.msg import DiagnosticArray
from rcl_interfaces.msg import ParameterDescriptor
from rclpy.node import Node
from sensor_msgs.msg import Joy

from teleop_flywheel.clock import fill_stamp, now_ns
from teleop_flywheel.graph import config_dir
from teleop_flywheel.labels import TRIGGER_LABELS
from teleop_flywheel.nodes.common import STREAM_QOS, diag_array, diag_status, spin_node
from teleop_flywheel.pedal.events import KeyMap, PedalState, open_device, read_available, resolve_device


class PedalNode(Node):
    def __init__(self, node_name: str = "pedal", **kwargs: object) -> None:
        super().__init__(node_name, **kwargs)

        def param(name: str, default: object, text: str) -> object:
            return self.declare_parameter(name, default, ParameterDescriptor(description=text)).value

        self.device = str(param("device", "/dev/input/by-id/usb-foot-pedal-event-kbd", "event device: path, by-id or name"))
        keymap_file = str(param("keymap_file", str(config_dir() / "pedal.yaml"), "key map YAML"))
        self.grab = bool(param("grab", True, "grab the device exclusively"))
        self.state = PedalState(KeyMap.load(keymap_file))
        self._labels = [False] * len(TRIGGER_LABELS)
        self._pub = self.create_publisher(Joy, "/pedal/joy", STREAM_QOS)
        self._diag = self.create_publisher(DiagnosticArray, "/diagnostics", 10)
        self._error = "not opened yet"
        self._events = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="pedal", daemon=True)
        self._thread.start()
        self.create_timer(1.0, self._publish_diagnostics)

    def _publish(self, stamp_ns: int, label_index: int | None = None) -> None:
        msg = Joy()
        fill_stamp(msg.header.stamp, stamp_ns)
        msg.header.frame_id = "pedal"
        buttons = [1 if self.state.down else 0] + [0] * len(TRIGGER_LABELS)
        if label_index is not None:
            buttons[label_index + 1] = 1
        msg.buttons = buttons
        self._pub.publish(msg)
        if label_index is not None:  # a label is a press: release it right away
            msg.buttons = [buttons[0]] + [0] * len(TRIGGER_LABELS)
            self._pub.publish(msg)

    def _handle(self, actions: list[tuple[str, object, int]]) -> None:
        for kind, value, stamp in actions:
            self._events += 1
            if kind == "takeover":
                self._publish(stamp)
            else:
                self._publish(stamp, TRIGGER_LABELS.index(str(value)))

    def _loop(self) -> None:
        fd = -1
        rest = b""
        while not self._stop.is_set():
            if fd < 0:
                try:
                    fd = open_device(resolve_device(self.device), self.grab)
                    self._error = ""
                except OSError as exc:
                    self._error = f"{self.device}: {exc.strerror if hasattr(exc, 'strerror') and exc.strerror else exc}"
                    self._stop.wait(1.0)
                    continue
            try:
                ready, _, _ = select.select([fd], [], [], 0.01)
                if ready:
                    events, rest = read_available(fd, rest)
                    for ev in events:
                        self._handle(self.state.feed(ev))
            except OSError as exc:  # unplugged: ENODEV
                self._error = f"{self.device}: {exc.strerror or exc} (unplugged?)"
                os.close(fd)
                fd = -1
                continue
            self._handle(self.state.settle(now_ns()))
        if fd >= 0:
            os.close(fd)

    def _publish_diagnostics(self) -> None:
        level, message = ("ERROR", self._error) if self._error else ("OK", f"{self.device} open")
        self._diag.publish(diag_array([diag_status(f"{self.get_name()}: foot pedal", level, message,
                                                   {"device": self.device, "events": self._events,
                                                    "down": self.state.down}, hardware_id=self.device)]))

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2.0)


def main() -> int:
    return spin_node(PedalNode)
