"""The one CDR codec of the project (no ROS import): decode and encode the message types we record.

CDR here = XCDR1 as ROS 2 serializes it: a 4-byte encapsulation header (`00 01` little endian,
`00 00` big endian; options ignored), then the fields, each aligned to its own size counted from
the byte after that header. Three users, one implementation:

- the recorder, per message, without deserializing: `header_stamp_ns` (every type that starts
  with `std_msgs/Header` has `int32 sec, uint32 nanosec` at a fixed offset), `header_frame_id`,
  `cdr_string`, `starts_with_header`; `SequenceTracker` counts drops from sequence gaps;
- the reader (`recording.reader`): `CdrReader` and the message decoders, `decode_joint_states`
  vectorised (messages of one layout are joined into one (N, L) byte array and viewed as
  float64 columns — no per-message Python for thousands of messages); `JointStateReader` the
  same one message at a time (a leader's driver feeling its follower's stream, taken raw);
- synthetic sessions (`testing.synthetic_session`): `CdrWriter` and the encoders
  `joint_state_cdr`, `compressed_image_cdr`, `string_cdr` (little endian, as ROS 2 writes).

Independent implementations (`rosbags`, `mcap_ros2`, Foxglove's npm parsers) check both sides in
the tests.
"""
from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from functools import cache
from itertools import pairwise
from typing import Any

import numpy as np

from teleop_flywheel.recording.mcap import msgdefs
from teleop_flywheel.recording.mcap.exceptions import CdrError

HEADER_TYPE = "std_msgs/msg/Header"
LITTLE_ENDIAN = b"\x00\x01\x00\x00"
_FIRST_FIELD = re.compile(r"^\s*([A-Za-z][A-Za-z0-9_/]*)(?:\[[^\]]*\])?\s+[A-Za-z]\w*\s*$")
Buffer = bytes | memoryview




def _endian(data: Buffer) -> str:
    if len(data) < 4:
        raise CdrError(f"CDR buffer of {len(data)} bytes has no encapsulation header")
    return "<" if data[1] & 1 else ">"  # 0x0001 CDR_LE / 0x0003 PL_CDR_LE; 0x0000 CDR_BE


# -- the recorder's fixed-offset reads ------------------------------------------------------------

def header_stamp_ns(data: Buffer) -> int:
    """header.stamp (ns) of a message that starts with std_msgs/Header."""
    if len(data) < 12:
        raise CdrError(f"CDR buffer of {len(data)} bytes is too short for a header stamp")
    sec, nanosec = struct.unpack_from(_endian(data) + "iI", data, 4)
    return int(sec) * 1_000_000_000 + int(nanosec)


