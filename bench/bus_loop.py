"""Benchmark: leader sync-read + follower sync-write through two simulated 1 Mbaud buses.

The read is the arm driver's fast read: Present_Position, Present_Velocity and Present_Load
(addresses 56-61, 6 bytes per servo) of all six servos; the write is Goal_Position of all six.
Two `sim-bus` processes (wire-time emulation on, return delay 0) stand in for the arms. In one
run we measure, for our `FeetechBus` (which never takes a late or duplicated reply for a fresh one:
a read may carry a few bytes more than its block so that its reply has a length no earlier reply
can still have) and for the vendor SDK's GroupSyncRead/GroupSyncWrite (which takes any
checksum-valid reply):
- free-running loop rate (Hz) and its ratio to the wire-time limit of one read + one write;
- a loop paced at 500 Hz: achieved rate and period jitter (|period - 2 ms|) p50/p99.
Then, for ours, the same loop behind each emulated USB-serial adapter (`sim-bus --adapter`: FTDI
at its default 16 ms latency timer and at 1 ms, CH343): the free-running rate and a 200 Hz loop's
achieved rate, beside the pty figure — the rate an owner gets depends on the adapter, not the wire.
Writes bench/results/bus_loop.json. Usage: python bench/bus_loop.py [--seconds 5]
"""
from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from result_file import write_result

from teleop_flywheel.hw.arm import POS_ADDR, POS_SIZE
from teleop_flywheel.hw.errors import BusTimeout
from teleop_flywheel.hw.feetech import codec as p
from teleop_flywheel.hw.feetech.bus import FeetechBus
from teleop_flywheel.hw.feetech.control_table import register

IDS = list(range(1, 7))
GOAL = register("Goal_Position")
FENCES = {"ours": 0}
BAUD = 1_000_000
FAILURES = {"ours": 0, "vendor_sdk": 0}  # reads that timed out (after retries, for ours)


ADAPTERS = ("ftdi16", "ftdi1", "ch343")


def start_sim(role: str, adapter: str = "pty") -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([sys.executable, "-m", "teleop_flywheel.cli", "sim-bus", "--arm", role,
                             "--adapter", adapter], stdout=subprocess.PIPE, text=True)
    return proc, proc.stdout.readline().strip()  # type: ignore[union-attr]


def ours(leader: str, follower: str) -> tuple[Callable[[], None], Callable[[], None]]:
    lb, fb = FeetechBus(leader), FeetechBus(follower)
    lb.open()
    fb.open()

    def step() -> None:
        try:
            reading = lb.sync_read(POS_ADDR, POS_SIZE, IDS)
        except BusTimeout:
            FAILURES["ours"] += 1
            return
        fb.sync_write(GOAL.address, GOAL.size, {sid: v & 0xFFFF for sid, v in reading.values.items()})

    def close() -> None:
        FENCES["ours"] = lb.stats.fences
        lb.close()
        fb.close()

    return step, close


def vendor(leader: str, follower: str) -> tuple[Callable[[], None], Callable[[], None]]:
    import scservo_sdk as scs

    lp, fp = scs.PortHandler(leader), scs.PortHandler(follower)
    for port in (lp, fp):
        port.openPort()
        port.setBaudRate(BAUD)
    ph = scs.PacketHandler(0)
    reader = scs.GroupSyncRead(lp, ph, POS_ADDR, POS_SIZE)
    for sid in IDS:
        reader.addParam(sid)
    writer = scs.GroupSyncWrite(fp, ph, GOAL.address, GOAL.size)

    def step() -> None:
        if reader.txRxPacket() != scs.COMM_SUCCESS:
            FAILURES["vendor_sdk"] += 1
            return
        writer.clearParam()
        for sid in IDS:
            v = reader.getData(sid, POS_ADDR, 2)
            writer.addParam(sid, [v & 0xFF, v >> 8])
        writer.txPacket()

    return step, lambda: (lp.closePort(), fp.closePort())


def free_running(step: Callable[[], None], seconds: float) -> float:
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        step()
        n += 1
    return n / (time.perf_counter() - t0)


def paced(step: Callable[[], None], seconds: float, hz: float = 500.0) -> dict[str, float]:
    period = 1.0 / hz
    starts = []
    next_t = time.perf_counter()
    end = next_t + seconds
    while next_t < end:
        while (now := time.perf_counter()) < next_t:
            if next_t - now > 0.0003:
                time.sleep(next_t - now - 0.0002)
        starts.append(now)
        step()
        next_t += period
        if time.perf_counter() > next_t + period:  # fell behind: do not burst to catch up
            next_t = time.perf_counter()
    periods = np.diff(starts)
    jitter = np.abs(periods - period) * 1e3
    return {"achieved_hz": len(starts) / (starts[-1] - starts[0]), "jitter_p50_ms": float(np.percentile(jitter, 50)),
            "jitter_p99_ms": float(np.percentile(jitter, 99))}


def behind_adapter(adapter: str, seconds: float) -> dict[str, float]:
    """Our loop with both simulated arms behind `adapter`."""
    sims = [start_sim("leader", adapter), start_sim("follower", adapter)]
    try:
        step, close = ours(sims[0][1], sims[1][1])
        for _ in range(20):
            step()
        failed = FAILURES["ours"]
        out = {"free_running_hz": free_running(step, seconds),
               "paced_200hz_achieved_hz": paced(step, seconds, 200.0)["achieved_hz"]}
        out["failed_reads"] = FAILURES["ours"] - failed
        close()
        return out
    finally:
        for proc, _ in sims:
            proc.terminate()
            proc.wait(5)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "bus_loop.json")
    args = ap.parse_args()
    sims = [start_sim("leader"), start_sim("follower")]
    leader, follower = sims[0][1], sims[1][1]
    read_bytes = len(p.sync_read(POS_ADDR, POS_SIZE, IDS)) + len(IDS) * (POS_SIZE + 6)
    write_bytes = len(p.sync_write(GOAL.address, GOAL.size, {i: 0 for i in IDS}))
    # Read and write are on separate buses but sequential in one loop: the limit is their sum.
    wire_limit_hz = 1e9 / (p.wire_time_ns(read_bytes, BAUD) + p.wire_time_ns(write_bytes, BAUD))
    results: dict[str, object] = {"wire_limit_hz": wire_limit_hz, "seconds": args.seconds,
                                  "read": f"sync read {POS_SIZE} bytes at {POS_ADDR} (position, velocity, load) x6",
                                  "machine": f"{platform.machine()} x{os.cpu_count()}",
                                  "load_average_before": os.getloadavg()}
    try:
        for name, make in (("ours", ours), ("vendor_sdk", vendor)):
            step, close = make(leader, follower)
            for _ in range(50):
                step()
            hz = free_running(step, args.seconds)
            results[name] = {"free_running_hz": hz, "ratio_to_wire_limit": hz / wire_limit_hz,
                             "paced_500hz": paced(step, args.seconds)}
            close()
    finally:
        for proc, _ in sims:
            proc.terminate()
            proc.wait(5)
    results["adapters"] = {name: behind_adapter(name, args.seconds) for name in ADAPTERS}
    ours_hz = results["ours"]["free_running_hz"]  # type: ignore[index]
    results["failed_reads"] = FAILURES
    results["fences_ours"] = FENCES["ours"]
    results["load_average_after"] = os.getloadavg()
    results["ratio_ours_to_vendor"] = ours_hz / results["vendor_sdk"]["free_running_hz"]  # type: ignore[index]
    write_result(args.out, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
