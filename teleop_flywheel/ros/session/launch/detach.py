"""`python -m teleop_flywheel.ros.session.launch.detach [--same-session] CMD ARGS...`: run CMD dying with its parent.

What the supervisor's `child_setup` does for every child, as a command prefix for `ros2 launch`
(whose ExecuteProcess cannot run code in the child): `setsid`, the parent-death signal SIGTERM,
then `exec` — the process *is* CMD afterwards (same pid, same command line for everything after
this prefix). The launch files start the simulated arms this way, so a terminal's Ctrl-C reaches
the nodes but not the simulators: the arm drivers close their ports first, and launch stops
each simulator once its driver has exited (no "bus lost" at the end of a session).

`--nice N` gives CMD low priority from its first instruction (`core/priority.py`: niceness N,
SCHED_BATCH, and its new session's autogroup niced), before it imports anything — the session's
`ingest` node starts its ingest process so.

`--same-session` skips `setsid`: the launch files start every node so — still in the terminal's
process group (Ctrl-C reaches it), but stopped with SIGTERM if `ros2 launch` itself dies (launch
exits on SIGTERM or SIGQUIT without stopping its processes, by design: "can result in orphaned
processes"), as the supervisor's children are.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys

from teleop_flywheel.core.priority import lower_priority

PR_SET_PDEATHSIG = 1


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    same_session, nice = False, 0
    while args and args[0] in ("--same-session", "--nice"):
        if args[0] == "--same-session":
            same_session, args = True, args[1:]
        elif len(args) > 1 and args[1].isdigit():
            nice, args = int(args[1]), args[2:]
        else:
            args = []
    if not args:
        print("usage: python -m teleop_flywheel.ros.session.launch.detach [--same-session] [--nice N] CMD [ARGS...]",
              file=sys.stderr)
        return 2
    parent = os.getppid()
    if not same_session:
        with contextlib.suppress(PermissionError):  # already a process group leader: its own group already, keep it
            os.setsid()
    with contextlib.suppress(OSError, AttributeError):  # not Linux: no parent-death signal
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, ctypes.c_ulong(signal.SIGTERM), 0, 0, 0)
    if os.getppid() != parent:  # the parent died before the death signal was armed
        return 1
    lower_priority(nice)
    try:
        os.execvp(args[0], args)
    except OSError as exc:
        print(f"detach: cannot run {args[0]}: {exc.strerror}", file=sys.stderr)
        return 127
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
