"""What the bus thread knows about one arm (`DriverState`) and what `/diagnostics` says of it (`Health`).

`report()` turns the state into one level and one message, the most urgent first: a refusal to drive,
a latched servo fault, readings that stopped coming (WARN from 0.1 s, ERROR from 0.5 s: an average
rate over past ticks once said OK "at 200 Hz" during 6 s without a single reading), a port that is
gone, an e-stop, a hot servo, a configured rate that cannot be met, a recent bus error.

The achieved rate and the read latencies are measured over the ticks since the last connect
(`restart_window`): a window that spanned an unplug measured the gap, and after every replug said
for ~5 s that the configured rate could not be met. The advice to set an FTDI adapter's latency
timer is given only when the reads are what is slow (a median read taking `ADAPTER_SHARE` of the
period or more); a loop that falls short with fast reads is overrunning (CPU load, scheduling).
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from teleop_flywheel.core.clock import NS_PER_S, now_ns
from teleop_flywheel.core.so101 import JOINT_NAMES
from teleop_flywheel.hw.arm.faults import FaultLatch
from teleop_flywheel.hw.feetech.control_table import error_names

STALE_READING_S = (0.1, 0.5)  # age of the last good reading that makes health WARN, then ERROR
RATE_SHORTFALL = 0.9  # an achieved rate below this share of the configured one cannot meet it
RATE_WINDOW = 1000  # ticks the achieved rate is measured over
RATE_MIN_TICKS = 100  # ticks before a rate shortfall is said
ADAPTER_SHARE = 0.5  # a median read this share of the period or longer: the adapter makes the rate fall short
# Upper bounds (ms) of the cumulative per-read latency counts `/diagnostics` carries, so a metrics
# exporter can rebuild every transaction's latency as a histogram from a once-a-second status:
# a pty answers in ~1 ms, a CH343 in 2-3.5, an FTDI adapter with its default timer in 16.
READ_BUCKETS_MS = (0.5, 1.0, 2.0, 3.0, 5.0, 10.0, 20.0, 50.0, 100.0)


def read_bucket_key(le_ms: float) -> str:
    """The `/diagnostics` key of the reads that took at most `le_ms` (cumulative since start)."""
    return f"read_le_{le_ms:g}_ms"


@dataclass
class DriverState:
    """What the bus thread knows, shared with `report()` under the driver's lock."""

    connected: bool = False
    fatal: str = ""  # a reason the driver refuses to drive this arm at all (stops the loop)
    last_error: str = ""
    last_reading_ns: int = 0  # monotonic time of the last good reading (0 = none yet)
    ticks: int = 0
    read_errors: int = 0
    reconnects: int = 0
    overruns: int = 0  # ticks that ended after the next one was due (the loop could not keep its rate)
    reads: int = 0  # fast reads since start, with their summed round trip and counts per READ_BUCKETS_MS
    read_sum_ns: int = 0
    read_buckets: list[int] = field(default_factory=lambda: [0] * len(READ_BUCKETS_MS))
    torque: bool = False  # every servo has torque (read back)
    torque_off: list[str] = field(default_factory=list)  # the joints without it
    estop: str = ""  # why the arm is e-stopped ("" = it is not)
    faults: FaultLatch = field(default_factory=FaultLatch)
    tick_times: deque[int] = field(default_factory=lambda: deque(maxlen=RATE_WINDOW))
    read_ns: deque[int] = field(default_factory=lambda: deque(maxlen=RATE_WINDOW))  # each fast read's round trip
    voltage_v: dict[str, float] = field(default_factory=dict)
    temperature_c: dict[str, int] = field(default_factory=dict)
    current_ma: dict[str, float] = field(default_factory=dict)
    error_bits: dict[str, int] = field(default_factory=dict)

    def achieved_hz(self) -> float:
        if len(self.tick_times) < 2:
            return 0.0
        span = self.tick_times[-1] - self.tick_times[0]
        return (len(self.tick_times) - 1) * NS_PER_S / span if span > 0 else 0.0

    def restart_window(self) -> None:
        """Measure the rate and the read latencies afresh (the driver calls it at every connect)."""
        self.tick_times.clear()
        self.read_ns.clear()

    def count_read(self, round_trip_ns: int) -> None:
        """One fast read's round trip into the cumulative counts."""
        self.read_ns.append(round_trip_ns)
        self.reads += 1
        self.read_sum_ns += round_trip_ns
        ms = round_trip_ns / 1e6
        for i, le in enumerate(READ_BUCKETS_MS):
            if ms <= le:
                self.read_buckets[i] += 1

    def read_ms(self, quantile: float) -> float:
        if not self.read_ns:
            return 0.0
        ordered = sorted(self.read_ns)
        return ordered[min(len(ordered) - 1, int(quantile * len(ordered)))] / 1e6

    @property
    def holding(self) -> str:
        """Why the arm holds ("" = it does not): an e-stop or a latched fault."""
        if self.estop:
            return f"e-stop: {self.estop}"
        return f"servo fault: {self.faults.summary()}" if self.faults else ""


