"""Scheduling both ways: the rig's loops ahead of everything else, background work behind it.

`request_realtime(priority)`: SCHED_FIFO at `priority` for the calling thread (`whole_process`:
every thread of the process) and memory locked, where permitted — what ros2_control's controller
manager does for its control loop (`realtime_tools::configure_sched_fifo` on the loop's thread,
`thread_priority` 50 by default, and `realtime_tools::lock_memory`: `mlockall(MCL_CURRENT |
MCL_FUTURE)`). It is for the loops that drive the arms (an arm driver's bus thread, the teleop
loop) and for a simulated arm (`sim-bus`), which stands for hardware no load on the host stalls. Where
the system refuses, it says so once per process, naming the limit and the fix, and goes on at the
normal policy: `Realtime` says what was granted (for `/diagnostics`). It never makes things worse:
priority 0 asks for nothing, a thread already real-time at or above the priority is left alone,
and memory is locked only where nothing can then fail for want of lockable memory. A process made
real-time as a whole also moves its heap as it is then (its imports, the node it built) out of the
cyclic garbage collector's reach (`gc.freeze`): a full collection holds the GIL, so every thread of
the process, its loop too, waits while it walks every object. Measured at SCHED_FIFO 50 on a loaded
2-core machine, an arm driver's process after its imports: 35,000 objects, 5 to 20 ms per full
collection (one to four 200 Hz ticks); frozen, a collection walks only what was allocated since.

`lower_priority(n)`: at least niceness `n` for this process (and what it starts after), SCHED_BATCH
unless `batch=False` (the scheduler then treats it as CPU-bound, never a latency-sensitive task), and — when this
process leads its own session — its session's autogroup niced too. The autogroup is what counts under the
kernel's `sched_autogroup` (the default on desktop and server distributions): CPU time is first
shared between sessions, and each of a session's processes runs in its own (`teleop-flywheel run`
gives every node one), so a niced process in a session of its own is what keeps the recorder's
and the arms' CPU share. Idempotent: a second call with the same `n` changes nothing.

`keep_scheduling()`: nothing run inside it can make a thread of this process real-time. SVT-AV1
(FFmpeg's `libsvtav1`, LeRobot's codec) switches the thread that opens an encoder to SCHED_FIFO 99
whenever it runs as root, and the encoder threads it then starts inherit that: a conversion meant
to yield to the rig would preempt the arm drivers instead, and so would every process it starts
(and, measured, every DDS thread the process starts later, though its own thread was put back).
Real-time is for the rig alone, at `RT_PRIORITY` (50): below the kernel's own real-time threads
(99), which a control loop must never hold off.
"""
from __future__ import annotations

import ctypes
import gc
import os
import resource
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

RT_PRIORITY = 50  # ros2_control_node's kSchedPriority: mid-range, leaving room above and below


def lower_priority(nice: int, *, batch: bool = True) -> None:
    if nice <= 0:
        return
    try:
        if os.getpriority(os.PRIO_PROCESS, 0) < nice:
            os.setpriority(os.PRIO_PROCESS, 0, min(19, nice))
    except OSError:
        pass
    if batch:
        with suppress(AttributeError, OSError):
            os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
    if os.getsid(0) == os.getpid():
        with suppress(OSError):
            Path("/proc/self/autogroup").write_text(str(min(19, nice)))


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


_CAP_V3, _CAP_IPC_LOCK, _CAP_SYS_NICE = 0x20080522, 14, 23  # linux/capability.h
_LIBC = ctypes.CDLL(None, use_errno=True)


def _capabilities() -> tuple[_CapHeader, ctypes.Array[_CapData]] | None:
    """This thread's capability sets (capget), or None where the call is refused."""
    header, data = _CapHeader(_CAP_V3, 0), (_CapData * 2)()
    return (header, data) if _LIBC.capget(ctypes.byref(header), data) == 0 else None


def _capable(cap: int) -> bool:
    """`cap` is in this thread's effective set."""
    caps = _capabilities()
    return caps is not None and bool(caps[1][0].effective & (1 << cap))


