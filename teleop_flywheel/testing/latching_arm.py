"""`python -m teleop_flywheel.testing.latching_arm ADAPTER`: a simulated follower behind an emulated
USB-serial adapter, in a process of its own and real-time where permitted (as `sim-bus` runs: it
stands for servos and an adapter, which a loaded host cannot delay). It prints its pty; when a line
comes on its standard input, the instants (monotonic s) it latched each read, as JSON, and exits.
The truth the bus's stamps are measured against (test_feetech, bench/stamp_error.py): `read_run`
drives it and pairs every read with the instant its servos latched the sample."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass

from teleop_flywheel.core.priority import RT_PRIORITY, request_realtime
from teleop_flywheel.hw.feetech import codec
from teleop_flywheel.hw.feetech.bus import BusStats, FeetechBus
from teleop_flywheel.hw.feetech.sim import SimulatedArm
from teleop_flywheel.hw.feetech.sim.adapter import ADAPTERS

IDS = range(1, 7)
REQUEST_WIRE_NS = codec.wire_time_ns(len(codec.sync_read(56, 6, IDS)), 1_000_000)  # the 6-servo sync read
STATUS_WIRE_NS = codec.wire_time_ns(6 + 6, 1_000_000)  # one 6-byte status packet at 1 Mbaud
# A request the simulator heard more than half a frame later than its adapter lets a request wait
# was held up by the host: beyond the half frame a stamp's estimate allows (bus.py).
HELD_UP_NS = 500_000


@dataclass(frozen=True)
class LatchedRead:
    """One sync read (monotonic ns): the call's start and end, the bus's stamp, when it wrote the
    request and got the last status, and when the simulated servos latched the sample."""

    start: int
    end: int
    stamp: int
    sent: int
    received: int
    latched: int


@dataclass(frozen=True)
class LatchedRun:
    adapter: str
    reads: list[LatchedRead]
    stats: BusStats

    def served_on_time(self) -> list[LatchedRead]:
        """Reads whose request the simulated servos heard in time. On real hardware a request
        written is on the wire within a USB frame; a pty is read by a kernel worker that a loaded
        host can hold up for milliseconds, and a read the simulator heard that late measures the
        host, not the bus."""
        frame_ns = round(ADAPTERS[self.adapter].usb_frame_s * 1e9)
        return [r for r in self.reads if r.latched - (r.sent + REQUEST_WIRE_NS) <= frame_ns + HELD_UP_NS]


def read_run(adapter: str, reads: int) -> LatchedRun:
    """`reads` sync reads of the 6 servos' position (56, 6 bytes) from a latching arm behind `adapter`."""
    sim = subprocess.Popen([sys.executable, "-m", "teleop_flywheel.testing.latching_arm", adapter],
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert sim.stdin is not None and sim.stdout is not None
    try:
        port = sim.stdout.readline().strip()
        readings = []
        # A 16 ms latency timer leaves a 20 ms timeout little room on a loaded machine.
        with FeetechBus(port, timeout_s=0.05) as bus:
            for _ in range(reads):
                start = time.monotonic_ns()
                readings.append((start, bus.sync_read(56, 6, IDS), time.monotonic_ns()))
        sim.stdin.write("\n")
        sim.stdin.flush()
        latches = [round(t * 1e9) for t in json.loads(sim.stdout.readline())]
    finally:
        sim.terminate()
        sim.wait(10)
    # A retried read latched more than once within its call: the reply taken answers the last.
    return LatchedRun(adapter, [LatchedRead(start, end, r.stamp_ns, r.sent_ns, r.received_ns,
                                            [t for t in latches if start <= t <= end][-1])
                                for start, r, end in readings], bus.stats)


def main(argv: list[str]) -> int:
    arm = SimulatedArm("follower", adapter_name=argv[0])
    request_realtime(RT_PRIORITY, whole_process=True, say=lambda _message: None)
    arm.start()
    try:
        print(arm.port, flush=True)
        sys.stdin.readline()
        print(json.dumps(list(arm.latches)), flush=True)
    finally:
        arm.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
