"""`teleop-flywheel view`'s body: the live session's LiveView served until Ctrl-C or --seconds."""
from __future__ import annotations

import argparse
import os
import time

from teleop_flywheel.core.errors import UsageError
from teleop_flywheel.core.resources import config_path
from teleop_flywheel.core.topics import normalize_namespace
from teleop_flywheel.ros.session.foxglove.layout import write_layout
from teleop_flywheel.ros.session.foxglove.view import LiveView


def run(args: argparse.Namespace) -> int:
    import rclpy
    from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor

    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    try:
        namespace = normalize_namespace(args.namespace)
    except ValueError as exc:
        raise UsageError(str(exc), where="--namespace", fix="the rig's namespace argument, e.g. rig_a") from exc
    rclpy.init()
    try:
        view = LiveView(namespace=namespace, host=args.host, port=args.port)
    except (RuntimeError, OSError) as exc:
        rclpy.try_shutdown()
        raise UsageError(f"cannot serve ({exc})", where=f"{args.host}:{args.port}",
                         fix="another server holds the port: stop it, or choose --port") from exc
    executor = SingleThreadedExecutor()
    executor.add_node(view.node)
    print(f"view: serving the live session{' ' + namespace if namespace else ''} on ws://{args.host}:{view.port} "
          f"(Foxglove: Open connection → Foxglove WebSocket); layout {config_path('foxglove_layout.json')}; "
          "Ctrl-C to stop", flush=True)
    started = time.monotonic()
    layout_due = args.layout is not None
    try:
        while args.seconds <= 0 or time.monotonic() - started < args.seconds:
            executor.spin_once(timeout_sec=0.1)
            if layout_due and time.monotonic() - started >= 3.0:
                layout_due = False
                write_layout(args.layout, view.cameras)
                print(f"view: layout for cameras {', '.join(view.cameras) or '(none)'} written to {args.layout}",
                      flush=True)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        executor.shutdown()
        view.close()
        rclpy.try_shutdown()
    return 0
