"""Test-wide environment: DDS stays on this machine, every run gets its own domain."""
from __future__ import annotations

import contextlib
import multiprocessing.forkserver
import os
import random
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.procs import children, cmdline
from support.realtime import TEST_DIR, realtime, whole_machine

import teleop_flywheel  # noqa: F401 - before any test module imports numpy: its BLAS thread setting
from teleop_flywheel.data.lerobot.encoder_process import context

# Set before anything imports rclpy. A run's domain is fixed once so that child processes
# (simulators, recorders under test) started by a test join the same graph.
os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
os.environ.setdefault("ROS_DOMAIN_ID", str(random.Random(os.getpid()).randint(1, 100)))
# Under pytest-xdist each worker is a graph of its own: a node under test in one would otherwise
# hear the other's arms and sessions. Worker n takes the run's domain + 101 n, within DDS's 0..232.
_WORKER = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
os.environ["ROS_DOMAIN_ID"] = str((int(os.environ["ROS_DOMAIN_ID"]) + 101 * _WORKER) % 233)
os.environ.setdefault("RMW_IMPLEMENTATION", "rmw_fastrtps_cpp")


@pytest.fixture(autouse=True, scope="session")
def multiprocessing_helpers() -> None:
    """Start the interpreter's forkserver and resource tracker before any test: they serve every
    process pool in this run and live as long as pytest does, so the first test that happens to
    use a pool must not be blamed for leaving them behind."""
    context()  # the forkserver with PyAV imported: every encode's child process starts in milliseconds
    multiprocessing.forkserver.ensure_running()


@pytest.fixture(autouse=True, scope="session")
def lineage_registry(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Exports and training register themselves in lineage: into this run's registry, never the
    user's (a test that checks a registry sets its own)."""
    os.environ.setdefault("TELEOP_FLYWHEEL_LINEAGE", str(tmp_path_factory.mktemp("lineage") / "lineage.json"))


@pytest.fixture(autouse=True)
def no_leaked_processes(multiprocessing_helpers: None, request: pytest.FixtureRequest) -> Iterator[None]:
    """A test must not leave processes behind: an orphaned simulator or node would keep
    publishing into later tests' graphs (and did: a stray arm broke a process-list check)."""
    before = set(children(os.getpid()))
    yield
    deadline = time.monotonic() + 10
    while (leaked := set(children(os.getpid())) - before) and time.monotonic() < deadline:
        time.sleep(0.1)  # a child told to stop may need a moment
    if leaked:
        names = {pid: " ".join(cmdline(pid))[:200] or "?" for pid in leaked}
        for pid in leaked:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        pytest.fail(f"{request.node.nodeid} left processes running: {names}")


def _realtime_threads() -> dict[int, str]:
    """This process's threads on a real-time policy (tid: thread name)."""
    out = {}
    for tid in map(int, os.listdir("/proc/self/task")):
        try:
            if os.sched_getscheduler(tid) in (os.SCHED_FIFO, os.SCHED_RR):
                out[tid] = Path(f"/proc/self/task/{tid}/comm").read_text().strip()
        except OSError:
            continue
    return out


@pytest.fixture(autouse=True)
def no_realtime_left(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test must not leave this process real-time: every process started afterwards inherits it,
    and a busy loop at SCHED_FIFO 99 starves the rest of the machine (SVT-AV1 did this as root:
    a camera test's AV1 encode made every later test's nodes wait 30 s behind its load)."""
    yield
    left = _realtime_threads()
    if left:
        for tid in left:
            with contextlib.suppress(OSError):
                os.sched_setscheduler(tid, os.SCHED_OTHER, os.sched_param(0))
        pytest.fail(f"{request.node.nodeid} left thread(s) of the test process real-time: {sorted(left.values())}")


def pytest_configure(config: pytest.Config) -> None:
    """A temp root of this run's own (unless --basetemp is given): pytest keeps only the newest
    three `pytest-N` folders per user, so a concurrent run on a shared machine deleted the folders
    of this one's module-scoped fixtures mid-run."""
    if config.option.basetemp is None:
        config.option.basetemp = tempfile.mkdtemp(prefix="teleop_flywheel_pytest_")
        config.stash[_OWN_BASETEMP] = config.option.basetemp


def pytest_unconfigure(config: pytest.Config) -> None:
    own = config.stash.get(_OWN_BASETEMP, None)
    if own:
        shutil.rmtree(own, ignore_errors=True)


_OWN_BASETEMP = pytest.StashKey[str]()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the tests of the modules `support.realtime.REALTIME` lists `realtime`, and of those it
    lists in `WHOLE_MACHINE` `whole_machine` too."""
    for item in items:
        if realtime(item.path):
            item.add_marker(pytest.mark.realtime)
        if whole_machine(item.path):
            item.add_marker(pytest.mark.whole_machine)


# A module past this is worth a look (is it still one concept?), never a failure: a concept split
# to meet a line count is worse than a long module. Named at the end of every run, as the slowest
# tests are.
LONG_MODULE_LINES = 600


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    package = TEST_DIR.parent / "teleop_flywheel"
    long = [(len(p.read_text(encoding="utf-8").splitlines()), p.relative_to(package.parent))
            for p in sorted(package.rglob("*.py"))]
    long = [(n, path) for n, path in long if n > LONG_MODULE_LINES]
    if long:
        terminalreporter.section(f"modules over {LONG_MODULE_LINES} lines (one concept each?)")
        for n, path in long:
            terminalreporter.write_line(f"{path}: {n} lines")

