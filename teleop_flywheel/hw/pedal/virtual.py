"""Virtual foot pedals: key presses the pedal node reads as if a USB pedal made them.

`VirtualPedal` writes kernel-format `input_event` records into the pedal node's FIFO: the
simulator's stand-in (the `sim` graph points the pedal node at a FIFO), so the demo and
unattended evaluation runs exercise the real decoding, debouncing and stamping. `UInputPedal`
creates a real evdev device through /dev/uinput where the machine has one, so the rest of the
real-device path (lookup by name, grab, EVIOCSCLOCKID, ENODEV on unplug) runs too.
"""
from __future__ import annotations

import os
import time
from abc import ABC, abstractmethod

from teleop_flywheel.core.clock import now_ns
from teleop_flywheel.core.resources import config_path
from teleop_flywheel.hw.pedal.events import EV_KEY, EV_SYN, InputEvent, KeyMap, encode

UINPUT_NAME = "teleop_flywheel virtual pedal"


class _Pedal(ABC):
    """Presses the keys the pedal node's key map (config/pedal.yaml by default) assigns."""

    def __init__(self, keymap: KeyMap | None) -> None:
        self.keymap = keymap or KeyMap.load(config_path("pedal.yaml"))

    @abstractmethod
    def key(self, code: int, down: bool) -> None:
        """Press (down) or release one key, as the kernel would report it."""

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


class VirtualPedal(_Pedal):
    def __init__(self, fifo: str, keymap: KeyMap | None = None) -> None:
        super().__init__(keymap)
        self.fd = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)

    def key(self, code: int, down: bool) -> None:
        t = now_ns()
        os.write(self.fd, encode(InputEvent(t, EV_KEY, code, int(down))) + encode(InputEvent(t, EV_SYN, 0, 0)))

    def close(self) -> None:
        os.close(self.fd)


class UInputPedal(_Pedal):
    """A kernel input device named `UINPUT_NAME`; closing it is an unplug."""

    def __init__(self, keymap: KeyMap | None = None, name: str = UINPUT_NAME) -> None:
        from evdev import UInput, ecodes

        super().__init__(keymap)
        self.name = name
        self._ui = UInput({ecodes.EV_KEY: sorted({self.keymap.takeover, *self.keymap.labels})}, name=name)

    def key(self, code: int, down: bool) -> None:
        self._ui.write(EV_KEY, code, int(down))
        self._ui.syn()

    def close(self) -> None:
        self._ui.close()
