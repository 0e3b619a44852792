"""A camera that may come and go: open it, read frames, and when it fails — not there yet,
unplugged, stopped delivering — close it and open it again with backoff (`core.backoff`), as the
arm driver does with its port. The failure is one line on the log when it starts, `error` while it
lasts (the node's `/diagnostics`), and one line when frames come back. A source that cannot be
recorded as configured (`CameraFatalError`: stamps on the wrong clock, a format the camera did not
grant) is not retried: reopening cannot fix it, so it is `fatal` and the owner stops. No ROS: the
camera node runs `run()` on its capture thread.
"""
from __future__ import annotations

import threading
from collections.abc import Callable

from teleop_flywheel.core.backoff import Backoff
from teleop_flywheel.hw.camera.source import Frame, FrameSource
from teleop_flywheel.hw.errors import CameraError, CameraFatalError


class Capture:
    def __init__(self, label: str, opener: Callable[[], FrameSource], log: Callable[[str, str], None],
                 backoff: Backoff | None = None) -> None:
        self.label = label  # names the camera and its device in the log lines
        self._open = opener
        self._log = log  # (level, text): "error" | "info"
        self._backoff = backoff or Backoff()
        self._source: FrameSource | None = None
        self.error = ""  # why there are no frames now ("" while frames flow)
        self.fatal = ""  # why there never will be (the owner stops)
        self.reconnects = 0
        self._opened_once = False

    def run(self, stop: threading.Event, on_frame: Callable[[Frame], None]) -> None:
        """Deliver frames to `on_frame` (on this thread) until `stop` is set or a fatal error."""
        while not stop.is_set() and not self.fatal:
            if self._source is None and not self._connect():
                stop.wait(self._backoff.next_s())
                continue
            assert self._source is not None
            try:
                frame = self._source.read(timeout_s=0.2)
            except CameraError as exc:
                self._lost(exc)
                continue
            if frame is not None:
                on_frame(frame)
        self.close()

    def _connect(self) -> bool:
        try:
            self._source = self._open()
        except CameraError as exc:
            self._failed(exc, "retrying with backoff")
            return False
        if self._opened_once:
            self.reconnects += 1
            self._log("info", f"{self.label}: reconnected, frames again")
        elif self.error:  # it was not there at start: say that it is now
            self._log("info", f"{self.label}: opened, frames")
        self._opened_once = True
        self.error = ""
        self._backoff.reset()
        return True

    def _lost(self, exc: CameraError) -> None:
        self.close()
        self._failed(exc, "reopening with backoff")

    def _failed(self, exc: CameraError, then: str) -> None:
        if isinstance(exc, CameraFatalError):
            self.fatal = self.error = str(exc)
            return
        if str(exc) != self.error:  # one line per new reason, not one per retry
            self._log("error", f"{exc}; {then}")
        self.error = str(exc)

    def close(self) -> None:
        """Release the source (idempotent)."""
        if self._source is not None:
            self._source.close()
            self._source = None
