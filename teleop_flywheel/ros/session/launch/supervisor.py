"""The session supervisor: one process per graph node, as `ros2 launch` starts them.

`Session(graph)` starts the simulated arms of a `sim` graph (`sim-bus` processes), creates the
virtual pedal's FIFO, then every node of `graph.nodes` in its own process:

    python -m teleop_flywheel.ros.session.launch.exec_node EXECUTABLE --ros-args -r __node:=NAME
        [-r __ns:=/NAMESPACE] --params-file <session dir>/params/NAME.yaml [-r FROM:=TO ...]

— what `ros2 launch` runs for the same `launch_ros` Node action (`exec_node` runs the console
script `EXECUTABLE`). The parameter files and a `sim` session's pty links and pedal FIFO live in
a directory only this session uses (`tempfile.mkdtemp`), removed when it stops. `start()`
returns once every node is on the ROS graph; a failed start stops what it had started.

Supervision: a child that exits while the session runs is reported with its name, pid and exit
code and `failed` is set — the caller then stops the session (`runner.run` does at once).
`stop()` sends SIGINT to the recorder first (it closes its bag while the streams still flow),
then to every other node at once, waits up to `stop_timeout_s` (by default a little past the
nodes' own stop bounds, `nodes.common.SHUTDOWN_BOUND_S` + `TEARDOWN_BOUND_S`: a node closing slowly on a loaded machine
is not cut short, and one that hangs prints its stacks itself), then SIGTERM, then SIGKILL; then
the simulators the same way; then the directory goes. Each child runs in its own session: a
terminal's Ctrl-C reaches only the supervisor, which stops them in that order, and with the
kernel's sched_autogroup each process gets its own CPU share — a heavy job elsewhere (or a busy
node of the same session) does not take an arm driver's. Each has PR_SET_PDEATHSIG = SIGTERM, so
if the supervisor dies — even by SIGKILL — the kernel stops every child. The death signal follows the *thread* that
started the child: start a session from a thread that outlives it (the main thread).

Children inherit the environment with ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST unless the user set
it, and Fast DDS's default profile `config/fastdds_session.xml` unless the user set one of their own
(the supervisor's own process uses it too): its participants announce themselves every 0.5 s, so a
node that starts after another finds it within 0.5 s instead of up to 3 s. The supervisor's own
process hosts only helper nodes that session logic needs (a scripted operator, an evaluation walk's
console and recorder client): clients of the nodes' ROS interfaces, each spun on its own thread
(`add_node`), in `context`.
"""
from __future__ import annotations

import contextlib
import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any

from teleop_flywheel.core.resources import config_path
from teleop_flywheel.ros.errors import SessionError
from teleop_flywheel.ros.session.launch.graph import Graph, NodeSpec

PR_SET_PDEATHSIG = 1
STOP_MARGIN_S = 2.0  # past a node's own stop bound: time to print its stacks and exit
CLEAN_STOP = (0, 130, -signal.SIGINT)  # 130: interrupted while still importing (exec_node)
PROBE_NODE = "_teleop_flywheel_session"  # hidden (leading underscore): `ros2 node list` skips it
FASTDDS_PROFILE = "fastdds_session.xml"  # in config/
try:
    _prctl: Any = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):  # not Linux: no parent-death signal
    _prctl = None


def child_setup(parent_pid: int) -> Callable[[], None]:
    """`preexec_fn` of every child: its own session (so its own process group and, where the kernel
    groups CPU time by session — sched_autogroup — its own share: a busy neighbour, another node
    or a heavy job in another terminal, cannot take an arm driver's), and SIGTERM when the
    supervisor dies."""

    def setup() -> None:
        os.setsid()
        if _prctl is not None:
            _prctl(PR_SET_PDEATHSIG, ctypes.c_ulong(signal.SIGTERM), 0, 0, 0)
        if os.getppid() != parent_pid:  # the supervisor died before the death signal was armed
            os._exit(1)

    return setup


