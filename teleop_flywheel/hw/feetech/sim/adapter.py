"""The USB-serial adapter between the host and a simulated bus: when bytes actually cross it.

A pseudo-terminal hands bytes over at once; a real adapter does not, and its timing, not the
1 Mbaud wire, sets how fast an arm can be read:

- **FTDI** (FT232R and kin, `ftdi_sio`): received bytes wait in the chip until 62 of them fill
  a USB packet or its *latency timer* fires. The timer is free-running (the chip sends a status
  packet each period even when idle) and restarts when a full packet leaves. Linux's default is
  16 ms, so a 72-byte sync-read reply leaves 62 bytes at once and the last 10 up to 16 ms later:
  a read-per-tick loop locks to the timer at about 55 Hz. Set to 1 ms (`latency_timer` in sysfs,
  or the udev rule `find-port` writes), the same read takes 1-2 ms.
- **CH340/CH343** (`ch341` or `cdc_acm`): no latency timer; transfers wait for the next 1 ms
  USB frame in each direction, and the chip holds a reply briefly for more bytes: 2-3.5 ms per
  sync read.
- **pty**: nothing; the rates measured on it are the bus's and Python's, not an adapter's.

Host → servo bytes wait for the next USB frame (`out_delay_s`); servo → host bytes are handed to
`Delivery.schedule` with the time each finished on the wire, and written to the pty when the
adapter would have passed them on.
"""
from __future__ import annotations

import contextlib
import heapq
import os
import random
import threading
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Adapter:
    """Timing of one kind of USB-serial adapter (seconds)."""

    name: str
    description: str
    usb_frame_s: float = 0.0  # transfers wait for the next frame boundary (0 = none: a pty)
    latency_timer_s: float = 0.0  # FTDI: a partial packet leaves when this timer fires (0 = no timer)
    packet_bytes: int = 0  # FTDI: a full packet leaves at once
    hold_s: float = 0.0  # CH34x: the chip waits this long after the last byte for more

    def out_delay_s(self, now: float) -> float:
        """How long a request written now waits before the adapter starts sending it."""
        if not self.usb_frame_s:
            return 0.0
        return self.usb_frame_s - (now % self.usb_frame_s)


ADAPTERS: dict[str, Adapter] = {
    "pty": Adapter("pty", "a pseudo-terminal: no USB, no adapter"),
    "ftdi16": Adapter("ftdi16", "FTDI FT232 at Linux's default 16 ms latency timer",
                      usb_frame_s=0.001, latency_timer_s=0.016, packet_bytes=62),
    "ftdi1": Adapter("ftdi1", "FTDI FT232 with its latency timer set to 1 ms (the udev rule of find-port)",
                     usb_frame_s=0.001, latency_timer_s=0.001, packet_bytes=62),
    "ch343": Adapter("ch343", "WCH CH340/CH343 (ch341 or cdc_acm driver, no latency timer)",
                     usb_frame_s=0.001, hold_s=0.0005),
}


def adapter(name: str) -> Adapter:
    try:
        return ADAPTERS[name]
    except KeyError:
        raise ValueError(f"unknown adapter {name!r}: one of {', '.join(ADAPTERS)}") from None


class Delivery:
    """Writes servo → host bytes to the pty's master side when `adapter` would deliver them.

    `schedule(chunks)` takes (wire_done, bytes) pairs in wire order; a thread writes each byte
    at its delivery time, in order. Safe to call from the simulator's serving thread.
    """

    def __init__(self, adapter: Adapter, fd: int, seed: int = 0) -> None:
        self.adapter = adapter
        self._fd = fd
        self._heap: list[tuple[float, int, bytes]] = []
        self._seq = 0
        self._cond = threading.Condition()
        self._stop = False
        # The FTDI timer's phase relative to the host's clock is whatever it was at plug-in.
        self._timer_origin = time.monotonic() - random.Random(seed).random() * (adapter.latency_timer_s or 0.0)
        self._buffered = 0  # FTDI: bytes in the chip waiting for the timer or a full packet
        self._last_delivery = 0.0
        self._thread = threading.Thread(target=self._run, name=f"sim-adapter-{adapter.name}", daemon=True)
        self._thread.start()

    def close(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify()
        self._thread.join(1.0)

    # -- timing model ---------------------------------------------------------------------
    def _frame_after(self, t: float) -> float:
        frame = self.adapter.usb_frame_s
        return t if not frame else (int(t / frame) + 1) * frame

    def _timer_after(self, t: float) -> float:
        period = self.adapter.latency_timer_s
        k = int((t - self._timer_origin) / period) + 1
        return self._timer_origin + k * period

    def _deliveries(self, chunks: list[tuple[float, bytes]]) -> list[tuple[float, bytes]]:
        """(host time, bytes) for each piece of the chunks, as the adapter passes them on."""
        a = self.adapter
        if not a.usb_frame_s:  # a pty: the whole answer at once, when its last byte is on the wire
            return [(chunks[-1][0], b"".join(data for _done, data in chunks))]
        out: list[tuple[float, bytes]] = []
        if a.latency_timer_s:
            pending = bytearray()
            tick = 0.0  # when the timer fires for what is pending
            for done, data in chunks:  # every byte of one status finishes with it (within 10 us)
                for b in data:
                    if pending and done >= tick:  # the timer fired before this byte came in
                        out.append((self._frame_after(tick), bytes(pending)))
                        pending.clear()
                    if not pending:
                        tick = self._timer_after(done)
                    pending.append(b)
                    if len(pending) == a.packet_bytes:  # a full packet leaves at once
                        out.append((self._frame_after(done), bytes(pending)))
                        self._timer_origin = done
                        pending.clear()
            if pending:
                out.append((self._frame_after(tick), bytes(pending)))
            return out
        # CH34x: the reply leaves once the chip has waited `hold_s` without a new byte, on a frame.
        last = chunks[-1][0]
        return [(self._frame_after(last + a.hold_s), b"".join(data for _done, data in chunks))]

    def schedule(self, chunks: list[tuple[float, bytes]]) -> None:
        if not chunks:
            return
        deliveries = self._deliveries(chunks)
        with self._cond:
            for at, data in deliveries:
                at = max(at, self._last_delivery)  # an adapter never reorders bytes
                self._last_delivery = at
                heapq.heappush(self._heap, (at, self._seq, data))
                self._seq += 1
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stop and not self._heap:
                    self._cond.wait()
                if self._stop:
                    return
                at, _seq, data = self._heap[0]
                delay = at - time.monotonic()
                if delay > 0:
                    self._cond.wait(delay)
                    continue
                heapq.heappop(self._heap)
            with contextlib.suppress(OSError):  # the pty closed (an unplug): the bytes are lost, as on a pulled cable
                os.write(self._fd, data)
