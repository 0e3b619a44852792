"""Feetech STS protocol codec: pure bytes in, bytes out, no I/O.

Instruction: `FF FF ID LEN INST P1..Pn CHK` with LEN = n + 2 and
CHK = ~(ID + LEN + INST + ΣP) & 0xFF. Status: `FF FF ID LEN ERR data.. CHK`.
Multi-byte values are little-endian (STS, "protocol end 0").

`StatusParser` is a streaming parser for what comes back on the wire: it resynchronises on
garbage (noise before a header, bad checksums, truncated packets) and counts what it
skipped instead of raising, because a noisy half-duplex line is normal, not exceptional.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

HEADER = b"\xff\xff"
BROADCAST_ID = 0xFE

PING = 0x01
READ = 0x02
WRITE = 0x03
REG_WRITE = 0x04
ACTION = 0x05
SYNC_READ = 0x82
SYNC_WRITE = 0x83

INSTRUCTIONS = {PING: "PING", READ: "READ", WRITE: "WRITE", REG_WRITE: "REG_WRITE", ACTION: "ACTION",
                SYNC_READ: "SYNC_READ", SYNC_WRITE: "SYNC_WRITE"}

MAX_PACKET_LEN = 250  # LEN byte bound for status packets (as the vendor SDK checks)


def checksum(body: bytes | bytearray | Sequence[int]) -> int:
    """~(sum of ID, LEN, INST/ERR and parameters) & 0xFF."""
    return ~sum(body) & 0xFF


def instruction(servo_id: int, inst: int, params: bytes | Sequence[int] = b"") -> bytes:
    """One instruction packet."""
    if not 0 <= servo_id <= 0xFE:
        raise ValueError(f"servo id {servo_id} out of range 0..254")
    params = bytes(params)
    if len(params) > 250:
        raise ValueError(f"{len(params)} parameter bytes exceed one packet")
    body = bytes((servo_id, len(params) + 2, inst)) + params
    return HEADER + body + bytes((checksum(body),))


def encode_value(value: int, size: int) -> bytes:
    """Little-endian unsigned bytes (sign handling is `to_sign_magnitude`'s job)."""
    if not 0 <= value < 1 << (8 * size):
        raise ValueError(f"value {value} does not fit in {size} byte(s)")
    return value.to_bytes(size, "little")


def decode_value(data: bytes | bytearray, size: int) -> int:
    return int.from_bytes(bytes(data[:size]), "little")


def to_sign_magnitude(value: int, sign_bit: int) -> int:
    magnitude = abs(value)
    if magnitude >= 1 << sign_bit:
        raise ValueError(f"|{value}| does not fit below sign bit {sign_bit}")
    return magnitude | (1 << sign_bit) if value < 0 else magnitude


def from_sign_magnitude(raw: int, sign_bit: int) -> int:
    magnitude = raw & ((1 << sign_bit) - 1)
    return -magnitude if raw & (1 << sign_bit) else magnitude


def ping(servo_id: int) -> bytes:
    return instruction(servo_id, PING)


def read(servo_id: int, address: int, size: int) -> bytes:
    return instruction(servo_id, READ, (address, size))


def write(servo_id: int, address: int, data: bytes) -> bytes:
    return instruction(servo_id, WRITE, bytes((address,)) + data)


def reg_write(servo_id: int, address: int, data: bytes) -> bytes:
    return instruction(servo_id, REG_WRITE, bytes((address,)) + data)


def action(servo_id: int = BROADCAST_ID) -> bytes:
    return instruction(servo_id, ACTION)


def sync_read(address: int, size: int, ids: Iterable[int]) -> bytes:
    return instruction(BROADCAST_ID, SYNC_READ, bytes((address, size, *ids)))


def sync_write(address: int, size: int, values: Mapping[int, int]) -> bytes:
    params = bytearray((address, size))
    for servo_id, value in values.items():
        params.append(servo_id)
        params += encode_value(value, size)
    return instruction(BROADCAST_ID, SYNC_WRITE, params)


def status(servo_id: int, error: int = 0, data: bytes = b"") -> bytes:
    """A status packet, as a servo sends it (used by the simulator)."""
    body = bytes((servo_id, len(data) + 2, error)) + data
    return HEADER + body + bytes((checksum(body),))


@dataclass(frozen=True)
class Instruction:
    """A decoded instruction packet (what the simulator receives)."""

    servo_id: int
    inst: int
    params: bytes


@dataclass(frozen=True)
class Status:
    """A decoded status packet."""

    servo_id: int
    error: int
    data: bytes


class _Framer:
    """Shared resynchronising framer for both packet directions."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self.skipped_bytes = 0
        self.bad_checksums = 0

    def feed(self, data: bytes | bytearray) -> None:
        self._buf += data

    @property
    def pending(self) -> int:
        return len(self._buf)

    def clear(self) -> None:
        self._buf.clear()

    def _complete_frame_after(self, start: int) -> int | None:
        """Offset of the first complete, checksum-valid frame at or after `start`, if any."""
        buf = self._buf
        pos = buf.find(HEADER, start)
        while pos >= 0:
            if pos + 4 <= len(buf):
                length = buf[pos + 3]
                end = pos + length + 4
                if buf[pos + 2] != 0xFF and 2 <= length <= MAX_PACKET_LEN and end <= len(buf) \
                        and buf[end - 1] == checksum(buf[pos + 2:end - 1]):
                    return pos
            pos = buf.find(HEADER, pos + 1)
        return None

    def _next_frame(self) -> tuple[int, int, bytes] | None:
        """(id, byte 4 = INST/ERR, params) of the next valid frame, or None if incomplete."""
        buf = self._buf
        while True:
            start = buf.find(HEADER)
            if start < 0:
                # Keep a trailing 0xFF: it may be the first half of a header.
                keep = 1 if buf[-1:] == b"\xff" else 0
                self.skipped_bytes += len(buf) - keep
                del buf[: len(buf) - keep]
                return None
            if start:
                self.skipped_bytes += start
                del buf[:start]
            if len(buf) < 4:
                return None
            servo_id, length = buf[2], buf[3]
            if servo_id == 0xFF or length < 2 or length > MAX_PACKET_LEN:
                # Not a real header (e.g. FF FF FF or a bogus length): drop one byte, rescan.
                self.skipped_bytes += 1
                del buf[:1]
                continue
            total = length + 4
            if len(buf) < total:
                # Noise that looks like a header with a long length must not swallow a real
                # packet behind it: if a complete valid frame starts later, skip to it.
                later = self._complete_frame_after(1)
                if later is None:
                    return None
                self.skipped_bytes += later
                del buf[:later]
                continue
            frame = bytes(buf[:total])
            if frame[-1] != checksum(frame[2:-1]):
                self.bad_checksums += 1
                self.skipped_bytes += 1
                del buf[:1]
                continue
            del buf[:total]
            return servo_id, frame[4], frame[5:-1]


class StatusParser(_Framer):
    """Streaming parser of status packets; `next()` returns None until one is complete."""

    def next(self) -> Status | None:
        frame = self._next_frame()
        return None if frame is None else Status(*frame)


class InstructionParser(_Framer):
    """Streaming parser of instruction packets (the servo side of the bus)."""

    def next(self) -> Instruction | None:
        frame = self._next_frame()
        return None if frame is None else Instruction(*frame)


def split_statuses(data: bytes, ids: Sequence[int], length: int) -> list[Status] | None:
    """The statuses of `data` if it is exactly one clean status per id of `ids`, in that order,
    each with `length` data bytes; else None (the `StatusParser` then sorts it out). The common
    case of a sync read, parsed in one pass instead of frame by frame."""
    size = length + 6
    if len(data) != size * len(ids):
        return None
    out = []
    for k, sid in enumerate(ids):
        frame = data[k * size:(k + 1) * size]
        if frame[:2] != HEADER or frame[2] != sid or frame[3] != length + 2 or frame[-1] != checksum(frame[2:-1]):
            return None
        out.append(Status(sid, frame[4], frame[5:-1]))
    return out


def wire_time_ns(n_bytes: int, baudrate: int) -> int:
    """Time n bytes occupy the line: 10 bits per byte (start, 8 data, stop)."""
    return n_bytes * 10 * 1_000_000_000 // baudrate
