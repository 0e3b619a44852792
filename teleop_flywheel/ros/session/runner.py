"""`teleop-flywheel run KIND`: start a session graph in this process (no `ros2 launch` needed).

The same `graph.build_graph` the launch files use; simulated arms (kind `sim`) run as
`sim-bus` child processes exactly as `sim.launch.py` starts them, so their wire-time
emulation is not disturbed by this process's GIL. Each node spins on its own executor thread
(`nodes.common.NodeSpinner`: rclpy's MultiThreadedExecutor starves the process, see there).
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
from dataclasses import replace
from pathlib import Path
from typing import Any

from teleop_flywheel.core.errors import FlywheelError
from teleop_flywheel.ros.session.graph import (
    KINDS,
    LAUNCH_ARGUMENTS,
    Graph,
    NodeSpec,
    build_graph,
    config_from_arguments,
    load_param_file,
    with_parameters,
)


class SessionError(FlywheelError, RuntimeError):
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


def end_process(proc: subprocess.Popen[str], timeout_s: float = 5.0) -> None:
    """SIGTERM, then SIGKILL if it has not exited within `timeout_s`."""
    proc.terminate()
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


class Session:
    """A running graph: simulators, nodes and their executor. Use as a context manager."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.nodes: dict[str, Any] = {}
        self.sims: list[subprocess.Popen[str]] = []
        self._spinner: Any = None
        self._context: Any = None
        self._retired: list[Any] = []

    @property
    def context(self) -> Any:
        """The rclpy context the session's nodes live in (for extra in-process nodes)."""
        return self._context

    def add_node(self, node: Any) -> None:
        """Spin an extra node (e.g. a scripted operator's client) in the session."""
        self._spinner.add(node)

    def remove_node(self, node: Any) -> None:
        """Stop spinning `node` (its running callback finishes first); it is destroyed at stop()."""
        self._spinner.remove(node)
        self._retired.append(node)

    def _make(self, spec: NodeSpec) -> Any:
        from rclpy.parameter import Parameter

        remaps = [arg for src, dst in spec.remappings for arg in ("-r", f"{src}:={dst}")]
        return node_class(spec)(
            node_name=spec.name,
            context=self._context,
            parameter_overrides=[Parameter(k, value=v) for k, v in spec.parameters.items()],
            cli_args=["--ros-args", *remaps] if remaps else None,
        )

    def replace_node(self, name: str, **parameters: Any) -> Any:
        """Restart one graph node with some parameters changed (e.g. the policy node on another
        checkpoint between evaluation trials); the new node is built before the old one goes, so
        a bad parameter leaves the running node in place."""
        spec = next(s for s in self.graph.nodes if s.name == name)
        spec = NodeSpec(spec.executable, spec.name, {**spec.parameters, **parameters}, spec.remappings)
        new = self._make(spec)
        old = self.nodes[name]
        close = getattr(old, "close", None)
        if callable(close):
            close()
        self.remove_node(old)
        self.nodes[name] = new
        self._spinner.add(new)
        return new

    def __enter__(self) -> "Session":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        import rclpy

        from teleop_flywheel.ros.nodes.common import NodeSpinner

        for arm in self.graph.sim_arms:
            proc, _pty = start_sim_arm(arm.command(sys.executable))
            self.sims.append(proc)
        if self.graph.pedal_fifo and not Path(self.graph.pedal_fifo).exists():
            os.mkfifo(self.graph.pedal_fifo)
        self._context = rclpy.Context()
        rclpy.init(context=self._context)
        try:
            for spec in self.graph.nodes:
                self.nodes[spec.name] = self._make(spec)
        except Exception:
            self.stop()
            raise
        self._spinner = NodeSpinner(self._context)
        for node in self.nodes.values():
            self._spinner.add(node)

    def stop(self) -> None:
        """Close every node (recorder first closes its bag), then stop executor and simulators."""
        for name in reversed(list(self.nodes)):
            close = getattr(self.nodes[name], "close", None)
            if callable(close):
                try:
                    close()
                except Exception as exc:  # noqa: BLE001 - keep shutting the others down
                    print(f"run: {name}.close() failed: {exc}", file=sys.stderr)
        # Every node's executor stops (its running callback finishes) and its thread ends; only
        # then are the nodes destroyed.
        if self._spinner is not None:
            self._spinner.shutdown()
        for node in [*self.nodes.values(), *self._retired]:
            node.destroy_node()
        self.nodes.clear()
        self._retired.clear()
        if self._context is not None and self._context.ok():
            self._context.shutdown()
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
    parser.add_argument("--protocol", type=Path, metavar="EVAL_YAML",
                        help="walk an evaluation protocol: one bag per trial, then the results table")
    parser.add_argument("--unattended", action="store_true",
                        help="with --protocol on kind sim: nobody at the keys; the machine check judges each trial")
    parser.add_argument("--resume", action="store_true",
                        help="with --protocol: trials of this protocol already in output_dir count as done")
    parser.add_argument("--seed", type=int, default=0, help="unattended runs: the simulated failures' random seed")


