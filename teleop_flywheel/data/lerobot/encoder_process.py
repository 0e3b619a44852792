"""Every video encode runs in a child process the caller watches: a stalled encoder ends the run.

An encoder can hang for good inside its C library: SVT-AV1 3.1.x deadlocks at times while it
flushes (every one of its threads waiting on a semaphore, the CPU idle; SVT-AV1 issues #2300,
#2311) — a convert once sat in `VideoEncoder.close` for ten minutes and said nothing. A thread
inside a C call cannot be interrupted, so the encoder lives in a process of its own, started from
the forkserver (which has PyAV imported: `context()`), and the caller streams raw I420 frames to
it through a pipe. Progress is the child taking frames from the pipe, and its answer once the pipe
is closed (the flush, one call in PyAV). When neither happens for `stall_s` seconds (default
`ENCODE_STALL_S`) the child is killed, its half-written file removed, and `EncoderStalled` names
the file; the commands name the bag and camera and stop, the dataset unchanged (nothing is
published before every episode is encoded).

The encode itself is the one the converter always ran (same options, same PyAV): the same frames
give the same bytes (test_video.py).
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import multiprocessing
import multiprocessing.context
import multiprocessing.forkserver
import os
import select
import sys
import time
from collections.abc import Iterator
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

# Imported here, not in the child: the forkserver preloads this module, so a child starts with them.
import av
import numpy as np
from av.video.stream import VideoStream

from teleop_flywheel.core.priority import keep_scheduling
from teleop_flywheel.data.errors import EncoderStalled

ENCODE_STALL_S = 60.0  # seconds without progress: a flush of SVT-AV1's lookahead takes seconds at most
_PIPE_BYTES = 1 << 20  # a 640x480 frame is 460 KB: one write, where the kernel lets us size the pipe
_F_SETPIPE_SZ = 1031


def context() -> multiprocessing.context.ForkServerContext | multiprocessing.context.SpawnContext:
    """forkserver where available (forking a process that runs threads — DDS, tqdm, a decoder pool —
    is unsafe), its server with this module (PyAV) imported, so a child starts in milliseconds. The
    preload takes effect if this process's forkserver is not running yet."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    ctx: multiprocessing.context.ForkServerContext = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload([__name__])
    return ctx


def _own_forkserver_after_fork() -> None:
    """In a process forked from one that started the forkserver (a test forking a convert; a worker
    pool's fork): that server is not this process's child, and CPython 3.11 fails every start
    through it (`ChildProcessError`, waiting for a pid that is not ours). This process forgets it and
    starts its own when it first needs one."""
    server: Any = multiprocessing.forkserver._forkserver  # its state is private: no public reset in 3.11
    if getattr(server, "_forkserver_pid", None) is None:
        return
    with contextlib.suppress(OSError, TypeError):
        os.close(server._forkserver_alive_fd)  # our copy: the process that started it keeps its own
    server._forkserver_address = server._forkserver_alive_fd = server._forkserver_pid = None


os.register_at_fork(after_in_child=_own_forkserver_after_fork)


