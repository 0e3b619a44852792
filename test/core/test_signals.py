"""A stop signal landing while the main thread holds the stop event's lock (inside `Event.wait`)."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time

from teleop_flywheel.core.signals import SignalStop

# What `stop.wait(0.2)` does between two of its bytecodes: the main thread holds the event's lock.
HOLDING_THE_LOCK = textwrap.dedent("""
    import os, signal, threading
    stop = threading.Event()
    {install}
    with stop._cond:
        os.kill(os.getpid(), signal.SIGTERM)  # the handler runs here, at the next bytecode
    print("stopped" if stop.wait(5) else "not stopped", flush=True)
""")


def _run(install: str, timeout_s: float) -> subprocess.CompletedProcess[str] | None:
    try:
        return subprocess.run([sys.executable, "-c", HOLDING_THE_LOCK.format(install=install)],
                              capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return None


def test_a_handler_that_sets_the_event_itself_deadlocks() -> None:
    """The premise: this is how sim-bus and every node stopped before, and it hangs for good. Seen,
    not waited for: the child's faulthandler prints its stack every 0.2 s, and the test returns at
    the first one that shows the handler inside `Event.set` while its own thread holds the lock."""
    install = ("signal.signal(signal.SIGTERM, lambda *_: stop.set())\n"
               "import faulthandler; faulthandler.dump_traceback_later(0.2, repeat=True)")
    child = subprocess.Popen([sys.executable, "-c", HOLDING_THE_LOCK.format(install=install)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        stack: list[str] = []
        assert child.stderr is not None
        for line in child.stderr:  # EOF: the child finished, so it did not deadlock
            if line.startswith("Thread "):
                stack = []
            stack.append(line.strip())
            if re.search(r'threading\.py", line \d+ in set', "\n".join(stack)) and "in <lambda>" in line:
                break
        else:
            raise AssertionError(f"the child did not deadlock: {child.stdout.read() if child.stdout else ''}")
    finally:
        child.kill()
        child.communicate()


def test_signal_stop_sets_the_event_after_the_lock_is_released() -> None:
    done = _run("from teleop_flywheel.core.signals import SignalStop\nSignalStop(stop).__enter__()", timeout_s=60)
    assert done is not None and done.stdout.strip() == "stopped", done


def test_handlers_come_back_and_then_runs_in_the_handler() -> None:
    stop, calls = threading.Event(), []
    before = signal.getsignal(signal.SIGUSR1)
    with SignalStop(stop, (signal.SIGUSR1,), then=lambda: calls.append(threading.current_thread().name)):
        assert signal.getsignal(signal.SIGUSR1) != before
        os.kill(os.getpid(), signal.SIGUSR1)
        time.sleep(0.01)  # the handler runs at the next bytecode of the main thread
        assert stop.wait(5)
    assert calls == [threading.main_thread().name]
    assert signal.getsignal(signal.SIGUSR1) == before
    assert not [t for t in threading.enumerate() if t.name == "signal-stop"]
