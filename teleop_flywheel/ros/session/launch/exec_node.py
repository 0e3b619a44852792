"""`python -m teleop_flywheel.ros.session.launch.exec_node EXECUTABLE [--ros-args ...]`: one node, one process.

Runs what the console script `EXECUTABLE` runs (`ros2 run teleop_flywheel EXECUTABLE`): the
node module's `main()`, with the ROS arguments the session supervisor gives it. Through the
interpreter that runs the supervisor, so a session needs no scripts on PATH. A node that fails
at start with a known error (a bad parameter, a missing device) says so in one line.
"""
from __future__ import annotations

import importlib
import sys

from teleop_flywheel.core.errors import FlywheelError
from teleop_flywheel.ros.session.launch.graph import EXECUTABLES


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] not in EXECUTABLES:
        print(f"usage: exec_node {{{','.join(EXECUTABLES)}}} [--ros-args ...]", file=sys.stderr)
        return 2
    executable = args[0]
    name = next((a.split(":=", 1)[1] for a in args if a.startswith("__node:=")), executable)
    sys.argv = [executable, *args[1:]]
    try:
        module = importlib.import_module(EXECUTABLES[executable].partition(":")[0])
        return int(module.main() or 0)
    except KeyboardInterrupt:  # stopped while still starting, before rclpy handles signals
        return 130
    except (FlywheelError, ValueError, OSError) as exc:
        print(f"{name}: {exc}", file=sys.stderr, flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(main())