def with_header_stamp(data: Buffer, stamp_ns: int) -> bytes:
    """A copy of a message that starts with std_msgs/Header, its header.stamp set to `stamp_ns`."""
    header_stamp_ns(data)  # the same length check
    out = bytearray(data)
    struct.pack_into(_endian(data) + "iI", out, 4, stamp_ns // 1_000_000_000, stamp_ns % 1_000_000_000)
    return bytes(out)


def header_stamps_ns(messages: list[bytes]) -> np.ndarray:
    """header.stamp (ns) of many messages that start with std_msgs/Header (int64 array)."""
    out = np.empty(len(messages), np.int64)
    for i, d in enumerate(messages):
        out[i] = header_stamp_ns(d)
    return out


def cdr_string(data: Buffer, offset: int) -> str:
    """A CDR string (uint32 length incl. NUL, bytes) at `offset` of the payload-with-header."""
    if len(data) < offset + 4:
        raise CdrError(f"CDR buffer of {len(data)} bytes too short for a string at {offset}")
    (length,) = struct.unpack_from(_endian(data) + "I", data, offset)
    end = offset + 4 + length
    if length == 0 or end > len(data):
        raise CdrError(f"bad CDR string length {length} at {offset} in {len(data)} bytes")
    return bytes(data[offset + 4:end - 1]).decode("utf-8")


def header_frame_id(data: Buffer) -> str:
    """header.frame_id of a message that starts with std_msgs/Header."""
    return cdr_string(data, 12)


@cache
def starts_with_header(type_name: str) -> bool:
    """Whether the first field of `type_name` is a std_msgs/Header (from its .msg file)."""
    return definition_starts_with_header(msgdefs.msg_text(type_name))


def definition_starts_with_header(text: str) -> bool:
    """Whether the first field of a message definition's text is a std_msgs/Header."""
    for line in text.splitlines():
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


# -- primitives -----------------------------------------------------------------------------------

class CdrReader:
    """Sequential field reads (either byte order, per the encapsulation header)."""

    def __init__(self, data: Buffer) -> None:
        self.e = _endian(data)
        self.data = data
        self.pos = 4

    def align(self, n: int) -> None:
        self.pos += (-(self.pos - 4)) % n

    def _unpack(self, fmt: str, size: int) -> Any:
        self.align(size)
        if self.pos + size > len(self.data):
            raise CdrError(f"CDR buffer of {len(self.data)} bytes ends inside a field at {self.pos}")
        (value,) = struct.unpack_from(self.e + fmt, self.data, self.pos)
        self.pos += size
        return value

    def u32(self) -> int:
        return int(self._unpack("I", 4))

    def count(self, min_size: int) -> int:
        """A sequence length whose elements (at least `min_size` bytes each) must fit in what is left."""
        n = self.u32()
        if n * min_size > len(self.data) - self.pos:
            raise CdrError(f"CDR sequence of {n} elements at {self.pos} cannot fit in {len(self.data)} bytes")
        return n

    def i32(self) -> int:
        return int(self._unpack("i", 4))

    def string(self) -> str:
        n = self.u32()
        if self.pos + n > len(self.data):
            raise CdrError(f"CDR string of {n} bytes at {self.pos} runs past {len(self.data)} bytes")
        try:
            s = bytes(self.data[self.pos:self.pos + n - 1]).decode("utf-8") if n else ""
        except UnicodeDecodeError as exc:
            raise CdrError(f"CDR string at {self.pos} is not UTF-8: {exc}") from None
        self.pos += n
        return s

    def array(self, dtype: str, size: int) -> tuple[np.ndarray, int]:
        """A sequence of a fixed-size primitive: (values, byte offset of the first element)."""
        n = self.u32()
        if n:
            self.align(size)
        off = self.pos
        if off + n * size > len(self.data):
            raise CdrError(f"CDR sequence of {n} x {size} bytes at {off} runs past {len(self.data)} bytes")
        arr = np.frombuffer(self.data, dtype=np.dtype(self.e + dtype), count=n, offset=off)
        self.pos += n * size
        return arr, off

    def octets(self) -> bytes:
        n = self.u32()
        out = bytes(self.data[self.pos:self.pos + n])
        if len(out) != n:
            raise CdrError(f"CDR byte sequence of {n} bytes at {self.pos} runs past {len(self.data)} bytes")
        self.pos += n
        return out

    def stamp(self) -> int:
        sec = self.i32()
        return sec * 1_000_000_000 + self.u32()


class CdrWriter:
    """Sequential field writes, little endian (what ROS 2 publishes)."""

    def __init__(self) -> None:
        self.buf = bytearray(LITTLE_ENDIAN)

    def align(self, n: int) -> None:
        self.buf += b"\0" * ((-(len(self.buf) - 4)) % n)

    def u32(self, v: int) -> None:
        self.align(4)
        self.buf += struct.pack("<I", v)

    def stamp(self, ns: int) -> None:
        self.align(4)
        self.buf += struct.pack("<iI", ns // 1_000_000_000, ns % 1_000_000_000)

    def string(self, s: str) -> None:
        b = s.encode() + b"\0"
        self.u32(len(b))
        self.buf += b

    def array(self, values: Any, dtype: str) -> None:
        """A sequence of a fixed-size primitive (e.g. "f8", "f4", "i4")."""
        arr = np.asarray(values, dtype="<" + dtype)
        self.u32(len(arr))
        if len(arr):
            self.align(arr.itemsize)
            self.buf += arr.tobytes()

    def octets(self, data: bytes) -> None:
        self.u32(len(data))
        self.buf += data

    def getvalue(self) -> bytes:
        return bytes(self.buf)


# -- encoders (sensor_msgs/JointState, sensor_msgs/CompressedImage, std_msgs/String) --------------

def joint_state_cdr(stamp_ns: int, names: list[str], position: Any, frame_id: str = "",
                    velocity: Any = None, effort: Any = None) -> bytes:
    w = CdrWriter()
    w.stamp(stamp_ns)
    w.string(frame_id)
    w.u32(len(names))
    for n in names:
        w.string(n)
    for values in (position, velocity, effort):
        w.array(() if values is None else values, "f8")
    return w.getvalue()


def compressed_image_cdr(stamp_ns: int, data: bytes, frame_id: str = "camera", fmt: str = "jpeg") -> bytes:
    w = CdrWriter()
    w.stamp(stamp_ns)
    w.string(frame_id)
    w.string(fmt)
    w.octets(data)
    return w.getvalue()


def string_cdr(text: str) -> bytes:
    w = CdrWriter()
    w.string(text)
    return w.getvalue()


# -- decoders -------------------------------------------------------------------------------------

@dataclass
class JointStates:
    """Many sensor_msgs/JointState messages of one topic as arrays."""

    stamps_ns: np.ndarray  # int64
    frame_ids: list[str]
    names: list[str]
    position: np.ndarray  # (N, J) float64
    velocity: np.ndarray  # (N, J) or (N, 0)
    effort: np.ndarray


def joint_state_layout(data: Buffer) -> tuple[int, str, list[str], list[tuple[int, int]]]:
    """(stamp, frame_id, names, [(offset, count)] of position/velocity/effort) of one message."""
    c = CdrReader(data)
    stamp = c.stamp()
    frame = c.string()
    names = [c.string() for _ in range(c.count(4))]
    spans = []
    for field_name in ("position", "velocity", "effort"):
        arr, off = c.array("f8", 8)
        if len(arr) not in (0, len(names)):
            raise CdrError(f"JointState {field_name} has {len(arr)} values for {len(names)} names")
        spans.append((off, len(arr)))
    return stamp, frame, names, spans


class JointStateReader:
    """One topic's JointState messages one at a time, as they arrive (a leader feeling its
    follower's 200 Hz stream): `read` gives (names, position, velocity, effort). A publisher sends
    the same layout (byte order, frame_id, names, array lengths) every time, so it is parsed once
    (`joint_state_layout`, which checks it) and a message whose length and every byte outside the
    stamp and the arrays' values agree with it is read with one struct call per array; any other
    is parsed in full and becomes the layout. CdrError for a malformed message."""

    def __init__(self) -> None:
        self._length = -1
        self._gaps: list[tuple[int, int, bytes]] = []  # the bytes around the values: encapsulation, names, counts
        self._names: tuple[str, ...] = ()
        self._arrays: list[tuple[struct.Struct, int]] = []  # per array: its values' format and offset

    def read(self, data: bytes) -> tuple[tuple[str, ...], tuple[float, ...], tuple[float, ...], tuple[float, ...]]:
        if len(data) != self._length or any(data[a:b] != kept for a, b, kept in self._gaps):
            self._parse(data)
        position, velocity, effort = (fmt.unpack_from(data, off) for fmt, off in self._arrays)
        return self._names, position, velocity, effort

    def _parse(self, data: bytes) -> None:
        _stamp, _frame, names, spans = joint_state_layout(data)
        e = _endian(data)
        edges = [(0, 4), (12, spans[0][0])] + [(a + 8 * n, b) for (a, n), (b, _m) in pairwise(spans)]
        self._gaps = [(a, b, bytes(data[a:b])) for a, b in edges]
        self._names = tuple(names)
        self._arrays = [(struct.Struct(f"{e}{n}d"), off) for off, n in spans]
        self._length = len(data)


def decode_joint_states(messages: list[bytes], where: str = "JointState") -> JointStates:
    """Vectorised: every message with the first one's byte layout (length, byte order, frame_id,
    names) is read in one numpy view; the others one by one. Names must agree throughout."""
    n = len(messages)
    if n == 0:
        empty = np.zeros((0, 0))
        return JointStates(np.zeros(0, np.int64), [], [], empty, empty.copy(), empty.copy())
    first = messages[0]
    _, frame0, names, spans0 = joint_state_layout(first)
    j = len(names)
    out = [np.full((n, j if cnt else 0), np.nan) for _, cnt in spans0]
    stamps = np.empty(n, np.int64)
    frames = [frame0] * n
    layout_len = len(first)
    prefix_end = spans0[0][0]  # everything after the stamp (bytes 4:12) up to position must match
    same = np.fromiter((len(d) == layout_len and d[12:prefix_end] == first[12:prefix_end] and d[1] == first[1]
                        for d in messages), dtype=bool, count=n)
    idx = np.flatnonzero(same)
    e = _endian(first)
    buf = np.frombuffer(b"".join(messages[i] for i in idx), dtype=np.uint8).reshape(len(idx), layout_len)
    stamps[idx] = (buf[:, 4:8].copy().view(e + "i4")[:, 0].astype(np.int64) * 1_000_000_000
                   + buf[:, 8:12].copy().view(e + "u4")[:, 0].astype(np.int64))
    for k, (off, cnt) in enumerate(spans0):
        if cnt:
            out[k][idx] = buf[:, off:off + 8 * cnt].copy().view(e + "f8").reshape(len(idx), cnt)
    for i in np.flatnonzero(~same):
        stamp, frame, other, spans = joint_state_layout(messages[i])
        stamps[i] = stamp
        frames[i] = frame
        if other != names:
            raise CdrError(f"{where}: message {i} has joint names {other}, the first had {names}")
        for k, (off, cnt) in enumerate(spans):
            if cnt and out[k].shape[1] == cnt:
                out[k][i] = np.frombuffer(messages[i], dtype=_endian(messages[i]) + "f8", count=cnt, offset=off)
    return JointStates(stamps, frames, names, out[0], out[1], out[2])


def decode_compressed_images(messages: list[bytes]) -> tuple[np.ndarray, list[str], list[bytes]]:
    """(stamps_ns, formats, compressed bytes) of sensor_msgs/CompressedImage messages."""
    stamps = np.empty(len(messages), np.int64)
    formats: list[str] = []
    data: list[bytes] = []
    for i, d in enumerate(messages):
        c = CdrReader(d)
        stamps[i] = c.stamp()
        c.string()  # frame_id
        formats.append(c.string())
        data.append(c.octets())
    return stamps, formats, data


def decode_string(data: Buffer) -> str:
    """std_msgs/String."""
    return CdrReader(data).string()


def decode_joy_buttons(messages: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """(stamps_ns, buttons (N, B) int32, zero-padded) of sensor_msgs/Joy messages."""
    stamps = np.empty(len(messages), np.int64)
    rows = []
    for i, d in enumerate(messages):
        c = CdrReader(d)
        stamps[i] = c.stamp()
        c.string()
        c.array("f4", 4)  # axes
        rows.append(c.array("i4", 4)[0].astype(np.int32))
    values = np.zeros((len(rows), max((len(r) for r in rows), default=0)), np.int32)
    for i, r in enumerate(rows):
        values[i, :len(r)] = r
    return stamps, values
