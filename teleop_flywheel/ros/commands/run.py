"""`teleop-flywheel run KIND`: start a session graph, one process per node (no `ros2 launch` needed).

The same `graph.build_graph` the launch files use, started and supervised by `supervisor.Session`
exactly as `ros2 launch` would start it: each node in its own process, simulated arms (kind `sim`)
as `sim-bus` processes. `--arg task=task.yaml` (or `task:=task.yaml`) loads and checks the task
spec first: a bad file is one line naming the file and the field, exit 2, before any process
starts. `--param-file` and the `params_file` argument are merged into the nodes' parameters
before anything starts (a node name no graph has is an error). A node that dies is
reported with its exit code and the whole session stops (exit 1); Ctrl-C or SIGTERM stops every
process in order (exit 0).
"""
from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from teleop_flywheel.core.errors import EXIT_PARTIAL, PROG, FlywheelError, UsageError, error_line
from teleop_flywheel.core.signals import SignalStop
from teleop_flywheel.ros.errors import SessionError
from teleop_flywheel.ros.session.launch.graph import (
    LAUNCH_ARGUMENTS,
    build_graph,
    config_from_arguments,
    with_params_files,
)
from teleop_flywheel.ros.session.launch.supervisor import (  # noqa: F401 - end_process, start_sim_arm: re-exported
    Session,
    end_process,
    start_sim_arm,
)


def check_calibrations(graph: Any) -> None:
    """A calibration file an arm driver would die on stops `run` before anything starts, with the
    file and field named (CalibrationError), as a malformed argument does."""
    from teleop_flywheel.core.calibration import load_calibration

    for node in graph.nodes:
        path = node.parameters.get("calibration_file") if node.executable == "arm_driver" else None
        if path:
            load_calibration(path)


def parse_args_list(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep:
            raise UsageError(f"--arg {item!r}: expected NAME=VALUE", fix=f"e.g. --arg cameras=front:/dev/video0; "
                             f"names: {', '.join(LAUNCH_ARGUMENTS)}")
        out[name.strip().removesuffix(":")] = value  # NAME:=VALUE too, as ros2 launch spells it
    return out


def _walk_protocol(session: Session, protocol: Any, args: argparse.Namespace, stop: threading.Event) -> list[Path]:
    """Run the protocol on the live session; returns its trial bags (resumed ones included)."""
    from teleop_flywheel.ros.session.trials import TrialDriver, run_unattended

    driver = TrialDriver(session, protocol)
    if args.resume:
        out = Path(session.graph.node("recorder").parameters["output_dir"]).expanduser()
        print(f"run: resuming: {driver.resume(out)} trial(s) of protocol {protocol.hash} already in {out}", flush=True)
    try:
        if args.unattended:
            run_unattended(driver, stop, log=lambda line: print(f"run: {line}", flush=True))
        else:
            _attended(session, driver, stop)
    finally:
        driver.close()
    done, total = driver.walker.progress()
    print(
        f"run: protocol {protocol.name}: {done}/{total} trials recorded"
        + ("" if done == total else " — INCOMPLETE; continue it later with the same command and --resume"),
        flush=True,
    )
    return driver.bags


def _write(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


def _attended(session: Session, driver: Any, stop: threading.Event) -> None:
    import termios
    import tty

    from teleop_flywheel.ros.commands.console import ConsoleNode
    from teleop_flywheel.ros.session.console_view import ConsoleState
    from teleop_flywheel.ros.session.trials import run_attended

    console = ConsoleNode(
        ConsoleState(session=f"{session.graph.kind} / {driver.protocol.name}"), context=session.context
    )
    session.add_node(console.node)
    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    try:
        tty.setcbreak(fd)
        run_attended(driver, console, fd, _write, stop)
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)
        session.remove_node(console.node)


def run(args: argparse.Namespace) -> int:
    from teleop_flywheel.evaluation.errors import ProtocolError
    from teleop_flywheel.evaluation.protocol import load_protocol

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
        graph = with_params_files(build_graph(args.kind, cfg), tuple(args.param_file))
        check_calibrations(graph)
    except ValueError as exc:  # a ProtocolError/CalibrationError as it is: one line, exit 2 (cli/)
        if isinstance(exc, FlywheelError):
            raise
        raise UsageError(str(exc), fix=f"{PROG} run --help lists the session arguments") from exc
    stop = threading.Event()
    waiting = True  # for the session to start, or for it to stop: a signal then interrupts the wait

    def interrupt_a_wait() -> None:
        if waiting:  # the start waits for every node, the stop for each to exit: give up as Ctrl-C does
            raise KeyboardInterrupt

    session = Session(graph, log=lambda text: print(f"run: {text}", file=sys.stderr, flush=True),
                      on_failure=lambda _text: stop.set())
    bags: list[Path] = []
    error: BaseException | None = None
    # While the session runs, a signal only sets `stop` (never an exception in the middle of the
    # supervisor's bookkeeping); SIGHUP: the terminal went away, stop in order as for SIGTERM.
    with SignalStop(stop, (signal.SIGINT, signal.SIGTERM, signal.SIGHUP), then=interrupt_a_wait):
        try:
            with session:
                waiting = False
                names = [*session.node_names, *(p for p in session.processes if p not in session.node_names)]
                print(f"run: {args.kind} session up: {len(names)} processes ({', '.join(names)}); Ctrl-C to stop",
                      flush=True)
                if protocol is not None:
                    bags = _walk_protocol(session, protocol, args, stop)
                    stop.set()
                deadline = time.monotonic() + args.seconds if args.seconds > 0 else None
                while not stop.is_set() and (deadline is None or time.monotonic() < deadline):
                    stop.wait(0.2)
                waiting = True  # a second Ctrl-C while the nodes stop: kill what is left (Session._end)
        except KeyboardInterrupt:
            pass
        except (SessionError, ProtocolError, RuntimeError) as exc:
            error = exc
    see_above = "the lines above say why; --arg and --param-file set what the nodes run with"
    if session.failed.is_set():
        print(error_line("run", f"session stopped because {session.failure}", fix=see_above),
              file=sys.stderr, flush=True)
        return EXIT_PARTIAL
    if session.problems:
        why = f" (it was stopping because: {error})" if error is not None else ""  # what ended the walk
        print(error_line("run", f"session stopped, not cleanly: {'; '.join(session.problems)}{why}", fix=see_above),
              file=sys.stderr, flush=True)
        return EXIT_PARTIAL
    if error is not None:
        print(error_line("run", error), file=sys.stderr, flush=True)
        return EXIT_PARTIAL
    print("run: session stopped cleanly", flush=True)
    if bags and protocol is not None:
        from teleop_flywheel.evaluation.report import build_report, format_table, read_trial

        print(format_table(build_report([read_trial(b) for b in bags], protocol)), flush=True)
    return 0

