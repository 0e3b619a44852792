"""`teleop-flywheel run KIND`: start a session graph in this process (no `ros2 launch` needed).

The same `graph.build_graph` the launch files use; simulated arms (kind `sim`) run as
`sim-bus` child processes exactly as `sim.launch.py` starts them, so their wire-time
emulation is not disturbed by this process's GIL. Nodes share one MultiThreadedExecutor.
Ctrl-C (or SIGTERM) shuts down cleanly: every node's `close()` runs (the recorder closes its
bag, the follower handles torque as configured), then the simulators are stopped.
"""
from __future__ import annotations

import argparse
import importlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from teleop_flywheel.graph import (
    KINDS,
    LAUNCH_ARGUMENTS,
    Graph,
    NodeSpec,
    build_graph,
    config_from_arguments,
    load_param_file,
    with_parameters,
)


class SessionError(RuntimeError):
    """A session could not start; the message says which part and why."""


def node_class(spec: NodeSpec) -> type:
    module, _, cls = spec.target.partition(":")
    return getattr(importlib.import_module(module), cls)


def start_sim_arm(cmd: list[str], timeout_s: float = 20.0) -> tuple[subprocess.Popen[str], str]:
    """Start `sim-bus` and wait for the pty path it prints as its first line."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line: list[str] = []
    reader = threading.Thread(target=lambda: line.append(proc.stdout.readline() if proc.stdout else ""), daemon=True)
    reader.start()
    reader.join(timeout_s)
    if not line or not line[0].strip():
        proc.kill()
        err = proc.stderr.read() if proc.stderr else ""
        raise SessionError(f"simulated arm did not start ({' '.join(cmd)}): {err.strip() or 'no output'}")
    return proc, line[0].strip()


class Session:
    """A running graph: simulators, nodes and their executor. Use as a context manager."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.nodes: dict[str, Any] = {}
        self.sims: list[subprocess.Popen[str]] = []
        self._executor: Any = None
        self._thread: threading.Thread | None = None
        self._context: Any = None

    @property
    def context(self) -> Any:
        """The rclpy context the session's nodes live in (for extra in-process nodes)."""
        return self._context

    def add_node(self, node: Any) -> None:
        """Spin an extra node (e.g. a scripted operator's client) on the session's executor."""
        self._executor.add_node(node)

    def remove_node(self, node: Any) -> None:
        self._executor.remove_node(node)

    def __enter__(self) -> "Session":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        import rclpy
        from rclpy.executors import MultiThreadedExecutor
        from rclpy.parameter import Parameter

        for arm in self.graph.sim_arms:
            proc, _pty = start_sim_arm(arm.command(sys.executable))
            self.sims.append(proc)
        if self.graph.pedal_fifo and not Path(self.graph.pedal_fifo).exists():
            os.mkfifo(self.graph.pedal_fifo)
        self._context = rclpy.Context()
        rclpy.init(context=self._context)
        try:
            for spec in self.graph.nodes:
                cls = node_class(spec)
                remaps = [arg for src, dst in spec.remappings for arg in ("-r", f"{src}:={dst}")]
                self.nodes[spec.name] = cls(
                    node_name=spec.name,
                    context=self._context,
                    parameter_overrides=[Parameter(k, value=v) for k, v in spec.parameters.items()],
                    cli_args=["--ros-args", *remaps] if remaps else None,
                )
        except Exception:
            self.stop()
            raise
        self._executor = MultiThreadedExecutor(num_threads=max(4, len(self.nodes)), context=self._context)
        for node in self.nodes.values():
            self._executor.add_node(node)
        self._thread = threading.Thread(target=self._spin, name="session-executor", daemon=True)
        self._thread.start()

    def _spin(self) -> None:
        from rclpy.executors import ExternalShutdownException

        try:
            self._executor.spin()
        except ExternalShutdownException:
            pass

    def stop(self) -> None:
        """Close every node (recorder first closes its bag), then stop executor and simulators."""
        for name in reversed(list(self.nodes)):
            close = getattr(self.nodes[name], "close", None)
            if callable(close):
                try:
                    close()
                except Exception as exc:  # noqa: BLE001 - keep shutting the others down
                    print(f"run: {name}.close() failed: {exc}", file=sys.stderr)
        if self._executor is not None:
            self._executor.shutdown(timeout_sec=2.0)
        for node in self.nodes.values():
            node.destroy_node()
        self.nodes.clear()
        if self._context is not None and self._context.ok():
            self._context.shutdown()
        if self._thread is not None:
            self._thread.join(2.0)
        for proc in self.sims:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
        for proc in self.sims:
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
        self.sims.clear()
        if self.graph.pedal_fifo and Path(self.graph.pedal_fifo).exists():
            Path(self.graph.pedal_fifo).unlink()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("kind", choices=KINDS, help="session graph to start")
    parser.add_argument("--param-file", action="append", default=[], type=Path,
                        help="ROS 2 parameter YAML (node: {ros__parameters: ...}); repeatable")
    parser.add_argument("--arg", action="append", default=[], metavar="NAME=VALUE",
                        help=f"session argument, as for the launch files: {', '.join(LAUNCH_ARGUMENTS)}")
    parser.add_argument("--seconds", type=float, default=0.0, help="stop after this long (default: until Ctrl-C)")


def parse_args_list(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--arg {item!r}: expected NAME=VALUE")
        out[name.strip()] = value
    return out


def run(args: argparse.Namespace) -> int:
    try:
        graph = build_graph(args.kind, config_from_arguments(parse_args_list(args.arg)))
        for path in args.param_file:
            graph = with_parameters(graph, load_param_file(path))
    except ValueError as exc:
        print(f"run: {exc}", file=sys.stderr)
        return 2
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        with Session(graph) as session:
            print(f"run: {args.kind} session up: {', '.join(session.nodes)}; Ctrl-C to stop", flush=True)
            deadline = time.monotonic() + args.seconds if args.seconds > 0 else None
            while not stop.is_set() and (deadline is None or time.monotonic() < deadline):
                stop.wait(0.2)
    except KeyboardInterrupt:
        pass
    except SessionError as exc:
        print(f"run: {exc}", file=sys.stderr)
        return 1
    print("run: session stopped cleanly", flush=True)
    return 0
