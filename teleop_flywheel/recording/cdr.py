"""Per-message work the recorder does on raw CDR bytes, without deserializing (no ROS import).

- `header_stamp_ns`: every message whose first field is `std_msgs/Header` starts, after the
  4-byte encapsulation header, with `int32 sec, uint32 nanosec` — a fixed offset, so the
  source stamp is two integer reads, whatever the rest of the message is.
- `header_frame_id` / `cdr_string`: the few strings the recorder needs for metadata (policy
  checkpoint id in `frame_id`, intervention JSON in a `std_msgs/String`).
- `SequenceTracker`: dropped messages from gaps in each publisher's sequence numbers.
"""
from __future__ import annotations

import re
import struct
from functools import lru_cache

from teleop_flywheel.core.errors import FlywheelError
from teleop_flywheel.recording import msgdefs

HEADER_TYPE = "std_msgs/msg/Header"
_FIRST_FIELD = re.compile(r"^\s*([A-Za-z][A-Za-z0-9_/]*)(?:\[[^\]]*\])?\s+[A-Za-z]\w*\s*$")


class CdrError(FlywheelError, ValueError):
    """Bytes too short or malformed for the field asked for."""


def _endian(data: bytes | memoryview) -> str:
    if len(data) < 4:
        raise CdrError(f"CDR buffer of {len(data)} bytes has no encapsulation header")
    return "<" if data[1] & 1 else ">"  # 0x0001 CDR_LE / 0x0003 PL_CDR_LE; 0x0000 CDR_BE


def header_stamp_ns(data: bytes | memoryview) -> int:
    """header.stamp (ns) of a message that starts with std_msgs/Header."""
    if len(data) < 12:
        raise CdrError(f"CDR buffer of {len(data)} bytes is too short for a header stamp")
    sec, nanosec = struct.unpack_from(_endian(data) + "iI", data, 4)
    return sec * 1_000_000_000 + nanosec


def cdr_string(data: bytes | memoryview, offset: int) -> str:
    """A CDR string (uint32 length incl. NUL, bytes) at `offset` of the payload-with-header."""
    if len(data) < offset + 4:
        raise CdrError(f"CDR buffer of {len(data)} bytes too short for a string at {offset}")
    (length,) = struct.unpack_from(_endian(data) + "I", data, offset)
    end = offset + 4 + length
    if length == 0 or end > len(data):
        raise CdrError(f"bad CDR string length {length} at {offset} in {len(data)} bytes")
    return bytes(data[offset + 4:end - 1]).decode("utf-8")


def header_frame_id(data: bytes | memoryview) -> str:
    """header.frame_id of a message that starts with std_msgs/Header."""
    return cdr_string(data, 12)


@lru_cache(maxsize=None)
def starts_with_header(type_name: str) -> bool:
    """Whether the first field of `type_name` is a std_msgs/Header (from its .msg file)."""
    for line in msgdefs.msg_text(type_name).splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        match = _FIRST_FIELD.match(line)
        if match is None:  # a constant ("uint8 OK=0") comes before any field: keep looking
            continue
        token = match.group(1)
        return "/" in token and msgdefs.normalize_type(token) == HEADER_TYPE
    return False


class SequenceTracker:
    """Dropped messages per publisher: a jump from n to n+k means k−1 were lost.

    A sequence number that goes backwards is a restarted publisher: a new baseline, no drops.
    """

    def __init__(self) -> None:
        self._last: dict[bytes, int] = {}

    def add(self, publisher: bytes, sequence: int | None) -> int:
        """Record one message; returns how many messages of that publisher were skipped."""
        if sequence is None or sequence <= 0:
            return 0
        last = self._last.get(publisher)
        self._last[publisher] = sequence
        if last is None or sequence <= last:
            return 0
        return sequence - last - 1
