"""Feetech STS bus over pyserial: ping, read, write, sync read, sync write.

Servo error bits become `ServoError`s naming the servo and the fault; a vanished port becomes
`PortUnavailable`; no clean answer in time becomes `BusTimeout`. Nothing else is raised.

**The bus never takes a stale reply for a fresh one.** A status packet names its servo but not
the request it answers, so a late reply (after its request timed out) or a copy of one (a
misbehaving adapter or servo) looks exactly like the answer to the next request of the same
kind, and may arrive after that request went out. Numbering requests would take a register
the host writes and reads back, and the STS3215 has none to spare: every writable RAM register
moves the servo (Torque_Enable, Acceleration, Goal_Position/Time/Velocity, Torque_Limit, 40-49)
or unlocks its EEPROM (Lock, 55), 50-54 are undocumented, the rest is read-only. So a reply is
known by its *shape* instead: a servo answers a READ of n bytes with exactly n data bytes, and
reads have no side effects, so a read may take as many bytes past its block as it needs (up to
the end of the control table, address `READ_END`) to give its reply a length no earlier
request's reply can still have:
- when an exchange completes, its shape (servo id, reply length) is *held* for `duplicate_s`
  after its last status arrived; when it fails (timeout, a status out of turn) its shape is held
  for `late_s` after its request was written;
- a request takes the shortest length of its block whose shape no hold covers; a write or ping
  has one shape (the empty acknowledgement), so a write retried after a timeout waits `late_s`
  first, draining the line: it is never confirmed by an earlier attempt's acknowledgement;
- whatever is on the line when a request is written is discarded; of what follows, only statuses
  of the request's shape, in the order its id list gives, are its reply, and every other status
  is discarded as another request's.
The assumptions this rests on, and nothing else: no status reaches the host more than `late_s`
(100 ms) after its request was written, nor a copy of a status more than `duplicate_s` (10 ms)
after the original; servos answer a sync read in the order of its id list; reads change nothing
in an STS3215. Checksums keep noise from being read as a status. Holds cost nothing at the arm
driver's rate (a 200 Hz loop keeps two or three lengths held: a byte more per servo on average);
a just-opened line is held whole for `late_s`, since an earlier owner's replies may still come.

**Stamps.** Every read returns the CLOCK_MONOTONIC instant (ns) the servos latched the sample:
when the request's last byte reached them. The host has two estimates of it:
- by request: when the request was handed to the port, plus its wire time, plus half a USB frame
  (0.5 ms). A USB-serial adapter sends a request on the next 1 ms frame (the OUT side has no
  latency timer), so this is within ±0.5 ms of the latch;
- by arrival: when the last status arrived, minus the wire time of all the statuses. Never
  early, since an adapter only delays, but late by whatever it holds a reply for: an FTDI chip
  until its latency timer fires (up to 16 ms at Linux's default), a CH34x for a frame or so; a
  pty adds only the host's own wake-up.
The stamp is the earlier of the two: within about 0.5 ms of the latch behind any adapter (the
arrival alone would be up to 16 ms late behind an FTDI adapter at its default), and as tight as
the arrival behind a pty, where no frame is waited for (bench/stamp_error.py measures both).

**Deadlines.** Every call, waits for holds included, ends within `call_bound_s`:
`(retries + 1) × (late_s + timeout_s)`.

**Latency.** `stats.latency()` summarises the round trip (request written to last status in) of
the last `LATENCY_WINDOW` sync reads in ms: p50, p99 and max, for a driver's diagnostics.
"""
from __future__ import annotations

import contextlib
import math
import os
import select
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import serial

from teleop_flywheel.core.clock import now_ns
from teleop_flywheel.core.so101 import BAUD_RATE
from teleop_flywheel.hw.errors import BusError, BusTimeout, PortUnavailable, ServoError
from teleop_flywheel.hw.feetech import codec as p
from teleop_flywheel.hw.feetech.control_table import REGISTERS, error_names, register

# Reads may run on to the end of the documented control table (Maximum_Acceleration, at 85, is last).
READ_END = max(reg.address + reg.size for reg in REGISTERS)
USB_OUT_WAIT_NS = 500_000  # a request waits half a 1 ms USB frame on average before it leaves
ANY_ID = -1  # a hold on a reply length from whichever servo (a broadcast's, a new id's)
DUPLICATE_READS = 3  # reads of a position, each retried by the bus, that must all arrive garbled
LATENCY_WINDOW = 1000  # sync reads the latency summary covers (5 s of a 200 Hz loop)


