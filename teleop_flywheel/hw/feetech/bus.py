"""Feetech STS bus over pyserial: ping, read, write, sync read, sync write.

Every read returns the CLOCK_MONOTONIC time (ns) at which the sample was taken on the
servo side, as close as the host can know it: the moment the last status byte arrived,
minus the wire time of the status bytes at the set baud rate. Servo error bits become
`ServoError`s naming the servo and the fault; a vanished port becomes `PortUnavailable`.

The bus never returns a stale reply. The protocol has no sequence numbers, so a reply that
arrives late (after its request timed out) looks exactly like the answer to the next identical
request. Staleness is made impossible by construction instead:
- a reply is accepted only if the whole exchange is clean: exactly one status from each
  expected id, in the order the instruction lists them, each of the length it implies, no skipped or corrupt byte, nothing
  on the line before the request went out and nothing extra after the last status, and the
  last byte arrived no earlier than the request and reply could have crossed the wire;
- after any anomaly (timeout, garbage, wrong id/length, duplicate, extra bytes) the line is
  *suspect*, and the next exchange is preceded by a **fence**: a read of a register block whose
  length no regular request uses, taken in turn from 32 lengths (so a late reply to an earlier
  fence is no fence either), sent to every servo of the exchange; everything that arrives
  before each fence reply is discarded. A servo answers its instructions in order, so once its
  fence reply is in, every older reply of that servo has arrived (or never will). The one
  assumption: no reply is more than 32 fences (≥ 32 × `timeout_s`) late;
- a sync read is returned only when every servo's status came from the same exchange.
Every call has a deadline, drains and fences included: at most
`(retries + 1) × 2 × timeout_s` plus write time, then `BusTimeout`.
"""
from __future__ import annotations

import os
import select
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import serial

from teleop_flywheel.core.clock import now_ns
from teleop_flywheel.core.errors import FlywheelError
from teleop_flywheel.core.so101 import BAUD_RATE
from teleop_flywheel.hw.feetech import codec as p
from teleop_flywheel.hw.feetech.control_table import error_names, register

FENCE_ADDRESS = 3  # Model_Number: the start of a block every STS servo can read
# Reply lengths no regular request of the project uses, taken in turn: a fence reply can only be
# mistaken for a newer fence's if it is len(FENCE_SIZES) fences late (≥ 32 × timeout_s).
FENCE_SIZES = tuple(range(16, 48))


class BusError(FlywheelError, RuntimeError):
    """A bus operation failed; the message names the port."""

    def __init__(self, port: str, message: str) -> None:
        super().__init__(f"{port}: {message}")
        self.port = port


class BusTimeout(BusError):
    """A servo did not answer in time (after the retries)."""


class PortUnavailable(BusError):
    """The serial port cannot be opened or has gone away (unplugged)."""


class ServoError(BusError):
    """A status packet carried fault bits (voltage, angle sensor, overheat, overcurrent, overload)."""

    def __init__(self, port: str, servo_id: int, bits: int) -> None:
        self.servo_id, self.bits, self.faults = servo_id, bits, error_names(bits)
        super().__init__(port, f"servo {servo_id} reports {', '.join(self.faults)} (error 0x{bits:02x})")


@dataclass
class BusStats:
    transactions: int = 0
    errors: int = 0
    retries: int = 0
    timeouts: int = 0
    bad_checksums: int = 0
    skipped_bytes: int = 0
    fences: int = 0  # exchanges preceded by a fence after an anomaly
    stale_bytes: int = 0  # bytes discarded as not belonging to the exchange they arrived in


@dataclass(frozen=True)
class SyncReading:
    """Values per servo id and the source stamp of the sample (monotonic ns)."""

    values: dict[int, int]
    stamp_ns: int
    errors: dict[int, int] = field(default_factory=dict)  # servo id -> error bits (non-fatal)


class _Anomaly(Exception):
    """An exchange was not clean; the line is suspect until a fence clears it."""


