"""Reading a program's screen through a pty, for the tests that drive terminal UIs."""
from __future__ import annotations

import os
import re
import select
import time


def read_until(fd: int, pattern: str, timeout: float = 60.0) -> str:
    """Everything read from `fd` until `pattern` (regex, `.` matching newlines) appears in it."""
    buf = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            try:
                buf += os.read(fd, 65536)
            except OSError:
                break
            text = buf.decode(errors="replace")
            if re.search(pattern, text, re.S):
                return text
    raise AssertionError(f"never saw {pattern!r}; last output:\n{buf.decode(errors='replace')[-3000:]}")


def read_for(fd: int, seconds: float) -> str:
    """Everything read from `fd` over `seconds`: the program keeps drawing meanwhile, never blocked
    on a full pty (a test that merely sleeps freezes a program whose loop waits on its screen)."""
    buf = b""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        ready, _, _ = select.select([fd], [], [], min(left, 0.2))
        if ready:
            try:
                buf += os.read(fd, 65536)
            except OSError:
                break
    return buf.decode(errors="replace")
