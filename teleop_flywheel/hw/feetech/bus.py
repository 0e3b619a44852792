"""Feetech STS bus over pyserial: ping, read, write, sync read, sync write.

Every read returns the CLOCK_MONOTONIC time (ns) at which the sample was taken on the
servo side, as close as the host can know it: the moment the last status byte arrived,
minus the wire time of the status bytes at the set baud rate. Servo error bits become
`ServoError`s naming the servo and the fault; a vanished port becomes `PortUnavailable`.
Reads are bounded by a timeout and retried a bounded number of times.
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


@dataclass(frozen=True)
class SyncReading:
    """Values per servo id and the source stamp of the sample (monotonic ns)."""

    values: dict[int, int]
    stamp_ns: int
    errors: dict[int, int] = field(default_factory=dict)  # servo id -> error bits (non-fatal)


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
        self._dirty = False

    # -- connection ---------------------------------------------------------------------
    def open(self) -> None:
        try:
            self._serial = serial.Serial(self.port, self.baudrate, timeout=0, write_timeout=self.timeout_s * 10)
        except (serial.SerialException, OSError) as exc:
            raise PortUnavailable(self.port, f"cannot open ({exc})") from exc
        self._parser.clear()

    def close(self) -> None:
        if self._serial is not None:
            try:
                self._serial.close()
            except (serial.SerialException, OSError):
                pass
            self._serial = None

    @property
    def is_open(self) -> bool:
        return self._serial is not None

    def __enter__(self) -> "FeetechBus":
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- raw I/O ------------------------------------------------------------------------
    def _fd(self) -> int:
        if self._serial is None:
            raise PortUnavailable(self.port, "not open")
        return self._serial.fileno()

    def _send(self, packet: bytes) -> None:
        fd = self._fd()
        if self._dirty:
            # A previous exchange failed: late replies may still arrive; drop them first.
            self._drain(fd)
            self._dirty = False
        self._parser.clear()
        try:
            os.write(fd, packet)
        except OSError as exc:
            self._lost(exc)

    def _drain(self, fd: int, quiet_s: float = 0.003) -> None:
        """Discard bytes until the line has been quiet for `quiet_s`: a reply to a timed-out
        request may still be on its way, and must not be taken for the next request's."""
        while True:
            try:
                ready, _, _ = select.select([fd], [], [], quiet_s)
                if not ready or not os.read(fd, 4096):
                    return
            except OSError as exc:
                self._lost(exc)

    def _lost(self, exc: BaseException) -> None:
        self.close()
        raise PortUnavailable(self.port, f"port went away ({exc})") from exc

    def _receive(self, count: int) -> tuple[list[p.Status], int]:
        """Up to `count` status packets (fewer on timeout) and the arrival time of the last one."""
        fd = self._fd()
        got: list[p.Status] = []
        arrived = 0
        deadline = time.monotonic() + self.timeout_s
        skipped0, bad0 = self._parser.skipped_bytes, self._parser.bad_checksums
        while len(got) < count:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                ready, _, _ = select.select([fd], [], [], remaining)
                if not ready:
                    break
                data = os.read(fd, 4096)
            except OSError as exc:
                self._lost(exc)
            if not data:  # readable but empty: the other end hung up (unplugged)
                self._lost(EOFError("end of file on serial port"))
            arrived = now_ns()
            self._parser.feed(data)
            while len(got) < count and (status := self._parser.next()) is not None:
                got.append(status)
        self.stats.skipped_bytes += self._parser.skipped_bytes - skipped0
        self.stats.bad_checksums += self._parser.bad_checksums - bad0
        return got, arrived

    def _transact(self, packet: bytes, expect: list[int], reply_size: int) -> tuple[dict[int, p.Status], int]:
        """Send, collect one status per id in `expect`; retry the whole exchange on a miss."""
        for attempt in range(self.retries + 1):
            self.stats.transactions += 1
            if attempt:
                self.stats.retries += 1
            self._send(packet)
            got, arrived = self._receive(len(expect))
            by_id = {s.servo_id: s for s in got if s.servo_id in expect}
            self._dirty = len(got) < len(expect) or self._parser.pending > 0
            if len(by_id) == len(expect) and all(len(s.data) == reply_size for s in by_id.values()):
                # The last status finished arriving at `arrived`; the sample was latched one
                # status-packet wire time before that.
                stamp = arrived - p.wire_time_ns(reply_size + 6, self.baudrate)
                return by_id, stamp
        self.stats.timeouts += 1
        self.stats.errors += 1
        missing = sorted(set(expect) - set(by_id))
        raise BusTimeout(self.port, f"no valid reply from servo(s) {missing} after {self.retries + 1} attempt(s)")

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

    def read(self, servo_id: int, address: int, size: int) -> tuple[int, int]:
        """(unsigned value, stamp_ns) of `size` bytes at `address`."""
        by_id, stamp = self._transact(p.read(servo_id, address, size), [servo_id], size)
        status = by_id[servo_id]
        self._check(status)
        return p.decode_value(status.data, size), stamp

    def write(self, servo_id: int, address: int, value: int, size: int) -> None:
        """Write and wait for the servo's acknowledgement (no reply expected for broadcast)."""
        packet = p.write(servo_id, address, p.encode_value(value, size))
        if servo_id == p.BROADCAST_ID:
            self._send(packet)
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
        self._send(p.sync_write(address, size, values))

    # -- register-name helpers (sign-magnitude applied) ----------------------------------
    def read_register(self, servo_id: int, name: str) -> tuple[int, int]:
        reg = register(name)
        raw, stamp = self.read(servo_id, reg.address, reg.size)
        return (p.from_sign_magnitude(raw, reg.sign_bit) if reg.sign_bit is not None else raw), stamp

    def write_register(self, servo_id: int, name: str, value: int) -> None:
        reg = register(name)
        raw = p.to_sign_magnitude(value, reg.sign_bit) if reg.sign_bit is not None else value
        self.write(servo_id, reg.address, raw, reg.size)

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