def discovery_env(env: Mapping[str, str]) -> dict[str, str]:
    """What a session's processes add to `env` for discovery (see the module doc): localhost unless
    the user chose a range, the session's Fast DDS profile unless the user named a profile file (under
    either of Fast DDS's names for it)."""
    added = {} if "ROS_AUTOMATIC_DISCOVERY_RANGE" in env else {"ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST"}
    if not {"FASTDDS_DEFAULT_PROFILES_FILE", "FASTRTPS_DEFAULT_PROFILES_FILE"} & set(env):
        added["FASTDDS_DEFAULT_PROFILES_FILE"] = str(config_path(FASTDDS_PROFILE))
    return added


def child_env() -> dict[str, str]:
    return {**os.environ, **discovery_env(os.environ)}


def describe_exit(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name} (exit code {code})"
        except ValueError:
            return f"killed by signal {-code} (exit code {code})"
    return f"exit code {code}"


def node_argv(spec: NodeSpec, params_file: str, python: str = sys.executable) -> list[str]:
    """The command line of one node's process (the launch_ros Node action's, run through exec_node)."""
    remaps = [arg for src, dst in spec.remappings for arg in ("-r", f"{src}:={dst}")]
    namespace = ["-r", f"__ns:={spec.namespace}"] if spec.namespace else []
    return [python, "-m", "teleop_flywheel.ros.session.launch.exec_node", spec.executable, "--ros-args",
            "-r", f"__node:={spec.name}", *namespace, "--params-file", params_file, *remaps]


def params_yaml(spec: NodeSpec) -> str:
    """A ROS 2 parameter file of one node (`/**: ros__parameters:`, as launch_ros writes one).
    JSON is YAML: every string comes out double-quoted, so rcl never reads `y`, `on` or `1.5`
    given as a string as a bool or a number."""
    for key, value in spec.parameters.items():
        if isinstance(value, list) and not value:
            raise SessionError(f"node {spec.name}: parameter {key} is an empty list, which a ROS parameter "
                               "file cannot hold")
    try:
        return json.dumps({"/**": {"ros__parameters": spec.parameters}}, indent=1, allow_nan=False) + "\n"
    except (TypeError, ValueError) as exc:
        raise SessionError(f"node {spec.name}: parameters cannot be written to a parameter file ({exc})") from exc


def commands(graph: Graph, params_dir: str | os.PathLike[str], python: str = sys.executable) -> dict[str, list[str]]:
    """Every process a session of `graph` starts, in start order: `sim_<role>` for each simulated
    arm, then each node by name (its parameters in `<params_dir>/<name>.yaml`)."""
    out = {f"sim_{arm.role}": arm.command(python) for arm in graph.sim_arms}
    for spec in graph.nodes:
        if spec.name in out:
            raise SessionError(f"two processes named {spec.name} in the {graph.kind} graph")
        out[spec.name] = node_argv(spec, str(Path(params_dir) / f"{spec.name}.yaml"), python)
    return out


def _forward(stream: IO[str] | None) -> None:
    """Copy a child's remaining output to our stderr (a pipe nobody reads would block the child)."""
    if stream is None:
        return
    for line in stream:
        sys.stderr.write(line)


def start_sim_arm(cmd: list[str], timeout_s: float = 20.0, preexec_fn: Callable[[], None] | None = None,
                  env: dict[str, str] | None = None) -> tuple[subprocess.Popen[str], str]:
    """Start `sim-bus` and wait for the pty path it prints as its first line."""
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=preexec_fn, env=env)
    line: list[str] = []
    reader = threading.Thread(target=lambda: line.append(proc.stdout.readline() if proc.stdout else ""), daemon=True)
    reader.start()
    reader.join(timeout_s)
    if not line or not line[0].strip():
        proc.kill()
        err = proc.stderr.read() if proc.stderr else ""
        proc.wait()
        raise SessionError(f"simulated arm did not start ({' '.join(cmd[1:])}): {err.strip() or 'no output'}")
    threading.Thread(target=_forward, args=(proc.stderr,), daemon=True).start()
    return proc, line[0].strip()


