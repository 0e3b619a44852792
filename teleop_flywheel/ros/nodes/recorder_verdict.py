"""The recorder's judge: the validator in a worker process, so a verdict never delays recording.

`ValidatorProcess(config, cameras)` is what `recording.verdict.VerdictKeeper` calls with a stopped
bag; it hands the path to a long-lived worker (`python -m teleop_flywheel.ros.nodes.recorder_verdict`,
started at once so its imports are done before the first stop) and waits for the report. The
worker runs exactly what `teleop-flywheel validate` runs on one bag — `data.validate.validate_bag`
with the thresholds of `config/validate.yaml` (or the recorder's `validate_config`) — and then the
camera-set check against the session's configured cameras (`apply_schema`; a single episode has
no batch to compare with). The worker keeps the reports of the episodes it judged: each verdict
pools the camera's lag over the episodes of its camera instance so far (`lag_pool`, the running
pool), so a 25 ms late camera no single episode can prove is rejected at stop once its episodes
add up, and the console shows the pooled figure. Episodes judged before the pool crossed the bound
keep their verdict at stop; `teleop-flywheel validate` on the session rejects them all.

The worker yields the CPU to the rig: it runs in a session of its own whose scheduler autogroup
it sets to nice 10 (`/proc/self/autogroup`; with the kernel's sched_autogroup every session
competes as a group, so a nice inside the recorder's group would only yield to the recorder, not
to the arm drivers or the teleop node), and at nice 10 itself where there are no autogroups. Nice
10 weighs about a tenth of a node: idle CPU is all its own (a 60 s episode is judged in seconds),
a busy rig keeps nine tenths of what it contends for. (Nice 19, a sixtieth, starved the verdict for
minutes on a machine loaded by other work.) It exits when the recorder goes (end of its stdin, or SIGTERM through
PR_SET_PDEATHSIG). No ROS is imported here.

Protocol: one JSON line per job on stdin `{"path": …}`; one JSON line per answer on stdout
`{"report": EpisodeReport.to_dict(), "seconds": …}` or `{"error": …}`; the first line the worker
writes is `{"ready": true}` or `{"ready": false, "error": …}` (a bad thresholds file).
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import ctypes
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

from teleop_flywheel.core.priority import lower_priority

NICE = 10  # below every node of the rig: a verdict may wait, a control loop may not
JOB_TIMEOUT_S = 600.0  # a bag the validator has not judged by then is given up (the worker is restarted)
READY_TIMEOUT_S = 120.0  # imports on a loaded 2-core machine


class ValidatorProcess:
    """Callable judge: bag path -> {"report", "seconds"}; RuntimeError when the worker cannot answer."""

    def __init__(self, config: str = "", cameras: list[str] | None = None) -> None:
        self.config = config
        self.cameras = [c for c in cameras or [] if c]
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[str] | None = None
        self._ready_error: str | None = None
        self._closed = False  # set by close() without the lock, which a running job holds
        self._start()

    def _start(self) -> None:
        cmd = [sys.executable, "-m", "teleop_flywheel.ros.nodes.recorder_verdict", "--cameras", ",".join(self.cameras)]
        if self.config:
            cmd += ["--config", self.config]
        self._proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1,
                                      start_new_session=True)  # its own autogroup (main sets its nice)
        self._ready_error = None
        self._ready: bool | None = None

    def _readline(self, stream: IO[str], timeout_s: float) -> str:
        if not select.select([stream], [], [], timeout_s)[0]:
            raise TimeoutError(f"no answer from the validator worker within {timeout_s:.0f} s")
        line = stream.readline()
        if not line:
            raise RuntimeError("the validator worker exited")
        return line

    def __call__(self, bag: Path) -> Mapping[str, Any]:
        with self._lock:
            for attempt in (1, 2):
                if self._closed:  # never a new worker after close: the recorder is going
                    raise RuntimeError("the recorder closed before the validator answered")
                proc = self._proc
                if proc is None or proc.poll() is not None:
                    self._start()
                    proc = self._proc
                assert proc is not None and proc.stdin is not None and proc.stdout is not None
                try:
                    if self._ready is None:
                        hello = json.loads(self._readline(proc.stdout, READY_TIMEOUT_S))
                        self._ready, self._ready_error = bool(hello.get("ready")), hello.get("error")
                    if not self._ready:
                        raise RuntimeError(self._ready_error or "the validator worker is not ready")
                    proc.stdin.write(json.dumps({"path": str(bag)}) + "\n")
                    proc.stdin.flush()
                    answer = json.loads(self._readline(proc.stdout, JOB_TIMEOUT_S))
                except (OSError, ValueError, TimeoutError, RuntimeError) as exc:
                    if self._ready is False or attempt == 2:
                        raise RuntimeError(str(exc)) from exc
                    self._kill()  # once more with a fresh worker
                    continue
                if "error" in answer:
                    raise RuntimeError(str(answer["error"]))
                return dict(answer)
        raise RuntimeError("unreachable")

    def _kill(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            _end(proc, grace_s=0.0)

    def close(self) -> None:
        """End the worker: its stdin closes, and it is killed if it has not gone within 2 s."""
        self._closed = True
        proc, self._proc = self._proc, None
        if proc is not None:
            _end(proc, grace_s=2.0)


def _end(proc: subprocess.Popen[str], grace_s: float) -> None:
    """See the worker gone: its stdin closes (it finishes its job and exits), SIGKILL after `grace_s`,
    then reaped by a thread of its own if that takes longer than 5 s (a loaded machine: a recorder's
    close, and the session's shutdown bound behind it, must not wait on a dying worker, nor fail
    because of one). Its stdout closes last: a worker still writing must not die of a broken pipe."""
    try:
        if proc.stdin is not None:
            proc.stdin.close()
    except OSError:
        pass  # the pipe broke: the worker is already gone
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        try:
            proc.wait(5.0)
        except subprocess.TimeoutExpired:
            threading.Thread(target=proc.wait, name="reap-validator", daemon=True).start()
    if proc.stdout is not None:
        proc.stdout.close()


def _die_with_parent() -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, ctypes.c_ulong(signal.SIGTERM), 0, 0, 0)  # PR_SET_PDEATHSIG
    if os.getppid() == 1:
        sys.exit(0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="the recorder's validator worker (JSON lines on stdin/stdout)")
    parser.add_argument("--config", default=None, help="thresholds YAML (default: the shipped config/validate.yaml)")
    parser.add_argument("--cameras", default="", help="the session's configured cameras, comma-separated")
    args = parser.parse_args(argv)
    _die_with_parent()
    # Its session's autogroup and itself at NICE; not SCHED_BATCH: under two busy processes a
    # SCHED_BATCH worker SIGKILLed mid-verdict is not even reaped within 5 s.
    lower_priority(NICE, batch=False)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is for the recorder, which ends us
    out = sys.stdout
    try:
        from teleop_flywheel.data.validate.lag_pool import apply_lag_pools
        from teleop_flywheel.data.validate.reasons import ValidateConfig
        from teleop_flywheel.data.validate.validator import apply_schema, validate_bag

        cfg = ValidateConfig.load(args.config)
    except ValueError as exc:
        out.write(json.dumps({"ready": False, "error": f"validator thresholds: {exc}"}) + "\n")
        out.flush()
        return 1
    cameras = sorted(c for c in args.cameras.split(",") if c)
    out.write(json.dumps({"ready": True}) + "\n")
    out.flush()
    judged: list[Any] = []  # this session's reports, as judged at their stop: the running pool
    for line in sys.stdin:
        try:
            path = str(json.loads(line)["path"])
            t0 = time.perf_counter()
            report = validate_bag((path, cfg))
            if report.error is None:
                apply_schema([report], cameras)
                apply_lag_pools([copy.deepcopy(r) for r in judged] + [report], cfg)
                judged.append(report)
            answer: dict[str, Any] = {"report": report.to_dict(), "seconds": round(time.perf_counter() - t0, 3)}
        except Exception as exc:  # noqa: BLE001 - an answer that says why, never a dead worker
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        out.write(json.dumps(answer, default=str) + "\n")
        out.flush()
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:  # the recorder went away while we answered: nobody is left to tell
        os._exit(0)
