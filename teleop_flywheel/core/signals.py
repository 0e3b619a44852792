"""SIGINT/SIGTERM as a `threading.Event`, without the deadlock of setting it in the handler.

Python runs a signal handler in the main thread between two bytecodes — also between the two
bytecodes of `Event.wait()` that hold the event's internal lock. A handler that calls `stop.set()`
there waits for a lock its own thread holds, forever: a `sim-bus` whose supervisor had died (its
SIGTERM from PR_SET_PDEATHSIG landed inside `stop.wait(0.2)`) was still alive a minute later.
So the handler here only writes a byte to a pipe (a system call, no lock), and a thread of its own
reads it and sets the event. The pipe is also the interpreter's wakeup fd, written by the C-level
handler the moment the signal arrives: a Python handler runs only once the main thread is back in
Python, and a main thread waiting in C (a node's executor, up to NODE_POLL_S) ran it only then.
"""
from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterable
from types import FrameType, TracebackType
from typing import Any

_CLOSE = b"\xff"  # not a signal number: the wakeup fd carries those


class SignalStop:
    """`with SignalStop(stop):` — SIGINT and SIGTERM (or `signals`) set `stop`; the previous handlers
    come back on exit. `then` runs in the handler afterwards (it may raise, e.g. KeyboardInterrupt to
    abandon a blocking start); it must take no lock."""

    def __init__(self, stop: threading.Event, signals: Iterable[int] = (signal.SIGINT, signal.SIGTERM),
                 then: Callable[[], None] | None = None) -> None:
        self.stop = stop
        self.signals = tuple(signals)
        self._stopping = {0, *self.signals}  # any other handled signal's number may reach the wakeup fd too
        self.then = then
        self._read, self._write = os.pipe2(os.O_CLOEXEC)
        os.set_blocking(self._write, False)  # a handler never blocks; one pending byte is enough
        self._previous: dict[int, Any] = {}
        self._previous_wakeup = -1
        self._relay = threading.Thread(target=self._run, name="signal-stop", daemon=True)

    def _handler(self, _signum: int, _frame: FrameType | None) -> None:
        with contextlib.suppress(OSError):  # the pipe is full: a stop is pending already
            os.write(self._write, b"\0")
        if self.then is not None:
            self.then()

    def _run(self) -> None:
        while True:
            byte = os.read(self._read, 1)
            if not byte or byte == _CLOSE:
                return
            if byte[0] in self._stopping:  # the handler's byte, or the wakeup fd's signal number of ours
                self.stop.set()

    def __enter__(self) -> SignalStop:
        self._relay.start()
        self._previous = {sig: signal.signal(sig, self._handler) for sig in self.signals}
        self._previous_wakeup = signal.set_wakeup_fd(self._write, warn_on_full_buffer=False)
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        signal.set_wakeup_fd(self._previous_wakeup)
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        os.set_blocking(self._write, True)
        os.write(self._write, _CLOSE)
        self._relay.join()
        os.close(self._write)
        os.close(self._read)