@contextlib.contextmanager
def _main_not_rerun() -> Iterator[None]:
    """While a child is started: multiprocessing runs the parent's main script again in every child
    it starts from a script (`python script.py`: not `-m`, whose main it skips), to find functions
    defined there — the child's whole start-up when that script imports much (a bench: ~1 s a
    child, measured). The encoder needs nothing from it, so the child is not told where it is."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None) if getattr(main, "__spec__", None) is None else None
    if main is None or path is None:
        yield
        return
    del main.__file__
    try:
        yield
    finally:
        main.__file__ = path


class EncoderProcess:
    """One mp4 written by a child process: `send` frames of `frame_bytes` bytes, then `finish`."""

    def __init__(self, path: Path, width: int, height: int, fps: int, codec_name: str, options: dict[str, str],
                 stall_s: float = ENCODE_STALL_S) -> None:
        if stall_s <= 0:
            raise ValueError(f"stall_s must be positive, got {stall_s}")
        self.path, self.stall_s = path, stall_s
        self.frame_bytes = width * height * 3 // 2
        ctx = context()
        frames_r, frames_w = ctx.Pipe(duplex=False)
        replies_r, replies_w = ctx.Pipe(duplex=False)
        self._proc = ctx.Process(target=_serve, name=f"encode {path.name}", daemon=True,
                                 args=(frames_r, replies_w, str(path), width, height, fps, codec_name, options))
        with _main_not_rerun():
            self._proc.start()
        frames_r.close()
        replies_w.close()
        self._frames: Connection | None = frames_w
        self._replies = replies_r
        self._buffer = b""
        with contextlib.suppress(OSError):
            fcntl.fcntl(frames_w.fileno(), _F_SETPIPE_SZ, _PIPE_BYTES)
        os.set_blocking(frames_w.fileno(), False)
        self._answer("opening")

    def send(self, data: bytes | memoryview) -> None:
        """Hand one frame to the child; EncoderStalled when it takes none of it for `stall_s`."""
        view = memoryview(data).cast("B")
        if len(view) != self.frame_bytes:
            raise ValueError(f"{self.path}: a frame of {len(view)} bytes, expected {self.frame_bytes}")
        if self._frames is None:
            raise ValueError(f"{self.path}: the encoder is closed")
        fd = self._frames.fileno()
        while view:
            readable, writable, _ = select.select([self._replies], [fd], [], self.stall_s)
            if readable:  # the child speaks mid-stream only to say it failed, or it ended
                self._answer("encoding")
            if not writable:
                self._stalled("took no frame")
            try:
                view = view[os.write(fd, view):]
            except BlockingIOError:
                continue
            except BrokenPipeError:
                self._answer("encoding")

    def finish(self) -> None:
        """Close the stream: the child flushes the encoder and closes the file; wait for it (watched)."""
        if self._frames is None:
            return
        self._frames.close()
        self._frames = None
        self._answer("finishing")
        self._proc.join()

    def abort(self) -> None:
        """Kill the child (whatever it is doing) and remove what it wrote."""
        if self._frames is not None:
            self._frames.close()
            self._frames = None
        if self._proc.is_alive():
            self._proc.kill()
        self._proc.join()
        self._replies.close()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    def _stalled(self, what: str) -> None:
        self.abort()
        raise EncoderStalled(f"{self.path}: the video encoder {what} for {self.stall_s:g} s (its process "
                             "was killed and its file removed)")

    def _answer(self, doing: str) -> None:
        """Wait (at most `stall_s`) for the child's next answer: "ok" goes on, anything else raises."""
        deadline = time.monotonic() + self.stall_s
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not self._replies.poll(left):
                self._stalled(f"made no progress {doing}")
            try:
                chunk = os.read(self._replies.fileno(), 4096)
            except OSError as exc:
                if exc.errno != errno.EINTR:
                    raise
                continue
            if not chunk:
                self.abort()
                raise RuntimeError(f"{self.path}: the video encoder process ended while {doing} "
                                   f"(exit code {self._proc.exitcode})")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        if line != b"ok":
            self.abort()
            raise ValueError(f"{self.path}: {line.decode(errors='replace')}")


def _serve(frames: Connection, replies: Connection, path: str, width: int, height: int, fps: int,
           codec_name: str, options: dict[str, str]) -> None:
    """In the child: open the encoder, encode every whole frame the pipe brings, flush at its end."""

    def say(text: str) -> None:
        os.write(replies.fileno(), text.replace("\n", " ").encode() + b"\n")

    try:
        container = av.open(path, "w")
        stream = container.add_stream(codec_name, rate=fps, options=options)
        if not isinstance(stream, VideoStream):
            raise ValueError(f"{codec_name}: not a video codec")
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        with keep_scheduling():  # SVT-AV1 makes a root process real-time when it opens (core/priority.py)
            stream.codec_context.open()
    except Exception as exc:  # noqa: BLE001 - the parent raises it, naming the file
        say(f"cannot open the encoder: {type(exc).__name__}: {exc}")
        return
    say("ok")
    size = width * height * 3 // 2
    buf = bytearray(size)
    view = memoryview(buf)
    with open(frames.fileno(), "rb", buffering=0, closefd=False) as pipe:
        try:
            while True:
                got = 0
                while got < size:
                    n = pipe.readinto(view[got:])
                    if not n:
                        break
                    got += n
                if got == 0:
                    break
                if got < size:
                    raise ValueError(f"a frame cut short ({got} of {size} bytes)")
                yuv = np.frombuffer(buf, np.uint8).reshape(height * 3 // 2, width)
                container.mux(stream.encode(av.VideoFrame.from_ndarray(yuv, format="yuv420p")))
            container.mux(stream.encode(None))
            container.close()
        except Exception as exc:  # noqa: BLE001 - the parent raises it, naming the file
            say(f"{type(exc).__name__}: {exc}")
            return
    say("ok")