def end_process(proc: subprocess.Popen[Any], timeout_s: float = 5.0) -> None:
    """SIGTERM, then SIGKILL if it has not exited within `timeout_s`."""
    proc.terminate()
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _signal(proc: subprocess.Popen[Any], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(sig)


class Session:
    """A running graph, one process per node, supervised. Use as a context manager."""

    def __init__(self, graph: Graph, *, ready_timeout_s: float = 90.0, stop_timeout_s: float | None = None,
                 log: Callable[[str], None] | None = None, on_failure: Callable[[str], None] | None = None) -> None:
        from teleop_flywheel.ros.nodes.common import SHUTDOWN_BOUND_S, TEARDOWN_BOUND_S

        self.graph = graph
        self.ready_timeout_s = ready_timeout_s
        default_stop_s = SHUTDOWN_BOUND_S + TEARDOWN_BOUND_S + STOP_MARGIN_S
        self.stop_timeout_s = default_stop_s if stop_timeout_s is None else stop_timeout_s
        self.log = log or (lambda text: print(f"session: {text}", file=sys.stderr, flush=True))
        self.dir: Path | None = None  # kept (as a name) after stop: it says where the session lived
        self.processes: dict[str, subprocess.Popen[Any]] = {}  # node name, or sim_<role>
        self.exit_codes: dict[str, int | None] = {}
        self.problems: list[str] = []  # what did not stop cleanly
        self.failed = threading.Event()
        self.failure = ""
        self.on_failure = on_failure
        self._stopping = threading.Event()
        self._watcher: threading.Thread | None = None
        self._context: Any = None
        self._spinner: Any = None
        self._helpers: list[Any] = []
        self._probe: Any = None

    @property
    def node_names(self) -> list[str]:
        return [n.name for n in self.graph.nodes]

    def pid(self, name: str) -> int:
        return self.processes[name].pid

    # -- the supervisor's own helper nodes ----------------------------------------------------------

    @property
    def context(self) -> Any:
        """The rclpy context of the supervisor's helper nodes (created on first use)."""
        if self._context is None:
            import rclpy
            from rclpy.signals import SignalHandlerOptions

            from teleop_flywheel.ros.nodes.common import NodeSpinner

            os.environ.update(discovery_env(os.environ))
            context = rclpy.Context()
            # No rclpy signal handlers: Ctrl-C and SIGTERM are the supervisor's, to stop the children in order.
            rclpy.init(args=[], context=context, signal_handler_options=SignalHandlerOptions.NO)
            self._context, self._spinner = context, NodeSpinner(context)
        return self._context

    def add_node(self, node: Any) -> None:
        """Spin a helper node (e.g. a scripted operator's client) on its own thread."""
        _ = self.context
        self._spinner.add(node)
        self._helpers.append(node)

    def remove_node(self, node: Any) -> None:
        """Stop spinning a helper node (its running callback finishes first) and destroy it."""
        self._spinner.remove(node)
        self._helpers.remove(node)
        node.destroy_node()

    # -- start -----------------------------------------------------------------------------------------

    def __enter__(self) -> Session:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        try:
            self._start()
            self.wait_ready(self.ready_timeout_s)
        except BaseException:  # Ctrl-C included: nothing started may outlive a failed start
            self.stop()
            raise

    def _start(self) -> None:
        os.environ.update(discovery_env(os.environ))  # before this process's helper nodes join the graph
        env = child_env()
        self.dir = Path(tempfile.mkdtemp(prefix="teleop_flywheel_session_"))
        if self.graph.needs_sim_dir:
            (self.dir / "sim").mkdir()
            self.graph = self.graph.in_sim_dir(self.dir / "sim")
        params = self.dir / "params"
        params.mkdir()
        argv = commands(self.graph, params)
        for spec in self.graph.nodes:
            (params / f"{spec.name}.yaml").write_text(params_yaml(spec))
        setup = child_setup(os.getpid())
        for arm in self.graph.sim_arms:
            name = f"sim_{arm.role}"
            self.processes[name], _pty = start_sim_arm(argv[name], preexec_fn=setup, env=env)
        if self.graph.pedal_fifo and not Path(self.graph.pedal_fifo).exists():
            os.mkfifo(self.graph.pedal_fifo, 0o600)
        for spec in self.graph.nodes:
            self.processes[spec.name] = subprocess.Popen(argv[spec.name], stdin=subprocess.DEVNULL, env=env,
                                                         preexec_fn=setup)
        self._watcher = threading.Thread(target=self._watch, name="session-watch", daemon=True)
        self._watcher.start()

    def wait_ready(self, timeout_s: float) -> None:
        """Return once every graph node is on the ROS graph; a child that exits meanwhile, or a
        node still missing after `timeout_s`, is a SessionError naming it."""
        if not self.graph.nodes:
            return
        if self._probe is None:
            import rclpy

            self._probe = rclpy.create_node(PROBE_NODE, context=self.context, start_parameter_services=False)
        wanted = {spec.fully_qualified_name for spec in self.graph.nodes}
        deadline = time.monotonic() + timeout_s
        while True:
            if self.failed.is_set():
                raise SessionError(self.failure)
            seen = {f"{ns.rstrip('/')}/{name}" for name, ns in self._probe.get_node_names_and_namespaces()}
            if wanted <= seen:
                return
            if time.monotonic() > deadline:
                raise SessionError(f"not on the ROS graph {timeout_s:.0f} s after their start: "
                                   f"{', '.join(sorted(wanted - seen))}")
            self.failed.wait(0.1)  # the graph cache fills from DDS discovery in the background

    # -- supervision -----------------------------------------------------------------------------------

    def _watch(self) -> None:
        while not self._stopping.wait(0.1):
            for name, proc in list(self.processes.items()):
                if name in self.exit_codes or (code := proc.poll()) is None:
                    continue
                self.exit_codes[name] = code
                if self._stopping.is_set():
                    return
                text = f"{name} (pid {proc.pid}) exited unexpectedly: {describe_exit(code)}"
                self.log(text)
                if not self.failed.is_set():
                    self.failure = text
                    self.failed.set()
                    if self.on_failure is not None:
                        self.on_failure(text)

    # -- stop ------------------------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop everything this session started (idempotent): helper nodes, then the recorder,
        the other nodes, the simulators; then remove the session's directory."""
        self._stopping.set()
        if self._watcher is not None and self._watcher is not threading.current_thread():
            self._watcher.join()
        self._watcher = None
        self._close_helpers()
        nodes = [n.name for n in self.graph.nodes if n.name in self.processes]
        recorders = [n for n in nodes if self.graph.node(n).executable == "recorder"]
        others = [n for n in nodes if n not in recorders]
        sims = [n for n in self.processes if n not in nodes]
        for group in (recorders, others, sims):
            self._end(group)
        if self.graph.pedal_fifo and Path(self.graph.pedal_fifo).exists():  # also in a caller's sim_dir
            Path(self.graph.pedal_fifo).unlink()
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)

    def _end(self, names: list[str]) -> None:
        """SIGINT to every process of `names`, then SIGTERM, then SIGKILL, each after a grace time."""
        procs = {n: self.processes[n] for n in names if n not in self.exit_codes}
        hurry = False
        for sig, grace in ((signal.SIGINT, self.stop_timeout_s), (signal.SIGTERM, 3.0), (signal.SIGKILL, 10.0)):
            pending = {n: p for n, p in procs.items() if p.poll() is None}
            if not pending:
                break
            if hurry and sig != signal.SIGKILL:
                continue
            if sig != signal.SIGINT:
                self.log(f"{', '.join(pending)} did not stop in time; sending {sig.name}")
            for proc in pending.values():
                _signal(proc, sig)
            deadline = time.monotonic() + grace
            try:
                for proc in pending.values():
                    proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            except KeyboardInterrupt:  # Ctrl-C again: stop waiting, kill what is left
                hurry = True
        for name, proc in procs.items():
            code = self.exit_codes[name] = proc.poll()
            if code not in CLEAN_STOP:
                self.problems.append(f"{name}: {describe_exit(code)}")
                self.log(f"{name} (pid {proc.pid}) did not stop cleanly: {describe_exit(code)}")

    def _close_helpers(self) -> None:
        if self._spinner is not None:
            self._spinner.shutdown()
        for node in [*self._helpers, *([self._probe] if self._probe is not None else [])]:
            node.destroy_node()
        self._helpers.clear()
        self._probe = self._spinner = None
        if self._context is not None and self._context.ok():
            self._context.shutdown()
        self._context = None
