"""Benchmark: CPU per node in a simulated session; the arm driver's CPU per tick against the floor.

CPU is measured as CPU seconds (utime + stime from /proc/<pid>/stat, the processes a node started
included) over fixed windows, repeated to show the spread:

- `session`: the `sim` graph the demo runs (two `sim-bus` arms, both arm drivers at 200 Hz,
  teleop, the scripted policy, the pedal, a 320x240 synthetic camera at 30 fps, the recorder and
  ingest), one process per node (`Session`, as `teleop-flywheel run sim` starts it); each window
  records one episode. Reported per node as % of one core.
- `driver`: the arm driver's CPU per tick beside the floor, in the same run. Each `arm_driver`
  node process drives its own `sim-bus` at `--rate` Hz; beside them, a bare loop per role does
  the same transactions on its own `sim-bus` (the same kind of pty) at the same rate: one sync
  read of address 56, 6 bytes (position, velocity, load) of ids 1-6, checked (header, id,
  length, checksum), one `sensor_msgs/JointState` published, and — for the follower, whose driver
  writes a goal every tick — one sync write of Goal_Position. That loop is the floor: what any
  Python rclpy driver of this bus pays. A listener process subscribes to all four streams (as
  the recorder does) and counts the samples: ticks = samples delivered. The floor gets the
  drivers' scheduling (the SCHED_FIFO priority seen on a driver thread, if any). Target (SPEC
  §9): the driver within 1.5x of the floor.
- with `--profile-seconds`, the follower's driver and its floor then run again with their bus
  loops under cProfile timed by the thread's CPU clock: CPU per tick per function, self and
  cumulative, so the CPU above the floor can be placed function by function. (A sampling
  profiler was tried: py-spy, native or not, counted a sleeping loop as busy for most samples.)
- `steps`: each step of a follower tick — the project's function the driver calls for it, and the
  floor's way of doing the same — called alone once per period at `--rate` (so with caches as
  cold as in the loop), its CPU less that of an empty period.

Writes bench/results/rig_cpu.json. Usage:
python bench/rig_cpu.py [--part all|session|driver|steps] [--seconds 20] [--repeats 3] [--profile-seconds 20]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import select
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from result_file import write_result

HERE = Path(__file__).resolve()
CLK_TCK = os.sysconf("SC_CLK_TCK")
IDS = list(range(1, 7))
READ_ADDR, READ_SIZE = 56, 6  # Present_Position, Present_Velocity, Present_Load: the driver's fast read
GOAL_ADDR, GOAL_SIZE = 42, 2  # Goal_Position
NAMES = ["shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper"]
RAD_PER_STEP = 2 * math.pi / 4096
STREAMS = {"leader_arm": "/leader/joint_states", "follower_arm": "/follower/joint_states",
           "floor_leader": "/floor_leader/joint_states", "floor_follower": "/floor_follower/joint_states"}


# -- CPU of a process and what it started ---------------------------------------------------------

def _stat(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2:].split()  # fields from state (3) on


def _children_of() -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (fields := _stat(int(entry))) is not None:
            out.setdefault(int(fields[1]), []).append(int(entry))
    return out


def _uptime_ticks() -> int:
    return int(float(Path("/proc/uptime").read_text().split()[0]) * CLK_TCK)


class TreeCPU:
    """CPU seconds each named process and its descendants spend in a window, sampled twice a
    second so that a worker started (or ended) inside the window is counted from its start (or
    up to its last sample)."""

    def __init__(self, roots: dict[str, int]) -> None:
        self.roots = roots
        self._first: dict[int, tuple[str, int]] = {}  # pid -> (root name, cpu ticks at first sight)
        self._last: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._start_ticks = 0
        self.wall_s = 0.0

    def _sample(self) -> None:
        children = _children_of()
        for name, root in self.roots.items():
            todo = [root]
            while todo:
                pid = todo.pop()
                todo += children.get(pid, [])
                fields = _stat(pid)
                if fields is None:
                    continue
                cpu = int(fields[11]) + int(fields[12])
                if pid not in self._first:
                    born_inside = int(fields[19]) > self._start_ticks
                    self._first[pid] = (name, 0 if born_inside else cpu)
                self._last[pid] = cpu

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            self._sample()

    def __enter__(self) -> TreeCPU:
        self._start_ticks = _uptime_ticks()
        self._t0 = time.monotonic()
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._sample()
        self.wall_s = time.monotonic() - self._t0
        self._stop.set()
        self._thread.join()

    def seconds(self) -> dict[str, dict[str, float]]:
        """Per root: its own CPU seconds and its descendants'."""
        out = {name: {"own_s": 0.0, "started_s": 0.0} for name in self.roots}
        for pid, (name, first) in self._first.items():
            key = "own_s" if pid == self.roots[name] else "started_s"
            out[name][key] += (self._last[pid] - first) / CLK_TCK
        return out