@contextmanager
def keep_scheduling() -> Iterator[None]:
    """Run the code inside without the right to make anything real-time: CAP_SYS_NICE leaves this
    thread's effective set (threads started inside inherit that) and the process's soft
    RLIMIT_RTPRIO is 0 (a root service given `LimitRTPRIO=99` for its rig, as `request_realtime`
    advises, would otherwise still be allowed), so SVT-AV1's attempt fails and it says so (`Failed
    to set thread priority`); both come back afterwards. A process with neither (not root, no
    real-time limit) cannot be raised anyway and is left alone."""
    soft, hard = resource.getrlimit(resource.RLIMIT_RTPRIO)
    lowered = False
    if soft != 0:
        try:
            resource.setrlimit(resource.RLIMIT_RTPRIO, (0, hard))
            lowered = True
        except (ValueError, OSError):
            pass
    caps = _capabilities()
    dropped = False
    if caps is not None and caps[1][0].effective & (1 << _CAP_SYS_NICE):
        header, data = caps
        data[0].effective &= ~(1 << _CAP_SYS_NICE)
        dropped = _LIBC.capset(ctypes.byref(header), data) == 0
    try:
        yield
    finally:
        if dropped:
            data[0].effective |= 1 << _CAP_SYS_NICE
            _LIBC.capset(ctypes.byref(header), data)
        if lowered:
            resource.setrlimit(resource.RLIMIT_RTPRIO, (soft, hard))


# -- real-time ---------------------------------------------------------------------------------
# MCL_ONFAULT (Linux 4.4) locks each page once it is touched instead of faulting in every mapping
# at once: measured on an rclpy node process (19 threads), plain MCL_CURRENT | MCL_FUTURE took its
# resident memory from 68 MB to 339 MB (each thread's whole 8 MiB stack and every library mapped
# in full), with MCL_ONFAULT it stays at 68 MB. A page the loop uses is never paged out either way.
_MCL_CURRENT, _MCL_FUTURE, _MCL_ONFAULT = 1, 2, 4
_FIX = ("add `@realtime - rtprio 99` and `@realtime - memlock unlimited` to /etc/security/limits.conf, "
        "`sudo groupadd -f realtime && sudo usermod -aG realtime $USER` and log in again (a systemd service: "
        "LimitRTPRIO=99 and LimitMEMLOCK=infinity under [Service]; a container: docker run --ulimit rtprio=99 "
        "--ulimit memlock=-1)")
_said: set[str] = set()
_said_lock = threading.Lock()


@dataclass(frozen=True)
class Realtime:
    """What `request_realtime` got: the SCHED_FIFO priority in force on the thread(s) it was asked
    for (0: the normal policy), whether this process's memory is locked, and what was refused: the
    message said once, with the fix (empty if nothing was)."""

    requested: int
    priority: int
    memory_locked: bool
    refused: str = ""

    @property
    def values(self) -> dict[str, object]:
        """Key-value pairs for a `/diagnostics` status."""
        return {"sched_fifo_requested": self.requested, "sched_fifo_priority": self.priority,
                "memory_locked": self.memory_locked, "realtime_refused": self.refused or "nothing"}


def _say_once(message: str, say: Callable[[str], None] | None) -> None:
    with _said_lock:
        if message in _said:
            return
        _said.add(message)
    if say is None:
        print(message, file=sys.stderr, flush=True)
    else:
        say(message)


def _memory_locked() -> bool:
    """This process holds locked memory (an mlockall is in force)."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return False
    return any(line.startswith("VmLck:") and int(line.split()[1]) > 0 for line in status.splitlines())


def _rtprio_limit(priority: int) -> int:
    """The highest SCHED_FIFO priority up to `priority` an unprivileged process may take: its soft
    RLIMIT_RTPRIO, raised first as far as the hard limit allows (`@realtime hard rtprio 99` with a
    soft limit of 0 is a common setup)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_RTPRIO)
    soft_n, hard_n = (sys.maxsize if v == resource.RLIM_INFINITY else v for v in (soft, hard))
    if soft_n < priority and hard_n > soft_n:
        try:
            resource.setrlimit(resource.RLIMIT_RTPRIO, (min(priority, hard_n), hard))
            soft_n = min(priority, hard_n)
        except (ValueError, OSError):
            pass
    return min(soft_n, priority)