@dataclass(frozen=True)
class Latency:
    """Round trips of recent sync reads (request written to last status in), in ms."""

    count: int
    p50_ms: float
    p99_ms: float
    max_ms: float


@dataclass
class BusStats:
    transactions: int = 0
    errors: int = 0
    retries: int = 0
    timeouts: int = 0
    bad_checksums: int = 0
    skipped_bytes: int = 0
    fences: int = 0  # requests held back until no earlier reply of their shape could still arrive
    stale_bytes: int = 0  # bytes discarded: on the line before a request, or another request's reply
    round_trips_ns: deque[int] = field(default_factory=lambda: deque(maxlen=LATENCY_WINDOW), repr=False)

    def latency(self) -> Latency | None:
        """p50/p99/max of the last sync reads' round trips; None before the first."""
        if not self.round_trips_ns:
            return None
        ordered = sorted(self.round_trips_ns)
        n = len(ordered)

        def rank(q: float) -> float:  # nearest rank: a value that was measured
            return ordered[max(0, math.ceil(q * n) - 1)] / 1e6

        return Latency(n, rank(0.5), rank(0.99), ordered[-1] / 1e6)


@dataclass(frozen=True)
class SyncReading:
    """Values per servo id, the source stamp of the sample, when the request was written and
    when its last status arrived (monotonic ns)."""

    values: dict[int, int]
    stamp_ns: int
    sent_ns: int
    received_ns: int
    errors: dict[int, int] = field(default_factory=dict)  # servo id -> error bits (non-fatal)


@dataclass(frozen=True)
class _Reply:
    statuses: dict[int, p.Status]
    sent_ns: int  # the request was written (handed to the port)
    received_ns: int  # its last status arrived
    request_bytes: int
    length: int  # data bytes per status: the request's shape


class _Anomaly(Exception):
    """An exchange got no clean reply; its shape is held for `late_s`."""


