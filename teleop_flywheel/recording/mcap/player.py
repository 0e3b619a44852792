"""Replaying a bag in real time without ROS: `BagSource` (indexed, seekable raw messages) and
`Player`, which paces them (× speed) with play, pause, seek and loop, handing each message to a
callback when its time comes. `teleop-flywheel replay` drives it to Foxglove
(`ros/session/foxglove/playback.py`) and onto the ROS graph (`ros/session/republish.py`).
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from teleop_flywheel.recording.mcap.exceptions import BagReadError, ReplayError
from teleop_flywheel.recording.mcap.reader import IndexedBag, RawMessage


class BagSource(IndexedBag):
    """Indexed, seekable access to one bag's raw messages in log-time order (`recording.reader`)."""

    def __init__(self, bag: Path) -> None:
        try:
            super().__init__(bag)
        except BagReadError as exc:
            raise ReplayError(str(exc)) from exc


class Player:
    """Paces a BagSource in real time (× speed) with play, pause and seek.

    Thread-safe controls; `run()` blocks until the bag ends (or forever with loop=True)
    or `stop()` is called. `emit(msg)` is called for each message when its time comes.
    """

    def __init__(
        self,
        source: BagSource,
        emit: Callable[[RawMessage], None],
        speed: float = 1.0,
        playing: bool = True,
        loop: bool = False,
        on_time: Callable[[int], None] | None = None,
        on_end: Callable[[], None] | None = None,
    ) -> None:
        if speed <= 0:
            raise ValueError(f"playback rate must be positive, got {speed}")
        self.source = source
        self._emit = emit
        self._on_time = on_time
        self._on_end = on_end
        self._lock = threading.Condition()
        self._speed = speed
        self._playing = playing
        self._position = source.start_ns
        self._seek_to: int | None = None
        self._stopped = False
        self.loop = loop
        self.ended = False
        self.emitted = 0

    # -- controls -----------------------------------------------------------------
    def play(self, speed: float | None = None) -> None:
        """Play (at `speed` if given); after the end, from the start again unless a seek is pending."""
        with self._lock:
            if speed is not None and speed > 0:
                self._speed = speed
            if self.ended and self._seek_to is None:
                self._seek_to = self._position = self.source.start_ns
            self._playing = True
            self.ended = False
            self._lock.notify_all()

    def pause(self) -> None:
        with self._lock:
            self._playing = False
            self._lock.notify_all()

    def seek(self, time_ns: int) -> None:
        with self._lock:
            self._seek_to = min(max(int(time_ns), self.source.start_ns), self.source.end_ns)
            self._position = self._seek_to
            self.ended = False
            self._lock.notify_all()

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            self._lock.notify_all()

    @property
    def position_ns(self) -> int:
        with self._lock:
            return self._position

    @property
    def playing(self) -> bool:
        with self._lock:
            return self._playing and not self.ended

    @property
    def speed(self) -> float:
        with self._lock:
            return self._speed

    # -- loop ---------------------------------------------------------------------
    def run(self) -> None:
        while True:
            with self._lock:
                if self._stopped:
                    return
                start = self._seek_to if self._seek_to is not None else self._position
                self._seek_to = None
            finished = self._play_from(start)
            if finished:
                with self._lock:
                    if self.loop and not self._stopped:
                        self._position = self.source.start_ns
                        continue
                    self.ended = True
                    self._playing = False
                if self._on_end is not None:  # outside the lock: it reads the player's state
                    self._on_end()
                with self._lock:
                    while not self._stopped and self.ended:
                        self._lock.wait(0.1)
                    if self._stopped:
                        return

    def _play_from(self, start_ns: int) -> bool:
        """Emit from start_ns; True when the bag ran out, False when interrupted by a seek/stop."""
        anchor_bag = start_ns
        anchor_wall = time.monotonic_ns()
        anchor_speed = self.speed
        for msg in self.source.messages(start_ns):
            while True:
                with self._lock:
                    if self._stopped or self._seek_to is not None:
                        return False
                    if not self._playing:
                        self._lock.wait(0.05)
                        # Resume pacing from where playback stands now.
                        anchor_bag, anchor_wall, anchor_speed = self._position, time.monotonic_ns(), self._speed
                        continue
                    if self._speed != anchor_speed:
                        anchor_bag, anchor_wall, anchor_speed = self._position, time.monotonic_ns(), self._speed
                due_wall = anchor_wall + (msg.log_time - anchor_bag) / anchor_speed
                wait_s = (due_wall - time.monotonic_ns()) / 1e9
                if wait_s <= 0:
                    break
                with self._lock:
                    self._lock.wait(min(wait_s, 0.05))
            self._emit(msg)
            self.emitted += 1
            with self._lock:
                self._position = msg.log_time
            if self._on_time is not None:
                self._on_time(msg.log_time)
        return True
