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
- `feedback`: the leader's driver with `feedback` off, `gripper` (the follower's every sample felt)
  and `contact` (that, and every body joint judged each tick against the expected-load fit it
  learns), in alternating windows, the
  follower's driver beside it and a stand-in for the teleop node (`rig_floor.role_teleop`: the
  leader commands the follower, `teleop/authority` says the human drives, so the leader judges its
  follower; `sim-bus`'s own scripted human moves the leader, free motion). The leader's CPU per
  tick with feedback against without: what rendering costs when nothing is rendered, every tick
  of a session. Written into the existing result beside the other parts;
- `steps`: each step of a follower tick — the project's function the driver calls for it, and the
  floor's way of doing the same — called alone once per period at `--rate` (so with caches as
  cold as in the loop), its CPU less that of an empty period.

Each part has its module beside this one: `cpu_accounting.py` (CPU of a process tree, of a
thread), `rig_floor.py` (the `sim-bus` arms, the listener, the floor loop), `rig_profile.py`,
`rig_steps.py` and `rig_session.py`; this file runs the driver part and is the entry point of the
roles its child processes take (`--role`).

Writes bench/results/rig_cpu.json. Usage:
python bench/rig_cpu.py [--part all|session|driver|feedback|steps] [--seconds 20] [--repeats 3]
[--profile-seconds 20] (one part alone replaces only its own key of the result)
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from cpu_accounting import TreeCPU, realtime_priority, spread, thread_cpu
from result_file import write_result
from rig_floor import STREAMS, role_floor, role_listener, role_teleop, ros_env, start_sim
from rig_profile import per_tick, role_profiled_driver
from rig_session import measure_session
from rig_steps import measure_steps

HERE = Path(__file__).resolve()


class Rig:
    """The driver part's processes: a `sim-bus` per arm and per floor, the two drivers, the two
    floors and the listener, stopped in reverse order (the simulators last)."""

    def __init__(self, rate_hz: float) -> None:
        self.rate_hz = rate_hz
        self.env = ros_env()
        self.procs: dict[str, subprocess.Popen[str]] = {}
        self.ports: dict[str, str] = {}

    def start_sims(self, names: list[str] | None = None) -> None:
        for name in names or STREAMS:
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

    def start_driver(self, name: str, profile_out: str = "", feedback: str = "", extra: tuple[str, ...] = ()) -> None:
        from teleop_flywheel.core.calibration import sim_calibration_file

        role = name.split("_")[0]
        ros_args = ["--ros-args", "-r", f"__node:={name}", "-p", f"port:={self.ports[name]}", "-p", f"role:={role}",
                    "-p", f"rate_hz:={self.rate_hz}", "-p", f"calibration_file:={sim_calibration_file(role)}",
                    "-p", "simulated:=true"]
        for param in extra:
            ros_args += ["-p", param]
        if feedback:
            ros_args += ["-p", f"feedback:='{feedback}'", "-p",  # quoted: YAML reads a bare off as false
                         f"follower_calibration_file:={sim_calibration_file('follower')}"]
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
            if name in ("listener", "teleop") and proc.stdin is not None:
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


