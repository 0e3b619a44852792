"""A Ray driver in a process of its own, on a single-node Ray cluster on 127.0.0.1 that it starts.

Ray's core worker ends its process with `_exit(1)` when its raylet goes away (a node marked dead
under load, a raylet that crashed). A driver inside the test process takes the whole suite with
it, silently: a CI run stopped mid-line at 34 % with exit 1, no summary and no traceback. In a
child, the same event is this test's failure, with the tails of Ray's own logs to say why.

The body is Python run after `ray.init`; it gives its result with `answer(obj)` (JSON, the last
line of its stdout). Its cluster lives in a short temporary directory of its own (Ray's socket
paths must stay under 107 bytes), and whatever of it survives the driver is killed by that path.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

import pytest

from support.paths import ROOT

PRELUDE = """\
import json, sys
import ray

def answer(obj):
    print(json.dumps(obj), flush=True)

ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, _node_ip_address="127.0.0.1",
         _temp_dir={temp!r})
try:
{body}
finally:
    ray.shutdown()
"""
LOGS = ("raylet.out", "raylet.err", "gcs_server.out", "python-core-driver-*.log")


def run_driver(body: str, *args: str, cwd: Path, timeout_s: float = 240.0) -> Any:
    """Run `body` as a Ray driver in a child Python; return what it answered, or fail saying why."""
    pytest.importorskip("ray", reason="Ray not installed (pip install 'teleop_flywheel[ray]')")
    temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")
    # Ray workers import a job's function by its module's name: the package from ROOT, tests' own from test/.
    path = os.pathsep.join(p for p in (str(ROOT), str(ROOT / "test"), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "PYTHONPATH": path}
    env.pop("RAY_ADDRESS", None)
    script = PRELUDE.format(temp=temp, body=textwrap.indent(textwrap.dedent(body).strip("\n"), "    "))
    try:
        done = subprocess.run([sys.executable, "-c", script, *args], cwd=cwd, env=env, capture_output=True,
                              text=True, timeout=timeout_s)
        if done.returncode != 0 or not done.stdout.strip():
            pytest.fail(f"the Ray driver exited {done.returncode}:\n{done.stderr[-3000:]}\n{_log_tails(Path(temp))}")
        return json.loads(done.stdout.strip().splitlines()[-1])
    finally:
        _kill_under(temp)
        shutil.rmtree(temp, ignore_errors=True)


def _log_tails(temp: Path, lines: int = 15) -> str:
    out = []
    for pattern in LOGS:
        for log in sorted(temp.glob(f"session_*/logs/{pattern}")):
            tail = log.read_text(errors="replace").splitlines()[-lines:]
            out.append(f"--- {log.name}\n" + "\n".join(tail))
    return "\n".join(out) or f"(no Ray logs under {temp})"


def _kill_under(temp: str) -> None:
    """SIGKILL every process whose command line names the cluster's directory (a raylet or GCS left
    behind by a driver that died)."""
    needle = temp.encode()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if needle in Path(f"/proc/{pid}/cmdline").read_bytes():
                os.kill(int(pid), signal.SIGKILL)
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