def _memlock_unlimited() -> bool:
    """RLIMIT_MEMLOCK is unlimited (its soft limit raised first where the hard one is)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    if soft != resource.RLIM_INFINITY and hard == resource.RLIM_INFINITY:
        try:
            resource.setrlimit(resource.RLIMIT_MEMLOCK, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass
    return soft == resource.RLIM_INFINITY


def _priorities(tids: list[int]) -> dict[int, int]:
    """The real-time priority of each thread still there (0 on a normal policy)."""
    out = {}
    for tid in tids:
        try:
            policy = os.sched_getscheduler(tid) & ~os.SCHED_RESET_ON_FORK
            out[tid] = os.sched_getparam(tid).sched_priority if policy in (os.SCHED_FIFO, os.SCHED_RR) else 0
        except ProcessLookupError:  # a thread that ended meanwhile
            continue
    return out


def _set_fifo(tids: list[int], priority: int, flags: int) -> tuple[int, str]:
    """SCHED_FIFO at `priority` — or at RLIMIT_RTPRIO where that is all an unprivileged process may
    have — on every thread of `tids` below it: (the lowest real-time priority the threads then
    have, what was refused)."""
    before = _priorities(tids)
    if all(p >= priority for p in before.values()):
        return min(before.values(), default=0), ""
    rtprio = priority if _capable(_CAP_SYS_NICE) else _rtprio_limit(priority)
    refused = ""
    if rtprio < priority:
        refused = (f"SCHED_FIFO {priority} refused: RLIMIT_RTPRIO is {rtprio} and this process lacks CAP_SYS_NICE; "
                   + (f"running at SCHED_FIFO {rtprio}" if rtprio > 0 else "running at the normal policy"))
    try:
        for tid, p in before.items():
            if p < rtprio:  # never lowered: a thread already above what is granted keeps its priority
                try:
                    os.sched_setscheduler(tid, os.SCHED_FIFO | flags, os.sched_param(rtprio))
                except ProcessLookupError:
                    continue
    except PermissionError:
        # Permitted by the capability or the limit, refused anyway: the kernel's real-time group
        # scheduling (CONFIG_RT_GROUP_SCHED) gives this process's cgroup no real-time runtime.
        refused = (f"SCHED_FIFO {priority} refused although RLIMIT_RTPRIO or CAP_SYS_NICE allows it: this process's "
                   "cgroup has no real-time runtime (cpu.rt_runtime_us 0: give it some, or run in the root cgroup)")
    after = _priorities(list(before))
    return min(after.values(), default=0), refused


def _lock_memory() -> str:
    """mlockall where nothing can fail for it later; what was refused (empty if locked)."""
    if not _capable(_CAP_IPC_LOCK) and not _memlock_unlimited():
        # Under a finite RLIMIT_MEMLOCK, MCL_FUTURE makes every later mapping past the limit fail
        # (a thread's stack, a buffer): a lock that could break the process is not tried.
        soft = resource.getrlimit(resource.RLIMIT_MEMLOCK)[0]
        return (f"memory not locked: RLIMIT_MEMLOCK is {soft // 1024} KiB, not unlimited, and this process lacks "
                "CAP_IPC_LOCK")
    if _LIBC.mlockall(_MCL_CURRENT | _MCL_FUTURE | _MCL_ONFAULT) != 0:
        return f"memory not locked: mlockall failed ({os.strerror(ctypes.get_errno())})"
    return ""


def request_realtime(priority: int, *, lock_memory: bool = True, whole_process: bool = False,
                     say: Callable[[str], None] | None = None) -> Realtime:
    """SCHED_FIFO at `priority` (1-99; 0 asks for nothing) for the calling thread, or with
    `whole_process` for every thread of this process, and — with `lock_memory` — this process's
    memory locked (mlockall MCL_CURRENT | MCL_FUTURE | MCL_ONFAULT). What is refused is said once
    per process through `say` (default: standard error), naming the limit and the fix.

    A calling thread's children (threads or processes it starts) begin at the normal policy
    (SCHED_RESET_ON_FORK): only the loop that asked runs real-time. With `whole_process` the
    threads the process starts later inherit the policy, as a simulated arm's serving threads do,
    and the heap as it is now is frozen (`gc.freeze`, module doc), granted or not: the loop waits
    on a collection the same at any policy.
    """
    if priority <= 0 or not hasattr(os, "sched_setscheduler"):
        return Realtime(0, 0, False)
    priority = min(priority, os.sched_get_priority_max(os.SCHED_FIFO))
    if whole_process:
        gc.freeze()
        tids, flags = [int(tid) for tid in os.listdir("/proc/self/task")], 0
    else:
        tids, flags = [threading.get_native_id()], os.SCHED_RESET_ON_FORK
    got, refused = _set_fifo(tids, priority, flags)
    memory = _lock_memory() if lock_memory else ""
    problems = "; ".join(part for part in (refused, memory) if part)
    message = f"{problems}. To allow it: {_FIX}" if problems else ""
    if message:
        _say_once(message, say)
    return Realtime(priority, got, _memory_locked(), message)