def measure_feedback(seconds: float, repeats: int, rate_hz: float) -> dict[str, Any]:
    """The leader's CPU per tick with `feedback` off and `contact`, alternating (module doc)."""
    rig = Rig(rate_hz)
    try:
        rig.start_sims(["leader_arm", "follower_arm"])
        rig.start_listener()
        rig.procs["teleop"] = subprocess.Popen([sys.executable, str(HERE), "--role", "teleop"], env=rig.env,
                                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        # `sim-bus`'s scripted human turns the leader's wrist_roll at up to ~2.4 rad/s: a follower
        # held to the default 2 rad/s falls behind it and trips its overload, and one that holds is
        # not free motion.
        rig.start_driver("follower_arm", extra=("max_speed_rad_s:=4.7",))
        windows: dict[str, list[dict[str, Any]]] = {"off": [], "gripper": [], "contact": []}
        for _ in range(repeats):
            for mode in windows:
                rig.start_driver("leader_arm", feedback=mode)
                rig.wait_flowing(["leader_arm", "follower_arm"])
                time.sleep(4.0)  # `contact` learns free motion from its first 400 samples (2 s)
                load = os.getloadavg()[0]
                c0 = rig.counts()
                with TreeCPU({"leader_arm": rig.procs["leader_arm"].pid}) as cpu:
                    time.sleep(seconds)
                ticks = max(rig.counts()[STREAMS["leader_arm"]] - c0[STREAMS["leader_arm"]], 1)
                used = cpu.seconds()["leader_arm"]
                cpu_s = used["own_s"] + used["started_s"]
                teleop = rig.procs["teleop"]
                assert teleop.stdin is not None and teleop.stdout is not None
                teleop.stdin.write("\n")
                teleop.stdin.flush()
                said = json.loads(teleop.stdout.readline())
                window = {"load_average": load, "ticks": ticks, "us_per_tick": round(cpu_s / ticks * 1e6, 1),
                          "cpu_pct": round(cpu_s / cpu.wall_s * 100, 2), "leader_said": said}
                windows[mode].append(window)
                print(json.dumps({mode: window}), file=sys.stderr, flush=True)
                rig.stop(["leader_arm"])
        def ratios(mode: str) -> dict[str, float]:
            return spread([round(on["us_per_tick"] / off["us_per_tick"], 3)
                           for off, on in zip(windows["off"], windows[mode], strict=True)])

        return {"what": "the leader arm_driver's CPU per tick (us) with feedback off, gripper and contact, in "
                        "alternating windows of the same run, the follower's driver and a teleop stand-in beside it "
                        "(the leader feels its follower's every sample and judges it each tick; free motion, so "
                        "nothing is rendered)",
                "rate_hz": rate_hz, "window_s": seconds, "repeats": repeats,
                "us_per_tick": {mode: spread([w["us_per_tick"] for w in ws]) for mode, ws in windows.items()},
                "cpu_pct": {mode: spread([w["cpu_pct"] for w in ws]) for mode, ws in windows.items()},
                "ratio_gripper_vs_off": ratios("gripper"), "ratio_contact_vs_off": ratios("contact"),
                "windows": windows}
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", choices=("all", "session", "driver", "feedback", "steps"), default="all")
    ap.add_argument("--seconds", type=float, default=20.0, help="length of each measured window")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--rate", type=float, default=200.0, help="bus loop rate of drivers and floors (Hz)")
    ap.add_argument("--profile-seconds", type=float, default=0.0,
                    help="then profile the follower's driver and its floor (cProfile, CPU time) this long")
    ap.add_argument("--out", type=Path, default=HERE.parent / "results" / "rig_cpu.json")
    ap.add_argument("--role", choices=("bench", "listener", "teleop", "floor", "profiled-driver"), default="bench")
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
    if args.role == "teleop":
        role_teleop()
        return 0
    if args.role == "floor":
        role_floor(args.port, args.topic, args.write, args.rate, args.priority, args.profile_out)
        return 0
    # One part alone replaces its own key of the last result; the rest, and what was said of that
    # run's machine and load, are kept (each part's windows say their own load).
    kept = json.loads(args.out.read_text()) if args.part != "all" and args.out.exists() else None
    results: dict[str, Any] = kept or {"machine": f"{platform.machine()} x{os.cpu_count()}",
                                       "load_average_before": os.getloadavg()}
    if args.part in ("all", "driver"):
        results["driver"] = measure_driver(args.seconds, args.repeats, args.rate, args.profile_seconds)
    if args.part in ("all", "feedback"):
        results["feedback"] = measure_feedback(args.seconds, args.repeats, args.rate)
    if args.part in ("all", "steps"):
        results["steps"] = measure_steps(args.rate, args.repeats)
    if args.part in ("all", "session"):
        results["session"] = measure_session(args.seconds, args.repeats)
    if kept is None:
        results["load_average_after"] = os.getloadavg()
    write_result(args.out, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