def spread(values: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(values), 4), "min": round(min(values), 4),
            "max": round(max(values), 4)}


def ros_env() -> dict[str, str]:
    env = dict(os.environ, ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST")
    env.setdefault("ROS_DOMAIN_ID", str(random.randint(1, 101)))
    return env


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds so far of `pid`'s threads, by kind: its main thread (a node's executor, a floor's
    loop), its other Python threads (a driver's bus loop), and the DDS threads (named `dds.*`)."""
    out = {"main": 0.0, "other python threads": 0.0, "dds threads": 0.0}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            comm = Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
            fields = Path(f"/proc/{pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        kind = "main" if int(tid) == pid else ("dds threads" if comm.startswith("dds.") else "other python threads")
        out[kind] += (int(fields[11]) + int(fields[12])) / CLK_TCK
    return out


# -- part 1: a simulated session ------------------------------------------------------------------

def measure_session(seconds: float, repeats: int) -> dict[str, Any]:
    from teleop_flywheel.ros.commands.clients import RecorderStatus
    from teleop_flywheel.ros.nodes.recorder_client import RecorderClient
    from teleop_flywheel.ros.session.launch.graph import CameraSpec, SessionConfig, build_graph, with_parameters
    from teleop_flywheel.ros.session.launch.supervisor import Session

    os.environ.update(ros_env())
    tmp = Path(tempfile.mkdtemp(prefix="bench_rig_cpu_"))
    policy_file = tmp / "policy.yaml"
    policy_file.write_text("move_s: 2.0\nfail_every: 2\nfail_offset_rad: 0.35\n")  # the demo's
    cfg = SessionConfig(cameras=(CameraSpec("front", source="synthetic", device="synthetic", fps=30.0,
                                            width=320, height=240),),
                        output_dir=str(tmp / "bags"), task="bench", operator="bench", checkpoint_id="scripted-v0",
                        policy_args=str(policy_file), ingest=True)
    graph = with_parameters(build_graph("sim", cfg), {"ingest": {"quarantine": False, "audit": False,
                                                                 "repo_id": "local/rig_cpu"}})
    windows: list[dict[str, dict[str, float]]] = []  # per window, per node: % of one core
    loads = []
    try:
        with Session(graph) as session:
            operator = RecorderClient(session.context, "rig_cpu_operator")
            status = RecorderStatus(operator.node)
            session.add_node(operator.node)
            if not operator.ready(60.0):
                raise RuntimeError("the recorder's services did not come up")
            status.wait_all_topics(60.0)
            roots = {name: proc.pid for name, proc in session.processes.items()}
            roots["supervisor (this process)"] = os.getpid()
            for _ in range(repeats):
                operator.call("start")
                time.sleep(1.0)  # the episode's streams settle
                loads.append(os.getloadavg()[0])
                threads0 = {name: thread_cpu(pid) for name, pid in roots.items()}
                with TreeCPU(roots) as cpu:
                    time.sleep(seconds)
                threads1 = {name: thread_cpu(pid) for name, pid in roots.items()}
                operator.call("stop")
                operator.call("keep")
                windows.append({name: {"cpu_pct": (parts["own_s"] + parts["started_s"]) / cpu.wall_s * 100,
                                       "started_pct": parts["started_s"] / cpu.wall_s * 100,
                                       **{f"{kind} pct": (threads1[name][kind] - t0) / cpu.wall_s * 100
                                          for kind, t0 in threads0[name].items()}}
                                for name, parts in cpu.seconds().items()})
                time.sleep(3.0)  # as between the demo's episodes: the verdict and ingest run here
            session.remove_node(operator.node)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    per_node = {name: {key: spread([w[name][key] for w in windows]) for key in windows[0][name]}
                for name in windows[0]}
    totals = [sum(w[n]["cpu_pct"] for n in w) for w in windows]
    return {"what": "one episode recorded per window; % of one core; started = processes a node started (ingest's "
                    "worker, the recorder's validator); by thread of the node's own process: main (its executor), "
                    "other python threads (an arm driver's bus loop), dds threads",
            "window_s": seconds, "repeats": repeats, "load_average_at_windows": loads,
            "per_node": dict(sorted(per_node.items(), key=lambda kv: -kv[1]["cpu_pct"]["median"])),
            "total_pct": spread(totals)}


# -- part 2: the driver against the floor ---------------------------------------------------------

def start_sim(role: str, env: dict[str, str]) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([sys.executable, "-m", "teleop_flywheel.cli", "sim-bus", "--arm", role],
                            stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None
    return proc, proc.stdout.readline().strip()


def role_listener() -> None:
    """Count the samples of every stream; print the counts on each line read from stdin."""
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from sensor_msgs.msg import JointState

    from teleop_flywheel.ros.nodes.common import STREAM_QOS

    rclpy.init()
    node = rclpy.create_node("rig_cpu_listener")
    counts = dict.fromkeys(STREAMS.values(), 0)

    def counter(topic: str) -> Any:
        def on(_data: bytes) -> None:
            counts[topic] += 1
        return on

    for topic in STREAMS.values():
        node.create_subscription(JointState, topic, counter(topic), STREAM_QOS, raw=True)
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    threading.Thread(target=executor.spin, daemon=True).start()
    for _line in sys.stdin:
        print(json.dumps(counts), flush=True)
    executor.shutdown()
    rclpy.shutdown()


def role_floor(port: str, topic: str, write: bool, rate_hz: float, priority: int, profile_out: str) -> None:
    """The bare loop: the driver's transactions and nothing else (see the module doc)."""
    import rclpy
    import serial
    from sensor_msgs.msg import JointState

    from teleop_flywheel.core.priority import request_realtime
    from teleop_flywheel.hw.feetech import codec
    from teleop_flywheel.ros.nodes.common import STREAM_QOS

    rclpy.init()
    node = rclpy.create_node(topic.strip("/").split("/")[0])
    pub = node.create_publisher(JointState, topic, STREAM_QOS)
    line = serial.Serial(port, 1_000_000, timeout=0)
    fd = line.fileno()
    request_realtime(priority)
    read_packet = codec.sync_read(READ_ADDR, READ_SIZE, IDS)
    reply_len = len(IDS) * (READ_SIZE + 6)
    msg = JointState()
    msg.name = NAMES
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())

    def loop() -> None:
        period_ns = int(1e9 / rate_hz)
        next_tick = time.monotonic_ns()
        while not stop.is_set():
            try:
                os.write(fd, read_packet)
            except OSError:  # the simulator is gone
                return
            reply = b""
            deadline = time.monotonic() + 0.02
            while len(reply) < reply_len and (wait := deadline - time.monotonic()) > 0:
                if select.select([fd], [], [], wait)[0]:
                    reply += os.read(fd, 4096)
            stamp = time.time_ns()
            pos, vel, eff = [], [], []
            ok = len(reply) == reply_len
            for k, sid in enumerate(IDS):
                status = reply[k * 12:(k + 1) * 12]
                ok = ok and status[:3] == bytes((0xFF, 0xFF, sid)) and status[3] == READ_SIZE + 2 \
                    and status[11] == codec.checksum(status[2:11])
                if not ok:
                    break
                p, v, e = (int.from_bytes(status[5 + 2 * i:7 + 2 * i], "little") for i in range(3))
                pos.append(((p & 0x7FFF) * (-1 if p & 0x8000 else 1) - 2048) * RAD_PER_STEP)
                vel.append((v & 0x7FFF) * (-1 if v & 0x8000 else 1) * RAD_PER_STEP)
                eff.append((e & 0x3FF) * (-1 if e & 0x400 else 1) / 1000.0)
            if ok:
                msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(stamp, 1_000_000_000)
                msg.position, msg.velocity, msg.effort = pos, vel, eff
                pub.publish(msg)
                if write:
                    goal = {sid: int(round(x / RAD_PER_STEP)) + 2048 for sid, x in zip(IDS, pos, strict=True)}
                    os.write(fd, codec.sync_write(GOAL_ADDR, GOAL_SIZE, goal))
            next_tick += period_ns
            delay = next_tick - time.monotonic_ns()
            if delay > 0:
                time.sleep(delay / 1e9)
            elif delay < -period_ns:
                next_tick = time.monotonic_ns()

    if profile_out:
        profiled(loop, profile_out)()
    else:
        loop()
    line.close()
    node.destroy_node()
    rclpy.shutdown()


def profiled(fn: Any, out: str) -> Any:
    """`fn` under cProfile timed by this thread's CPU clock (time spent waiting is not counted),
    the statistics written to `out` when it returns."""
    import cProfile

    def run(*args: Any, **kwargs: Any) -> Any:
        prof = cProfile.Profile(time.thread_time)
        prof.enable()
        try:
            return fn(*args, **kwargs)
        finally:
            prof.disable()
            prof.dump_stats(out)

    return run


def role_profiled_driver(profile_out: str, ros_args: list[str]) -> None:
    """The `arm_driver` node as its console script runs it, its bus loop (`ArmDriver.run`, the
    thread that ticks) under `profiled`."""
    from teleop_flywheel.ros.nodes import arm_driver

    driver = arm_driver.ArmDriver
    driver.run = profiled(driver.run, profile_out)
    sys.argv = [sys.argv[0], *ros_args]
    arm_driver.main()


def realtime_priority(pid: int) -> int:
    """The highest SCHED_FIFO/RR priority among `pid`'s threads (0: none real-time)."""
    best = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            if os.sched_getscheduler(int(tid)) & ~os.SCHED_RESET_ON_FORK in (os.SCHED_FIFO, os.SCHED_RR):
                best = max(best, os.sched_getparam(int(tid)).sched_priority)
        except OSError:
            continue
    return best


def per_tick(stats_file: Path, top: int = 30) -> dict[str, Any]:
    """A bus loop's cProfile statistics per tick (ticks = calls of rclpy's Publisher.publish: one
    sample published per tick): CPU microseconds per function, self and with what it calls."""
    import pstats

    stats: dict[tuple[str, int, str], tuple[int, int, float, float, Any]] = pstats.Stats(str(stats_file)).stats  # type: ignore[attr-defined]
    ticks = next(nc for (path, _line, name), (_cc, nc, *_r) in stats.items()
                 if name == "publish" and path.endswith("rclpy/publisher.py"))

    def label(key: tuple[str, int, str]) -> str:
        path, line, name = key
        short = path.split("site-packages/")[-1].split("/teleop_flywheel/")[-1].split("/bench/")[-1]
        return f"{name} ({short}:{line})" if line else name

    def table(column: int) -> list[list[Any]]:
        ranked = sorted(stats.items(), key=lambda kv: -kv[1][column])[:top]
        return [[label(k), round(v[column] / ticks * 1e6, 2), round(v[1] / ticks, 2)] for k, v in ranked]

    return {"ticks": ticks, "us_per_tick": round(sum(v[2] for v in stats.values()) / ticks * 1e6, 1),
            "columns": ["function", "us_per_tick", "calls_per_tick"],
            "self": table(2), "cumulative": table(3)}


class Rig:
    """The driver part's processes: a `sim-bus` per arm and per floor, the two drivers, the two
    floors and the listener, stopped in reverse order (the simulators last)."""

    def __init__(self, rate_hz: float) -> None:
        self.rate_hz = rate_hz
        self.env = ros_env()
        self.procs: dict[str, subprocess.Popen[str]] = {}
        self.ports: dict[str, str] = {}

    def start_sims(self) -> None:
        for name in STREAMS:
            self.procs[f"sim_{name}"], self.ports[name] = start_sim("leader" if "leader" in name else "follower",
                                                                    self.env)

    def start_listener(self) -> None:
        self.procs["listener"] = subprocess.Popen([sys.executable, str(HERE), "--role", "listener"], env=self.env,
                                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def counts(self) -> dict[str, int]:
        listener = self.procs["listener"]
        assert listener.stdin is not None and listener.stdout is not None
        listener.stdin.write("\n")
        listener.stdin.flush()
        return json.loads(listener.stdout.readline())  # type: ignore[no-any-return]

    def start_driver(self, name: str, profile_out: str = "") -> None:
        from teleop_flywheel.core.calibration import sim_calibration_file

        role = name.split("_")[0]
        ros_args = ["--ros-args", "-r", f"__node:={name}", "-p", f"port:={self.ports[name]}", "-p", f"role:={role}",
                    "-p", f"rate_hz:={self.rate_hz}", "-p", f"calibration_file:={sim_calibration_file(role)}",
                    "-p", "simulated:=true"]
        cmd = ([sys.executable, str(HERE), "--role", "profiled-driver", "--profile-out", profile_out] if profile_out
               else [sys.executable, "-m", "teleop_flywheel.ros.nodes.arm_driver"])
        self.procs[name] = subprocess.Popen(cmd + ros_args, env=self.env, stdin=subprocess.DEVNULL, text=True)

    def start_floor(self, name: str, priority: int, profile_out: str = "") -> None:
        cmd = [sys.executable, str(HERE), "--role", "floor", "--port", self.ports[name], "--topic", STREAMS[name],
               "--rate", str(self.rate_hz), "--priority", str(priority), "--profile-out", profile_out]
        self.procs[name] = subprocess.Popen(cmd + (["--write"] if "follower" in name else []), env=self.env,
                                            stdin=subprocess.DEVNULL, text=True)

    def wait_flowing(self, names: list[str], timeout_s: float = 90.0) -> None:
        deadline = time.monotonic() + timeout_s
        before = self.counts()
        while True:
            time.sleep(0.5)
            now = self.counts()
            if all(now[STREAMS[n]] > before[STREAMS[n]] for n in names):
                return
            assert time.monotonic() < deadline, f"no samples from {names} within {timeout_s:.0f} s"
            assert all(self.procs[n].poll() is None for n in names), f"{names}: a process exited"

    def stop(self, names: list[str]) -> None:
        for name in names:
            proc = self.procs[name]
            if name == "listener" and proc.stdin is not None:
                proc.stdin.close()  # it stops at the end of its input
            elif proc.poll() is None:
                proc.send_signal(signal.SIGINT)
        for name in names:
            try:
                self.procs[name].wait(20)
            except subprocess.TimeoutExpired:
                self.procs[name].kill()
                self.procs[name].wait(5)

    def close(self) -> None:
        self.stop([n for n in self.procs if not n.startswith("sim_")])
        self.stop([n for n in self.procs if n.startswith("sim_")])


def measure_driver(seconds: float, repeats: int, rate_hz: float, profile_s: float) -> dict[str, Any]:
    rig = Rig(rate_hz)
    try:
        rig.start_sims()
        for name in ("leader_arm", "follower_arm"):
            rig.start_driver(name)
        rig.start_listener()
        rig.wait_flowing(["leader_arm", "follower_arm"])
        priority = max(realtime_priority(rig.procs[n].pid) for n in ("leader_arm", "follower_arm"))
        for name in ("floor_leader", "floor_follower"):
            rig.start_floor(name, priority)
        rig.wait_flowing(list(STREAMS))
        time.sleep(2.0)
        measured = [n for n in rig.procs if n != "listener"]
        windows = []
        for _ in range(repeats):
            load = os.getloadavg()[0]
            c0 = rig.counts()
            threads0 = {n: thread_cpu(rig.procs[n].pid) for n in STREAMS}
            with TreeCPU({n: rig.procs[n].pid for n in measured}) as cpu:
                time.sleep(seconds)
            c1 = rig.counts()
            threads1 = {n: thread_cpu(rig.procs[n].pid) for n in STREAMS}
            used = cpu.seconds()
            window: dict[str, Any] = {"load_average": load, "wall_s": round(cpu.wall_s, 2)}
            for name in measured:
                cpu_s = used[name]["own_s"] + used[name]["started_s"]
                window[name] = {"cpu_pct": round(cpu_s / cpu.wall_s * 100, 2)}
                if name in STREAMS:
                    ticks = max(c1[STREAMS[name]] - c0[STREAMS[name]], 1)
                    window[name].update(ticks=ticks, hz=round(ticks / cpu.wall_s, 1),
                                        us_per_tick=round(cpu_s / ticks * 1e6, 1))
                    window[name].update({f"us_per_tick {kind}": round((threads1[name][kind] - t0) / ticks * 1e6, 1)
                                         for kind, t0 in threads0[name].items()})
            for role in ("leader", "follower"):
                window[f"ratio_{role}"] = round(window[f"{role}_arm"]["us_per_tick"]
                                                / window[f"floor_{role}"]["us_per_tick"], 3)
            windows.append(window)
            print(json.dumps(window), file=sys.stderr, flush=True)
        result: dict[str, Any] = {
            "what": "CPU per tick (us) of each arm_driver node process and of a bare loop doing the same transactions "
                    "on the same kind of pty at the same rate (the floor), in the same run; ticks = samples the "
                    "listener received; per thread kind: main = a node's executor or the floor's loop, other "
                    "python threads = the driver's bus loop (and its idle signal thread)",
            "rate_hz": rate_hz, "window_s": seconds, "repeats": repeats, "sched_fifo_priority_of_drivers": priority,
            "ratio_follower": spread([w["ratio_follower"] for w in windows]),
            "ratio_leader": spread([w["ratio_leader"] for w in windows]),
        }
        for name in measured:
            result[name] = {k: spread([w[name][k] for w in windows]) for k in windows[0][name]}
        result["windows"] = windows
        if profile_s > 0:
            result["profile"] = profile_follower(rig, priority, profile_s)
        return result
    finally:
        rig.close()


def profile_follower(rig: Rig, priority: int, seconds: float) -> dict[str, Any]:
    """The follower's driver and its floor again, each bus loop under cProfile for `seconds`."""
    names = ["follower_arm", "floor_follower"]
    rig.stop(names)
    tmp = Path(tempfile.mkdtemp(prefix="rig_cpu_prof_"))
    try:
        rig.start_driver("follower_arm", str(tmp / "follower_arm.prof"))
        rig.start_floor("floor_follower", priority, str(tmp / "floor_follower.prof"))
        rig.wait_flowing(names)
        time.sleep(seconds)
        rig.stop(names)
        out: dict[str, Any] = {"what": "cProfile of each bus loop timed by its thread's CPU clock (waiting not "
                                       "counted); cProfile's own overhead inflates every figure, most where calls are "
                                       "many and short", "seconds": seconds}
        for name in names:
            out[name] = per_tick(tmp / f"{name}.prof")
        return out
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# -- part 3: each step of a tick alone ------------------------------------------------------------

def _paced_cpu_us(step: Any, period_s: float, n: int) -> float:
    """CPU microseconds (this thread's clock) of `step` called once per period, as a bus loop calls
    it — so with caches as cold as there — less those of an empty period (the sleep's own cost)."""
    def run(fn: Any) -> float:
        fn()
        t0 = time.thread_time_ns()
        for _ in range(n):
            fn()
            time.sleep(period_s)
        return (time.thread_time_ns() - t0) / n / 1e3

    return run(step) - run(lambda: None)


def measure_steps(rate_hz: float, repeats: int, n: int = 200) -> dict[str, Any]:
    """The follower driver's steps (the project's functions it calls) beside the floor's way of
    doing the same, each alone (see `_paced_cpu_us`)."""
    import array

    import rclpy
    import serial
    from sensor_msgs.msg import JointState

    from teleop_flywheel.core.calibration import RAD_PER_STEP as CAL_RAD_PER_STEP
    from teleop_flywheel.core.calibration import load_calibration, sim_calibration_file
    from teleop_flywheel.hw.feetech import codec
    from teleop_flywheel.hw.feetech.bus import FeetechBus
    from teleop_flywheel.ros.nodes.common import STREAM_QOS, joint_state

    cal = load_calibration(sim_calibration_file("follower"))
    joints = cal.joints
    raw = [2048 + 100 * i for i in range(6)]
    rad = [float(j.raw_to_rad(r)) for j, r in zip(joints, raw, strict=True)]
    words = [r | (r << 16) | (r << 32) for r in raw]  # position, velocity, load of one servo, as read
    env = ros_env()
    os.environ.update(env)
    rclpy.init()
    node = rclpy.create_node("rig_cpu_steps")
    pub = node.create_publisher(JointState, "/rig_cpu_steps/joint_states", STREAM_QOS)
    reused = JointState()
    reused.name = list(NAMES)
    sims = [start_sim("follower", env) for _ in range(2)]  # the driver's way on one, the floor's on the other
    bus = FeetechBus(sims[0][1])
    bus.open()
    line = serial.Serial(sims[1][1], 1_000_000, timeout=0)
    fd = line.fileno()
    read_packet = codec.sync_read(READ_ADDR, READ_SIZE, IDS)
    goal = dict.fromkeys(IDS, 2048)

    def bare_read() -> None:
        os.write(fd, read_packet)
        reply = b""
        deadline = time.monotonic() + 0.02
        while len(reply) < 72 and (wait := deadline - time.monotonic()) > 0:
            if select.select([fd], [], [], wait)[0]:
                reply += os.read(fd, 4096)
        for k, sid in enumerate(IDS):
            status = reply[k * 12:(k + 1) * 12]
            if status[:3] != bytes((0xFF, 0xFF, sid)) or status[11] != codec.checksum(status[2:11]):
                break

    def bare_message() -> None:
        reused.header.stamp.sec, reused.header.stamp.nanosec = divmod(time.time_ns(), 1_000_000_000)
        reused.position, reused.velocity, reused.effort = (array.array("d", rad), array.array("d", rad),
                                                           array.array("d", rad))

    steps = {  # step: (the driver's way, the floor's way)
        "sync read 56/6 of ids 1-6 (FeetechBus.sync_read | write, select, read, header and checksum checks)":
            (lambda: bus.sync_read(READ_ADDR, READ_SIZE, IDS), bare_read),
        "decode position, velocity, load x6 (codec.from_sign_magnitude x18 | inline bit operations)":
            (lambda: [codec.from_sign_magnitude((w >> s) & 0xFFFF, 15) for w in words for s in (0, 16, 32)],
             lambda: [((w >> s) & 0x7FFF) * (-1 if (w >> s) & 0x8000 else 1) for w in words for s in (0, 16, 32)]),
        "steps to radians x6 (JointCalibration.raw_to_rad, numpy | float arithmetic)":
            (lambda: [float(j.raw_to_rad(r)) for j, r in zip(joints, raw, strict=True)],
             lambda: [j.sign * (r - j.mid) * CAL_RAD_PER_STEP for j, r in zip(joints, raw, strict=True)]),
        "JointState for the sample (common.joint_state: a new message, stamp via clock | one message reused, "
        "array('d') fields)": (lambda: joint_state(NAMES, rad, time.monotonic_ns(), rad, rad, frame_id="follower"),
                               bare_message),
        "goal to steps x6 (ArmCalibration.rad_to_raw, numpy | float arithmetic, clamped)":
            (lambda: cal.rad_to_raw(rad),
             lambda: [min(j.range_max, max(j.range_min, round(j.sign * r / CAL_RAD_PER_STEP + j.mid)))
                      for j, r in zip(joints, rad, strict=True)]),
        "sync write Goal_Position (FeetechBus.sync_write_register | codec.sync_write, os.write)":
            (lambda: bus.sync_write_register("Goal_Position", goal),
             lambda: os.write(fd, codec.sync_write(GOAL_ADDR, GOAL_SIZE, goal))),
        "publish (the same call in both)": (lambda: pub.publish(reused), lambda: pub.publish(reused)),
    }
    period = 1.0 / rate_hz
    out: dict[str, Any] = {}
    try:
        time.sleep(2.0)  # DDS discovery of this new participant settles first
        for name, (driver_way, floor_way) in steps.items():
            driver_us, floor_us = [], []
            for _ in range(repeats):  # interleaved: a disturbance hits both ways alike
                driver_us.append(_paced_cpu_us(driver_way, period, n))
                floor_us.append(_paced_cpu_us(floor_way, period, n))
            out[name] = {"driver_us": spread(driver_us), "floor_us": spread(floor_us)}
            print(name, out[name], file=sys.stderr, flush=True)
    finally:
        bus.close()
        line.close()
        for sim, _port in sims:
            sim.send_signal(signal.SIGINT)
            sim.wait(10)
        node.destroy_node()
        rclpy.shutdown()
    return {"what": f"CPU us of each step of a follower tick called alone once per {period * 1e3:g} ms period "
                    f"({n} periods, less an empty period's cost), the driver's way | the floor's way, {repeats} "
                    "interleaved runs each; publish, the same call both ways, shows the noise", "steps": out}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", choices=("all", "session", "driver", "steps"), default="all")
    ap.add_argument("--seconds", type=float, default=20.0, help="length of each measured window")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--rate", type=float, default=200.0, help="bus loop rate of drivers and floors (Hz)")
    ap.add_argument("--profile-seconds", type=float, default=0.0,
                    help="then profile the follower's driver and its floor (cProfile, CPU time) this long")
    ap.add_argument("--out", type=Path, default=HERE.parent / "results" / "rig_cpu.json")
    ap.add_argument("--role", choices=("bench", "listener", "floor", "profiled-driver"), default="bench")
    ap.add_argument("--port", default="")
    ap.add_argument("--topic", default="")
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--priority", type=int, default=0)
    ap.add_argument("--profile-out", default="")
    args, ros_args = ap.parse_known_args()
    if args.role == "profiled-driver":
        role_profiled_driver(args.profile_out, ros_args)
        return 0
    if ros_args:
        ap.error(f"unrecognized arguments: {' '.join(ros_args)}")
    if args.role == "listener":
        role_listener()
        return 0
    if args.role == "floor":
        role_floor(args.port, args.topic, args.write, args.rate, args.priority, args.profile_out)
        return 0
    results: dict[str, Any] = {"machine": f"{platform.machine()} x{os.cpu_count()}",
                               "load_average_before": os.getloadavg()}
    if args.part in ("all", "driver"):
        results["driver"] = measure_driver(args.seconds, args.repeats, args.rate, args.profile_seconds)
    if args.part in ("all", "steps"):
        results["steps"] = measure_steps(args.rate, args.repeats)
    if args.part in ("all", "session"):
        results["session"] = measure_session(args.seconds, args.repeats)
    results["load_average_after"] = os.getloadavg()
    write_result(args.out, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
