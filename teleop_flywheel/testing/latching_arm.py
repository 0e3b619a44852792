"""`python -m teleop_flywheel.testing.latching_arm ADAPTER`: a simulated follower behind an emulated
USB-serial adapter, in a process of its own and real-time where permitted (as `sim-bus` runs: it
stands for servos and an adapter, which a loaded host cannot delay). It prints its pty; when a line
comes on its standard input, the instants (monotonic s) it latched each read, as JSON, and exits.
The truth the bus's stamps are measured against (test_feetech, bench/stamp_error.py)."""
from __future__ import annotations

import json
import sys

from teleop_flywheel.core.priority import RT_PRIORITY, request_realtime
from teleop_flywheel.hw.feetech.sim import SimulatedArm


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