@dataclass(frozen=True)
class Health:
    level: str  # OK | WARN | ERROR
    message: str
    values: dict[str, object]


def report(s: DriverState, port: str, role: str, target_rate_hz: float, estop_cuts_torque: bool,
           values: dict[str, object]) -> Health:
    """The level and message of `s`; `values` (the caller's counters) gain the state's own."""
    rate = s.achieved_hz()
    values.update({
        "port": port, "role": role, "connected": s.connected, "rate_hz": round(rate, 1),
        "target_rate_hz": target_rate_hz, "read_ms_p50": round(s.read_ms(0.5), 2),
        "read_ms_p99": round(s.read_ms(0.99), 2), "read_errors": s.read_errors, "reconnects": s.reconnects,
        "ticks": s.ticks, "overruns": s.overruns, "reads": s.reads, "read_sum_ms": round(s.read_sum_ns / 1e6, 3),
        **{read_bucket_key(le): n for le, n in zip(READ_BUCKETS_MS, s.read_buckets, strict=True)},
        "torque": s.torque, "torque_off": ", ".join(s.torque_off),
        "holding": s.holding, "servo_fault": s.faults.summary(), "estop": s.estop,
    })
    age_s = (now_ns() - s.last_reading_ns) / NS_PER_S if s.last_reading_ns else None
    values["last_reading_age_s"] = round(age_s, 3) if age_s is not None else "never"
    for name in JOINT_NAMES:
        if name in s.temperature_c:
            values[f"{name}.temperature_c"] = s.temperature_c[name]
            values[f"{name}.voltage_v"] = s.voltage_v[name]
            values[f"{name}.current_ma"] = round(s.current_ma.get(name, 0.0), 1)
        bits = s.error_bits.get(name, 0)
        values[f"{name}.error_bits"] = f"0x{bits:02x}" + (f" ({', '.join(error_names(bits))})" if bits else "")
    age = age_s if s.connected and age_s is not None else 0.0
    short = target_rate_hz > 0 and len(s.tick_times) >= RATE_MIN_TICKS and rate < RATE_SHORTFALL * target_rate_hz
    if s.fatal:
        return Health("ERROR", f"refusing to drive the arm on {port}: {s.fatal}", values)
    if s.faults:
        return Health("ERROR", f"servo fault on {port}: {s.faults.summary()}; the arm holds until the operator "
                               "resets it", values)
    if age > STALE_READING_S[1]:
        return Health("ERROR", f"no reading from {port} for {age:.1f} s (last error: {s.last_error or 'none'})",
                      values)
    if age > STALE_READING_S[0]:
        return Health("WARN", f"readings from {port} late: last one {age * 1e3:.0f} ms ago", values)
    if not s.connected:
        return Health("ERROR", f"port {port} unavailable: {s.last_error or 'not connected yet'}; reconnecting", values)
    if s.estop:
        return Health("WARN", f"e-stopped on {port} ({s.estop}): " + ("torque cut" if estop_cuts_torque else "holding")
                      + " until the operator resets it", values)
    if s.faults.warnings:
        return Health("WARN", "; ".join(s.faults.warnings.values()), values)
    if short and s.read_ms(0.5) * target_rate_hz / 1e3 >= ADAPTER_SHARE:
        return Health("WARN", f"the configured {target_rate_hz:g} Hz cannot be met on {port}: {rate:.0f} Hz, a read "
                              f"takes {s.read_ms(0.5):.1f} ms (p50) — behind an FTDI adapter set its latency_timer to "
                              "1 (teleop-flywheel find-port)", values)
    if short:
        return Health("WARN", f"the configured {target_rate_hz:g} Hz cannot be met on {port}: {rate:.0f} Hz although "
                              f"a read takes {s.read_ms(0.5):.1f} ms (p50): the loop overruns its period (CPU load, "
                              "scheduling), not the adapter", values)
    if s.last_error:
        return Health("WARN", f"bus errors (last: {s.last_error})", values)
    return Health("OK", f"{role} arm on {port} at {values['rate_hz']} Hz", values)