def parse_args_list(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--arg {item!r}: expected NAME=VALUE")
        out[name.strip()] = value
    return out


def _walk_protocol(session: Session, protocol: Any, args: argparse.Namespace, stop: threading.Event) -> list[Path]:
    """Run the protocol on the live session; returns its trial bags (resumed ones included)."""
    from teleop_flywheel.ros.session.evaluation_walk import TrialDriver, run_unattended

    driver = TrialDriver(session, protocol)
    unattended, seed = args.unattended, args.seed
    if args.resume:
        out = Path(session.nodes["recorder"].get_parameter("output_dir").value)
        print(f"run: resuming: {driver.resume(out)} trial(s) of protocol {protocol.hash} already in {out}", flush=True)
    try:
        if unattended:
            from teleop_flywheel.hw.pedal.virtual import VirtualPedal

            pedal = VirtualPedal(session.graph.pedal_fifo)
            try:
                run_unattended(driver, pedal, stop, seed, log=lambda line: print(f"run: {line}", flush=True))
            finally:
                pedal.close()
        else:
            _attended(session, driver, stop)
    finally:
        driver.close()
    done, total = driver.walker.progress()
    print(f"run: protocol {protocol.name}: {done}/{total} trials recorded"
          + ("" if done == total else " — INCOMPLETE; continue it later with the same command and --resume"), flush=True)
    return driver.bags


def _attended(session: Session, driver: Any, stop: threading.Event) -> None:
    import termios
    import tty

    from teleop_flywheel.ros.session.console import ConsoleNode
    from teleop_flywheel.ros.session.console_view import ConsoleState
    from teleop_flywheel.ros.session.evaluation_walk import run_attended

    console = ConsoleNode(ConsoleState(session=f"{session.graph.kind} / {driver.protocol.name}"), context=session.context)
    session.add_node(console.node)
    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    try:
        tty.setcbreak(fd)
        run_attended(driver, console, fd, lambda text: (sys.stdout.write(text), sys.stdout.flush()), stop)
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)
        session.remove_node(console.node)


def run(args: argparse.Namespace) -> int:
    from teleop_flywheel.evaluation.protocol import ProtocolError, load_protocol

    try:
        cfg = config_from_arguments(parse_args_list(args.arg))
        protocol = load_protocol(args.protocol) if args.protocol else None
        if protocol is not None:
            if args.kind not in ("rollout", "sim"):
                raise ValueError(f"--protocol needs a session with a policy: kind rollout or sim, not {args.kind}")
            if args.unattended and args.kind != "sim":
                raise ValueError("--unattended runs on simulated hardware only (kind sim)")
            if not args.unattended and not sys.stdin.isatty():
                raise ValueError("--protocol walks an operator through the trials on a terminal; standard input "
                                 "is not one (use kind sim with --unattended for a run without an operator)")
            cfg = replace(cfg, task=protocol.task)
        graph = build_graph(args.kind, cfg)
        for path in args.param_file:
            graph = with_parameters(graph, load_param_file(path))
    except (ValueError, ProtocolError) as exc:
        print(f"run: {exc}", file=sys.stderr)
        return 2
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    bags: list[Path] = []
    try:
        with Session(graph) as session:
            print(f"run: {args.kind} session up: {', '.join(session.nodes)}; Ctrl-C to stop", flush=True)
            if protocol is not None:
                bags = _walk_protocol(session, protocol, args, stop)
                stop.set()
            deadline = time.monotonic() + args.seconds if args.seconds > 0 else None
            while not stop.is_set() and (deadline is None or time.monotonic() < deadline):
                stop.wait(0.2)
    except KeyboardInterrupt:
        pass
    except (SessionError, ProtocolError, RuntimeError) as exc:
        print(f"run: {exc}", file=sys.stderr)
        return 1
    print("run: session stopped cleanly", flush=True)
    if bags:
        from teleop_flywheel.evaluation.report import build_report, format_table, read_trial

        print(format_table(build_report([read_trial(b) for b in bags], protocol)), flush=True)
    return 0
