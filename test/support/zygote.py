"""Real `teleop-flywheel` command processes without paying interpreter start-up and imports each time.

A kill test starts one real command process per write step it kills at; most of each one's life
was importing the data stack (pyarrow, pandas, av: ~2 s of CPU each on the CI machine), not the
work under test. `Zygote` starts one clean, single-threaded Python that imports the given modules
once, then forks a child per `start` that runs `teleop_flywheel.cli.main(argv)` with its own
environment and exits with its code: each child is still its own process, killed by its own
SIGKILL at its own step, with nothing shared with the test's process. The zygote never runs a
command itself, so every child starts from the same freshly imported state.

Protocol (one line each way): request `json [argv, env, stderr_path]` -> `started PID`; when a
child ends, `exited PID CODE` (CODE as `subprocess` reports it: -9 for SIGKILL).
"""
from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

DATA_STACK = ("teleop_flywheel.cli", "teleop_flywheel.data.convert.converter")


def _child(argv: list[str], env: dict[str, str], stderr_path: str) -> None:
    """In the forked child: its environment and stderr, then the command; never returns."""
    try:
        os.environ.update(env)
        err = os.open(stderr_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(null, 1)
        os.dup2(err, 2)
        sys.stdin = open(0, closefd=False)  # noqa: SIM115 - the child's own streams on its new fds
        sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
        from teleop_flywheel.cli import main

        code = main(argv)
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:  # noqa: BLE001 - whatever happens, the child must not return into the zygote's loop
        import traceback

        traceback.print_exc()
        sys.stderr.flush()
        code = 70
    os._exit(code)


def serve(modules: list[str]) -> None:
    """The zygote's loop: one thread, so a fork never copies a lock another thread holds."""
    import importlib

    for name in modules:
        importlib.import_module(name)
    out = sys.stdout
    out.write("ready\n")
    out.flush()
    stdin = sys.stdin.buffer
    buffered = b""
    live = 0
    while True:
        ready = select.select([stdin], [], [], 0.02)[0]
        if ready:
            chunk = os.read(stdin.fileno(), 65536)
            if not chunk:
                break
            buffered += chunk
            while b"\n" in buffered:
                line, buffered = buffered.split(b"\n", 1)
                argv, env, stderr_path = json.loads(line)
                pid = os.fork()
                if pid == 0:
                    _child(argv, env, stderr_path)
                live += 1
                out.write(f"started {pid}\n")
                out.flush()
        while live:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            live -= 1
            out.write(f"exited {pid} {os.waitstatus_to_exitcode(status)}\n")
            out.flush()
    while live:  # stdin closed: reap what is left, then go
        pid, status = os.waitpid(-1, 0)
        live -= 1


class Child:
    """A command the zygote forked: `wait` like `subprocess.Popen.wait`, `stderr()` its text."""

    def __init__(self, zygote: Zygote, pid: int, stderr_path: Path) -> None:
        self.zygote, self.pid, self.stderr_path = zygote, pid, stderr_path
        self.returncode: int | None = None

    def wait(self, timeout: float) -> int:
        self.returncode = self.zygote.wait(self.pid, timeout)
        return self.returncode

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace") if self.stderr_path.exists() else ""


class Zygote:
    """`with Zygote() as z: z.start(["convert", ...], env, stderr_file).wait(120)`."""

    def __init__(self, modules: tuple[str, ...] = DATA_STACK, timeout: float = 120.0) -> None:
        self.proc = subprocess.Popen([sys.executable, __file__, *modules], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env=os.environ.copy())
        self._buf = b""
        self._exited: dict[int, int] = {}
        line = self._line(timeout)
        if line != "ready":
            raise RuntimeError(f"zygote did not start: {line!r}")

    def _line(self, timeout: float) -> str:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.proc.stdout], [], [], left)[0]:
                raise TimeoutError(f"zygote: no answer in {timeout:g} s")
            chunk = os.read(self.proc.stdout.fileno(), 65536)
            if not chunk:
                raise RuntimeError(f"zygote exited ({self.proc.wait()})")
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return line.decode()

    def _next(self, timeout: float) -> tuple[str, int]:
        word, pid, *code = self._line(timeout).split()
        if word == "exited":
            self._exited[int(pid)] = int(code[0])
        return word, int(pid)

    def start(self, argv: list[str], env: dict[str, str], stderr_path: Path) -> Child:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps([argv, env, str(stderr_path)]).encode() + b"\n")
        self.proc.stdin.flush()
        while True:
            word, pid = self._next(30.0)
            if word == "started":
                return Child(self, pid, stderr_path)

    def wait(self, pid: int, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        while pid not in self._exited:
            self._next(max(deadline - time.monotonic(), 0.0))
        return self._exited[pid]

    def __enter__(self) -> Zygote:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


if __name__ == "__main__":
    serve(sys.argv[1:])
