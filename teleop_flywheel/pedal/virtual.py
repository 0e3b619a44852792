"""A virtual foot pedal: kernel-format key events written into the pedal node's FIFO.

The simulator's stand-in for a USB pedal (the `sim` graph points the pedal node at a FIFO), so
the demo and unattended evaluation runs exercise the real decoding, debouncing and stamping.
"""
from __future__ import annotations

import os
import time

from teleop_flywheel.clock import now_ns
from teleop_flywheel.graph import config_dir
from teleop_flywheel.pedal.events import EV_KEY, EV_SYN, InputEvent, KeyMap, encode


class VirtualPedal:
    """Presses the keys the pedal node's key map (config/pedal.yaml by default) assigns."""

    def __init__(self, fifo: str, keymap: KeyMap | None = None) -> None:
        self.keymap = keymap or KeyMap.load(config_dir() / "pedal.yaml")
        self.fd = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)

    def key(self, code: int, down: bool) -> None:
        t = now_ns()
        os.write(self.fd, encode(InputEvent(t, EV_KEY, code, int(down))) + encode(InputEvent(t, EV_SYN, 0, 0)))

    def tap(self, code: int) -> None:
        self.key(code, True)
        time.sleep(0.05)
        self.key(code, False)

    def takeover(self, down: bool) -> None:
        self.key(self.keymap.takeover, down)

    def label(self, trigger: str) -> None:
        codes = [code for code, name in self.keymap.labels.items() if name == trigger]
        if not codes:
            raise ValueError(f"pedal key map has no key for trigger label {trigger!r}")
        self.tap(codes[0])

    def close(self) -> None:
        os.close(self.fd)