class FeetechBus:
    """One serial port with STS3215 servos on it. Not thread-safe: one owner thread."""

    def __init__(self, port: str, baudrate: int = BAUD_RATE, timeout_s: float = 0.02, retries: int = 2) -> None:
        self.port = port
        self.baudrate = baudrate
        self.timeout_s = timeout_s
        self.retries = retries
        self.stats = BusStats()
        self._serial: serial.Serial | None = None
        self._parser = p.StatusParser()
        self._suspect = True  # nothing is known about the line until a fence has cleared it
        self._fence_turn = 0

    # -- connection ---------------------------------------------------------------------
    def open(self) -> None:
        try:
            self._serial = serial.Serial(self.port, self.baudrate, timeout=0, write_timeout=self.timeout_s * 10)
        except (serial.SerialException, OSError) as exc:
            raise PortUnavailable(self.port, f"cannot open ({exc})") from exc
        self._parser.clear()
        self._suspect = True

    def close(self) -> None:
        if self._serial is not None:
            try:
                self._serial.close()
            except (serial.SerialException, OSError):
                pass
            self._serial = None

    def __enter__(self) -> "FeetechBus":
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def call_bound_s(self) -> float:
        """The longest any call may take before it raises (fences and retries included)."""
        return (self.retries + 1) * 2 * self.timeout_s + 10 * self.timeout_s

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

    def _write(self, fd: int, packet: bytes, deadline: float) -> None:
        """Write all of `packet` before `deadline` (a stalled adapter must not block the caller)."""
        view = memoryview(packet)
        while view:
            remaining = deadline - time.monotonic()
            try:
                _, writable, _ = select.select([], [fd], [], max(0.0, remaining))
                if not writable:
                    raise BusTimeout(self.port, "could not write within the call's deadline (adapter stalled?)")
                view = view[os.write(fd, view):]
            except BlockingIOError:
                continue
            except OSError as exc:
                self._lost(exc)

    def _flush_line(self, fd: int) -> None:
        """Drop whatever is already waiting: it cannot be an answer to a request not yet sent."""
        data, _ = self._read_available(fd, 0.0)
        while data:
            self.stats.stale_bytes += len(data)
            self._suspect = True
            data, _ = self._read_available(fd, 0.0)
        self._parser.clear()

    def _collect(self, fd: int, expect: list[int], reply_size: int, deadline: float,
                 strict: bool) -> tuple[dict[int, p.Status], int]:
        """One status per id in `expect` before `deadline`, and the arrival time of the last.

        strict: any other complete status is an anomaly (a regular exchange); otherwise every
        status before the awaited ones is discarded as stale (a fence). Bytes that form no valid
        packet are skipped either way and leave the line suspect.
        """
        got: dict[int, p.Status] = {}
        arrived = 0
        skipped0, bad0 = self._parser.skipped_bytes, self._parser.bad_checksums
        try:
            while len(got) < len(expect):
                data, t = self._read_available(fd, deadline - time.monotonic())
                if not data:
                    missing = sorted(set(expect) - set(got))
                    raise _Anomaly(f"no reply from servo(s) {missing} within {self.timeout_s * 1e3:.0f} ms")
                arrived = t
                self._parser.feed(data)
                while len(got) < len(expect) and (status := self._parser.next()) is not None:
                    # Servos answer a SYNC_READ one after another in the order of its id list.
                    fits = status.servo_id == expect[len(got)] and len(status.data) == reply_size
                    if fits:
                        got[status.servo_id] = status
                    elif strict:
                        raise _Anomaly(f"unexpected status from id {status.servo_id} ({len(status.data)} data bytes)")
                    else:
                        self.stats.stale_bytes += len(status.data) + 6
        finally:
            if self._parser.skipped_bytes != skipped0 or self._parser.bad_checksums != bad0:
                # Garbage cannot be taken for a reply, but it says the line is not what it
                # should be: fence before the next exchange.
                self._suspect = True
            self.stats.skipped_bytes += self._parser.skipped_bytes - skipped0
            self.stats.bad_checksums += self._parser.bad_checksums - bad0
        if self._parser.pending:
            raise _Anomaly(f"{self._parser.pending} byte(s) after the last expected status")
        return got, arrived

    def _fence(self, fd: int, ids: list[int], deadline: float) -> None:
        """Clear a suspect line: fence every servo of the exchange, discard what precedes."""
        self.stats.fences += 1
        self._fence_turn = (self._fence_turn + 1) % len(FENCE_SIZES)
        size = FENCE_SIZES[self._fence_turn]
        packet = p.read(ids[0], FENCE_ADDRESS, size) if len(ids) == 1 else p.sync_read(FENCE_ADDRESS, size, ids)
        self._parser.clear()
        self._write(fd, packet, deadline)
        self._collect(fd, ids, size, min(deadline, time.monotonic() + self.timeout_s), strict=False)
        self._flush_line(fd)
        self._suspect = False

    def _transact(self, packet: bytes, expect: list[int], reply_size: int) -> tuple[dict[int, p.Status], int]:
        """Send, collect one clean status per id in `expect`; fence and retry on any anomaly."""
        fd = self._fd()
        call_deadline = time.monotonic() + self.call_bound_s
        reason = "no attempt"
        for attempt in range(self.retries + 1):
            self.stats.transactions += 1
            if attempt:
                self.stats.retries += 1
            try:
                self._flush_line(fd)
                if self._suspect:
                    self._fence(fd, expect, call_deadline)
                sent = now_ns()
                self._write(fd, packet, call_deadline)
                got, arrived = self._collect(fd, expect, reply_size,
                                             min(call_deadline, time.monotonic() + self.timeout_s), strict=True)
                earliest = sent + p.wire_time_ns(len(packet) + len(expect) * (reply_size + 6), self.baudrate)
                if arrived < earliest:
                    raise _Anomaly("a reply arrived before the request could have been answered")
                late, _ = self._read_available(fd, 0.0)
                if late:
                    self._parser.feed(late)
                    raise _Anomaly(f"{len(late)} byte(s) after the last expected status (duplicate?)")
                # The last status finished arriving at `arrived`; the sample was latched one
                # status-packet wire time before that.
                return got, arrived - p.wire_time_ns(reply_size + 6, self.baudrate)
            except _Anomaly as anomaly:
                self._suspect = True
                reason = str(anomaly)
            if time.monotonic() >= call_deadline:
                break
        self.stats.timeouts += 1
        self.stats.errors += 1
        raise BusTimeout(self.port, f"no clean reply after {attempt + 1} attempt(s): {reason}")

    def _check(self, status: p.Status) -> None:
        if status.error:
            self.stats.errors += 1
            raise ServoError(self.port, status.servo_id, status.error)

    # -- instructions -------------------------------------------------------------------
    def ping(self, servo_id: int) -> int:
        """Model number of the servo (777 for an STS3215)."""
        by_id, _ = self._transact(p.ping(servo_id), [servo_id], 0)
        self._check(by_id[servo_id])
        return self.read(servo_id, register("Model_Number").address, 2)[0]

    def scan(self) -> list[int]:
        """Ids that answer a broadcast PING (every servo answers, in id order): bring-up only."""
        fd = self._fd()
        deadline = time.monotonic() + self.call_bound_s
        self._flush_line(fd)
        self._parser.clear()
        self._write(fd, p.ping(p.BROADCAST_ID), deadline)
        found: list[int] = []
        quiet_until = time.monotonic() + self.timeout_s
        while time.monotonic() < min(deadline, quiet_until):
            data, _ = self._read_available(fd, min(deadline, quiet_until) - time.monotonic())
            if data:
                self._parser.feed(data)
                while (status := self._parser.next()) is not None:
                    if not status.data and status.servo_id not in found:
                        found.append(status.servo_id)
                quiet_until = time.monotonic() + self.timeout_s  # more may follow after their return delay
        self._suspect = True  # whatever else arrived, the next exchange starts behind a fence
        return sorted(found)

    def read(self, servo_id: int, address: int, size: int) -> tuple[int, int]:
        """(unsigned value, stamp_ns) of `size` bytes at `address`."""
        by_id, stamp = self._transact(p.read(servo_id, address, size), [servo_id], size)
        status = by_id[servo_id]
        self._check(status)
        return p.decode_value(status.data, size), stamp

    def write(self, servo_id: int, address: int, value: int, size: int, ack: bool = True) -> None:
        """Write and wait for the servo's acknowledgement. Without `ack` (broadcast, or a write
        that changes the servo's ID or baud, whose reply comes from the new id or at the new
        baud) the packet is sent and whatever answers is left to the next exchange's fence."""
        packet = p.write(servo_id, address, p.encode_value(value, size))
        if servo_id == p.BROADCAST_ID or not ack:
            self._write(self._fd(), packet, time.monotonic() + self.call_bound_s)
            self._suspect = True
            return
        by_id, _ = self._transact(packet, [servo_id], 0)
        self._check(by_id[servo_id])

    def sync_read(self, address: int, size: int, ids: Iterable[int]) -> SyncReading:
        """One SYNC_READ; error bits on a servo are reported in `errors`, not raised."""
        ids = list(ids)
        by_id, stamp = self._transact(p.sync_read(address, size, ids), ids, size)
        values = {sid: p.decode_value(by_id[sid].data, size) for sid in ids}
        errors = {sid: by_id[sid].error for sid in ids if by_id[sid].error}
        return SyncReading(values, stamp, errors)

    def sync_write(self, address: int, size: int, values: Mapping[int, int]) -> None:
        """One SYNC_WRITE (servos never answer it)."""
        self.stats.transactions += 1
        self._write(self._fd(), p.sync_write(address, size, values), time.monotonic() + self.call_bound_s)

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
        return SyncReading(signed, reading.stamp_ns, reading.errors)

    def sync_write_register(self, name: str, values: Mapping[int, int]) -> None:
        reg = register(name)
        if reg.sign_bit is not None:
            values = {sid: p.to_sign_magnitude(v, reg.sign_bit) for sid, v in values.items()}
        self.sync_write(reg.address, reg.size, values)