class FeetechBus:
    """One serial port with STS3215 servos on it. Not thread-safe: one owner thread."""

    def __init__(self, port: str, baudrate: int = BAUD_RATE, timeout_s: float = 0.02, retries: int = 2,
                 late_s: float = 0.1, duplicate_s: float = 0.01) -> None:
        self.port = port
        self.baudrate = baudrate
        self.timeout_s = timeout_s
        self.retries = retries
        self.late_s = late_s
        self.duplicate_s = duplicate_s
        self.stats = BusStats()
        self._serial: serial.Serial | None = None
        self._parser = p.StatusParser()
        # (servo id or ANY_ID, reply length) -> monotonic ns until which a reply of that shape may
        # still arrive for an earlier request.
        self._held: dict[tuple[int, int], int] = {}
        self._held_any: dict[int, int] = {}  # reply length -> the latest hold on it, whatever the servo
        self._packets: dict[tuple[int, ...], bytes] = {}  # SYNC_READ instructions by (address, length, *ids)
        self._quiet_ns = 0  # every shape is held until then (a line just opened)

    # -- connection ---------------------------------------------------------------------
    def open(self) -> None:
        try:
            self._serial = serial.Serial(self.port, self.baudrate, timeout=0, write_timeout=self.timeout_s * 10)
        except (serial.SerialException, OSError) as exc:
            raise PortUnavailable(self.port, f"cannot open ({exc})") from exc
        self._parser.clear()
        self._held.clear()
        self._held_any.clear()
        self._quiet_ns = now_ns() + self._ns(self.late_s)

    def close(self) -> None:
        if self._serial is not None:
            with contextlib.suppress(serial.SerialException, OSError):
                self._serial.close()
            self._serial = None

    def __enter__(self) -> FeetechBus:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def call_bound_s(self) -> float:
        """The longest any call may take before it raises (holds and retries included)."""
        return (self.retries + 1) * (self.late_s + self.timeout_s)

    @staticmethod
    def _ns(seconds: float) -> int:
        return int(seconds * 1e9)

    # -- raw I/O ------------------------------------------------------------------------
    def _fd(self) -> int:
        if self._serial is None:
            raise PortUnavailable(self.port, "not open")
        return self._serial.fileno()

    def _lost(self, exc: BaseException) -> None:
        self.close()
        raise PortUnavailable(self.port, f"port went away ({exc})") from exc

    def _read_available(self, fd: int, wait_s: float) -> tuple[bytes, int]:
        """Bytes readable within `wait_s` (b"" if none) and their arrival time."""
        try:
            ready, _, _ = select.select([fd], [], [], max(0.0, wait_s))
            if not ready:
                return b"", 0
            data = os.read(fd, 4096)
        except BlockingIOError:
            return b"", 0
        except OSError as exc:
            self._lost(exc)
        if not data:  # readable but empty: the other end hung up (unplugged)
            self._lost(EOFError("end of file on serial port"))
        return data, now_ns()

    def _write(self, fd: int, packet: bytes, deadline_ns: int) -> int:
        """Write all of `packet` before the deadline (a stalled adapter must not block the caller);
        returns when its last bytes were handed to the port (taken before the call: a thread
        preempted on its way out of it must not make the request look later than it was). The port
        is non-blocking: the write is tried first, and waited for only when the port is full."""
        view = memoryview(packet)
        while True:
            handed = now_ns()
            try:
                view = view[os.write(fd, view):]
            except BlockingIOError:
                pass
            except OSError as exc:
                self._lost(exc)
            if not view:
                return handed
            try:
                _, writable, _ = select.select([], [fd], [], max(0.0, (deadline_ns - now_ns()) / 1e9))
            except OSError as exc:
                self._lost(exc)
            if not writable:
                raise BusTimeout(self.port, "could not write within the call's deadline (adapter stalled?)")

    def _drain(self, fd: int, until_ns: int, deadline_ns: int) -> None:
        """Discard what arrives until `until_ns`, then what is already waiting (before the
        deadline: a babbling line never empties): nothing on the line before a request is written
        can answer it."""
        while (remaining := until_ns - now_ns()) > 0:
            data, _ = self._read_available(fd, remaining / 1e9)
            self.stats.stale_bytes += len(data)
        # A select for each read: in raw mode (VMIN = VTIME = 0) an empty port reads as b"", as a
        # hung-up one does, so only a readable port's empty read means the other end is gone.
        data, _ = self._read_available(fd, 0.0)
        while data and now_ns() < deadline_ns:
            self.stats.stale_bytes += len(data)
            data, _ = self._read_available(fd, 0.0)
        self._parser.clear()

    # -- shapes -------------------------------------------------------------------------
    def _held_until(self, ids: list[int], length: int, now: int) -> int:
        """When no hold on a reply of `length` from any of `ids` remains (<= now: none does). Every
        exchange asks this of each length it considers, so the common answer — no servo's reply of
        that length is held — is one lookup."""
        if self._held_any.get(length, 0) <= now and self._quiet_ns <= now:
            return now
        until = max(self._quiet_ns, self._held.get((ANY_ID, length), 0))
        for sid in ids:
            until = max(until, self._held.get((sid, length), 0))
        return until

    def _shape(self, ids: list[int], size: int, longest: int) -> tuple[int, int]:
        """The reply length to ask for (size..longest) and when no hold covers it any more."""
        now = now_ns()
        best, best_at = size, 0
        for length in range(size, longest + 1):
            at = self._held_until(ids, length, now)
            if at <= now:
                return length, now
            if length == size or at < best_at:
                best, best_at = length, at
        return best, best_at

    def _hold(self, ids: Iterable[int], length: int, until_ns: int) -> None:
        held = self._held
        for sid in ids:
            if held.get((sid, length), 0) < until_ns:
                held[(sid, length)] = until_ns
        if self._held_any.get(length, 0) < until_ns:
            self._held_any[length] = until_ns

    # -- exchanges ----------------------------------------------------------------------
    def _collect(self, fd: int, ids: list[int], length: int, deadline_ns: int) -> tuple[dict[int, p.Status], int]:
        """The status of each id in `ids`, of `length` data bytes and in their order, before the
        deadline, and when the last arrived. Every other status is another request's: skipped."""
        got: dict[int, p.Status] = {}
        received = 0
        skipped0, bad0 = self._parser.skipped_bytes, self._parser.bad_checksums
        try:
            while len(got) < len(ids):
                data, t = self._read_available(fd, (deadline_ns - now_ns()) / 1e9)
                if not data:
                    missing = [sid for sid in ids if sid not in got]
                    raise _Anomaly(f"no reply from servo(s) {missing} within {self.timeout_s * 1e3:.0f} ms")
                received = t
                if not got and not self._parser.pending and (whole := p.split_statuses(data, ids, length)):
                    return {status.servo_id: status for status in whole}, received
                self._parser.feed(data)
                while len(got) < len(ids) and (status := self._parser.next()) is not None:
                    if len(status.data) != length or status.servo_id not in ids or status.servo_id in got:
                        self.stats.stale_bytes += len(status.data) + 6
                    elif status.servo_id != ids[len(got)]:
                        raise _Anomaly(f"servo {status.servo_id} answered before servo {ids[len(got)]}")
                    else:
                        got[status.servo_id] = status
        finally:
            self.stats.skipped_bytes += self._parser.skipped_bytes - skipped0
            self.stats.bad_checksums += self._parser.bad_checksums - bad0
        return got, received

    def _transact(self, make: Callable[[int], bytes], ids: list[int], size: int, longest: int) -> _Reply:
        """Send `make(length)` for a length in size..longest no hold covers, and collect one
        status of that length per id; on failure hold the shape and retry with another."""
        fd = self._fd()
        deadline = now_ns() + self._ns(self.call_bound_s)
        reason = "the line was not clear of earlier replies before the deadline"
        attempts = 0
        while attempts <= self.retries:
            length, clear_at = self._shape(ids, size, longest)
            if clear_at >= deadline:
                break
            if clear_at > now_ns():
                self.stats.fences += 1
            self._drain(fd, clear_at, deadline)
            attempts += 1
            self.stats.transactions += 1
            if attempts > 1:
                self.stats.retries += 1
            packet = make(length)
            sent = self._write(fd, packet, deadline)
            try:
                got, received = self._collect(fd, ids, length, min(deadline, sent + self._ns(self.timeout_s)))
            except _Anomaly as anomaly:
                self._hold(ids, length, sent + self._ns(self.late_s))
                reason = str(anomaly)
                continue
            self._hold(ids, length, received + self._ns(self.duplicate_s))
            return _Reply(got, sent, received, len(packet), length)
        self.stats.timeouts += 1
        self.stats.errors += 1
        raise BusTimeout(self.port, f"no clean reply after {attempts} attempt(s): {reason}")

    def _stamp(self, reply: _Reply) -> int:
        """When the servos latched the sample: the earlier of the request- and arrival-based
        estimates (module doc)."""
        by_request = reply.sent_ns + p.wire_time_ns(reply.request_bytes, self.baudrate) + USB_OUT_WAIT_NS
        by_arrival = reply.received_ns - p.wire_time_ns(len(reply.statuses) * (reply.length + 6), self.baudrate)
        return min(by_request, by_arrival)

    def _check(self, status: p.Status) -> None:
        if status.error:
            self.stats.errors += 1
            raise ServoError(self.port, status.servo_id, status.error, error_names(status.error))

    @staticmethod
    def _longest(address: int, size: int) -> int:
        return max(size, READ_END - address)

    # -- instructions -------------------------------------------------------------------
    def ping(self, servo_id: int) -> int:
        """Model number of the servo (777 for an STS3215)."""
        packet = p.ping(servo_id)
        reply = self._transact(lambda _length: packet, [servo_id], 0, 0)
        self._check(reply.statuses[servo_id])
        return self.read(servo_id, register("Model_Number").address, 2)[0]

    def scan(self) -> list[int]:
        """Ids that answer a broadcast PING (every servo answers, in id order): bring-up only."""
        fd = self._fd()
        deadline = now_ns() + self._ns(self.call_bound_s)
        held = [until for (_sid, length), until in self._held.items() if length == 0]
        clear_at = max([self._quiet_ns, *held])
        if clear_at > now_ns():
            self.stats.fences += 1
        self._drain(fd, min(clear_at, deadline), deadline)
        sent = self._write(fd, p.ping(p.BROADCAST_ID), deadline)
        found: list[int] = []
        quiet_until = sent + self._ns(self.timeout_s)
        while (now := now_ns()) < min(deadline, quiet_until):
            data, _ = self._read_available(fd, (min(deadline, quiet_until) - now) / 1e9)
            if data:
                self._parser.feed(data)
                while (status := self._parser.next()) is not None:
                    if not status.data and status.servo_id not in found:
                        found.append(status.servo_id)
                quiet_until = now_ns() + self._ns(self.timeout_s)  # more may follow after their return delay
        self._hold([ANY_ID], 0, sent + self._ns(self.late_s))
        return sorted(found)

    def duplicated(self, servo_id: int) -> bool:
        """Whether two servos answer to `servo_id`. Both answer at the same instant and their status
        packets collide on the half-duplex line: what both say alike (a PING, the model number)
        arrives clean, a reading that differs between them (where each shaft is) never does — so a
        broadcast PING counts one servo. Only replies that arrive garbled, read after read, count:
        silence (a line starved on a loaded machine, a servo that hung) is not a duplicate."""
        try:
            self.ping(servo_id)
        except BusError:
            return False
        position = register("Present_Position")
        for _ in range(DUPLICATE_READS):
            garbled = self.stats.bad_checksums
            try:
                self.read(servo_id, position.address, position.size)
                return False
            except ServoError:
                return False  # one clean reply, with fault bits
            except BusTimeout:
                if self.stats.bad_checksums == garbled:
                    return False
        return True

    def read(self, servo_id: int, address: int, size: int) -> tuple[int, int]:
        """(unsigned value, stamp_ns) of `size` bytes at `address`."""
        reply = self._transact(lambda length: p.read(servo_id, address, length), [servo_id], size,
                               self._longest(address, size))
        status = reply.statuses[servo_id]
        self._check(status)
        return p.decode_value(status.data, size), self._stamp(reply)

    def write(self, servo_id: int, address: int, value: int, size: int, ack: bool = True) -> None:
        """Write and wait for the servo's acknowledgement. Without `ack` (broadcast, or a write
        that changes the servo's ID or baud, whose reply comes from the new id or at the new
        baud) the packet is sent and any acknowledgement, from whichever id, is held off."""
        packet = p.write(servo_id, address, p.encode_value(value, size))
        if servo_id == p.BROADCAST_ID or not ack:
            sent = self._write(self._fd(), packet, now_ns() + self._ns(self.call_bound_s))
            self._hold([ANY_ID], 0, sent + self._ns(self.late_s))
            return
        reply = self._transact(lambda _length: packet, [servo_id], 0, 0)
        self._check(reply.statuses[servo_id])

    def sync_read(self, address: int, size: int, ids: Iterable[int]) -> SyncReading:
        """One SYNC_READ; error bits on a servo are reported in `errors`, not raised."""
        ids = list(ids)
        reply = self._transact(lambda length: self._sync_read_packet(address, length, ids), ids, size,
                               self._longest(address, size))
        self.stats.round_trips_ns.append(reply.received_ns - reply.sent_ns)
        statuses = reply.statuses
        values = {sid: int.from_bytes(statuses[sid].data[:size], "little") for sid in ids}
        errors = {sid: statuses[sid].error for sid in ids if statuses[sid].error}
        return SyncReading(values, self._stamp(reply), reply.sent_ns, reply.received_ns, errors)

    def _sync_read_packet(self, address: int, length: int, ids: list[int]) -> bytes:
        """The SYNC_READ instruction, built once per shape: an arm driver sends the same few every tick."""
        key = (address, length, *ids)
        packet = self._packets.get(key)
        if packet is None:
            packet = self._packets[key] = p.sync_read(address, length, ids)
        return packet

    def sync_write(self, address: int, size: int, values: Mapping[int, int]) -> None:
        """One SYNC_WRITE (servos never answer it)."""
        self.stats.transactions += 1
        self._write(self._fd(), p.sync_write(address, size, values), now_ns() + self._ns(self.call_bound_s))

    # -- register-name helpers (sign-magnitude applied) ----------------------------------
    def read_register(self, servo_id: int, name: str) -> tuple[int, int]:
        reg = register(name)
        raw, stamp = self.read(servo_id, reg.address, reg.size)
        return (p.from_sign_magnitude(raw, reg.sign_bit) if reg.sign_bit is not None else raw), stamp

    def write_register(self, servo_id: int, name: str, value: int, ack: bool = True) -> None:
        reg = register(name)
        raw = p.to_sign_magnitude(value, reg.sign_bit) if reg.sign_bit is not None else value
        self.write(servo_id, reg.address, raw, reg.size, ack)

    def sync_read_register(self, name: str, ids: Iterable[int]) -> SyncReading:
        reg = register(name)
        reading = self.sync_read(reg.address, reg.size, ids)
        if reg.sign_bit is None:
            return reading
        signed = {sid: p.from_sign_magnitude(v, reg.sign_bit) for sid, v in reading.values.items()}
        return SyncReading(signed, reading.stamp_ns, reading.sent_ns, reading.received_ns, reading.errors)

    def sync_write_register(self, name: str, values: Mapping[int, int]) -> None:
        reg = register(name)
        if reg.sign_bit is not None:
            values = {sid: p.to_sign_magnitude(v, reg.sign_bit) for sid, v in values.items()}
        self.sync_write(reg.address, reg.size, values)
