"""The record-by-record scan of an MCAP file that tolerates what a crash leaves and names what damage
did (no ROS import).

`open_bag` (the reader) and `recover` both read bags with it, so they agree on what survived:

- only a regular file is opened (a FIFO or device named `.mcap` would block a reader forever);
- records are read top level one at a time (no footer, summary or index needed); every length is
  checked against the bytes that are there, and records are parsed with explicit bounds;
- the scan stops at the first incomplete record (a file cut mid-write): `complete` stays False and
  `good_bytes` says where the readable part ends. A run of zero bytes where a record should start
  (a crash on a filesystem that had allocated the blocks) is the same: `zero_tail_at`, found by
  skipping holes (SEEK_DATA/SEEK_HOLE) and reading data in 1 MiB blocks instead of walking 9 bytes
  at a time;
- an impossible record (opcode 0 followed by data, an opcode MCAP does not define, a record whose
  fields do not fill it exactly, a length past the end of a file that has its closing magic)
  stops the scan with `malformed` saying where;
- a chunk is decompressed with its declared size as a bound and checked against its CRC (when the
  writer computed one); a bad chunk is skipped and counted (`bad_chunks`), a byte-identical copy
  of an earlier chunk is skipped and reported;
- `FollowMcap` reads a file that is still growing (a recording in progress) the same way, each
  poll from where the last one stopped;
- the data-section CRC (DataEnd) and the summary CRC (Footer) are verified when present, the
  summary's Statistics are compared with the messages counted, and anything wrong is a line in
  `problems`.

Definitions, metadata records, per-channel counts and time spans are collected; messages are
handed to `on_message` (and not kept) so memory stays small for a multi-GB bag. Without an
`on_message`, a chunk's messages are only counted (`ChunkMessages`: the fields read in place, no
`Message` and no copy of its data per message; `recover`, `upgrade`). `on_record` is
handed every top-level record the scan keeps (offset, opcode, bytes, what it holds): a skipped
chunk, and a data record after the end of the data section, are not handed on, so a copy made from
these records holds exactly what the scan counted (`recover` copies chunks verbatim this way).

Records are parsed with explicit bounds: mcap's own parsers read short silently or raise their own
`EndOfFile`; here every record must fill its bytes exactly, a chunk decompresses to exactly its
declared size (bounded: a declared size beyond MAX_CHUNK_BYTES is damage, not data) and matches
its CRC when the writer computed one. Anything else is `Malformed`, which the scan turns into a
verdict about the file.
"""
from __future__ import annotations

import errno
import os
import stat
import struct
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from io import BytesIO
from pathlib import Path
from typing import Any, BinaryIO

import lz4.frame
import zstandard
from mcap.data_stream import ReadDataStream
from mcap.exceptions import McapError
from mcap.opcode import Opcode
from mcap.records import Channel, DataEnd, Footer, Message, Metadata, Schema, Statistics

from teleop_flywheel.recording.mcap.exceptions import NotMcapError, NotRegularFileError

MAX_CHUNK_BYTES = 1 << 30  # a declared uncompressed chunk size beyond this is damage, not data
BLOCK = 1 << 20  # read and decompress in blocks of this size


# A kept top-level record: (offset, opcode, content without the 9-byte prefix, the records it holds)
OnRecord = Callable[[int, int, bytes, list[Any]], None]

# What every way of reading a bag hands out (the record scan, `FollowMcap`, the indexed reader):
# messages as MCAP's own Message records (channel_id, sequence, log_time, publish_time, data),
# channels as `RawChannel`, metadata records as {name: {key: value}}.
RawMessage = Message


@dataclass(frozen=True)
class RawChannel:
    """One MCAP channel with its schema, as stored (nothing decoded)."""

    id: int
    topic: str
    schema_name: str
    schema_encoding: str
    schema_data: bytes
    message_encoding: str
    metadata: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, channel: Channel, schema: Schema | None) -> RawChannel:
        return cls(channel.id, channel.topic, schema.name if schema else "", schema.encoding if schema else "",
                   schema.data if schema else b"", channel.message_encoding, dict(channel.metadata))


class Malformed(ValueError):
    """A record whose bytes cannot be what its header says."""


def parse_record(cls: Any, content: bytes) -> Any:
    """A fixed-layout record that must fill its content exactly."""
    stream = ReadDataStream(BytesIO(content))
    rec = cls.read(stream)
    if stream.count != len(content):
        raise Malformed(f"{cls.__name__} record of {len(content)} bytes holds {stream.count} bytes of fields")
    return rec


def message_record(buf: bytes, off: int, length: int) -> Message:
    if length < 22:
        raise Malformed(f"message record of {length} bytes (< 22)")
    channel_id, sequence, log_time, publish_time = struct.unpack_from("<HIQQ", buf, off)
    return Message(channel_id=channel_id, sequence=sequence, log_time=log_time, publish_time=publish_time,
                   data=bytes(buf[off + 22:off + length]))


def decompress(compression: str, data: bytes, size: int) -> bytes:
    if size > MAX_CHUNK_BYTES:
        raise Malformed(f"chunk declares {size} uncompressed bytes")
    if compression == "":
        out = data
    elif compression == "zstd" and zstandard.frame_content_size(data) == size:  # its header says it: one call
        frame = zstandard.ZstdDecompressor().decompressobj()
        out = frame.decompress(data)
        if frame.unused_data:
            raise Malformed(f"{len(frame.unused_data)} bytes after the chunk's zstd frame")
    elif compression == "zstd":  # no size in its header (or another): read in blocks up to the bound
        reader = zstandard.ZstdDecompressor().stream_reader(data)
        parts, total = [], 0
        while total <= size:
            block = reader.read(min(BLOCK, size + 1 - total))
            if not block:
                break
            parts.append(block)
            total += len(block)
        out = b"".join(parts)
    elif compression == "lz4":
        out = lz4.frame.LZ4FrameDecompressor().decompress(data, max_length=size + 1)
    else:
        raise Malformed(f"unknown chunk compression {compression[:20]!r}")
    if len(out) != size:
        raise Malformed(f"chunk decompresses to {len(out)} bytes, declares {size}")
    return out


@dataclass
class ChunkMessages:
    """The messages of one chunk summarised: what a scan nobody asked for messages of keeps (recover,
    upgrade, the metadata of a bag) instead of a `Message` with a copy of its data per message."""

    counts: dict[int, int]  # per channel
    start_log_ns: int
    end_log_ns: int
    last_stamp_ns: int  # largest publish_time


_PREFIX = struct.Struct("<BQ")
_MESSAGE_HEAD = struct.Struct("<HIQQ")


def chunk_records(content: bytes, messages: bool = True) -> list[Any]:
    """Schemas, channels and messages of one chunk (without `messages`: its messages as one
    `ChunkMessages`, after its schemas and channels); Malformed for any inconsistency."""
    if len(content) < 40:
        raise Malformed(f"chunk record of {len(content)} bytes")
    _start, _end, size, crc, clen = struct.unpack_from("<QQQII", content, 0)
    if 32 + clen + 8 > len(content):
        raise Malformed("chunk compression name runs past the record")
    compression = content[32:32 + clen].decode("utf-8")
    (dlen,) = struct.unpack_from("<Q", content, 32 + clen)
    if 40 + clen + dlen != len(content):
        raise Malformed(f"chunk data of {dlen} bytes does not fill the record of {len(content)} bytes")
    data = decompress(compression, content[40 + clen:], size)
    if crc != 0 and zlib.crc32(data) != crc:
        raise Malformed("chunk CRC mismatch")
    if crc == 0 and size and not data.strip(b"\0"):
        raise Malformed("chunk of zeros")
    out: list[Any] = []
    pos = 0
    counts: dict[int, int] = {}
    first, last, stamp = 1 << 64, -1, -1
    prefix, head, size = _PREFIX.unpack_from, _MESSAGE_HEAD.unpack_from, len(data)
    while pos < size:
        if pos + 9 > size:
            raise Malformed("chunk ends inside a record header")
        opcode, length = prefix(data, pos)
        body = pos + 9
        if body + length > size:
            raise Malformed(f"chunk record at {pos} runs past the chunk")
        if opcode == Opcode.MESSAGE and not messages:  # the fields a summary needs, nothing copied
            if length < 22:
                raise Malformed(f"message record of {length} bytes (< 22)")
            channel_id, _sequence, log_time, publish_time = head(data, body)
            counts[channel_id] = counts.get(channel_id, 0) + 1
            if log_time < first:
                first = log_time
            if log_time > last:
                last = log_time
            if publish_time > stamp:
                stamp = publish_time
        elif opcode == Opcode.MESSAGE:
            out.append(message_record(data, body, length))
        elif opcode == Opcode.SCHEMA:
            out.append(parse_record(Schema, data[body:body + length]))
        elif opcode == Opcode.CHANNEL:
            out.append(parse_record(Channel, data[body:body + length]))
        else:
            raise Malformed(f"record with opcode 0x{opcode:02x} inside a chunk")
        pos = body + length
    if counts:
        out.append(ChunkMessages(counts, first, last, stamp))
    return out


MAGIC = b"\x89MCAP0\r\n"
KNOWN_OPCODES = frozenset(int(o) for o in Opcode)
_RECORD_TYPES: dict[int, type] = {Opcode.SCHEMA: Schema, Opcode.CHANNEL: Channel, Opcode.METADATA: Metadata}






@dataclass
class ScanResult:
    """What survived in a (possibly damaged) MCAP file; messages are counted, not kept."""

    path: Path
    size: int
    good_bytes: int = len(MAGIC)  # offset after the last complete top-level record
    complete: bool = False  # footer present
    schemas: dict[int, Schema] = field(default_factory=dict)
    channels: dict[int, Channel] = field(default_factory=dict)
    metadata: dict[str, dict[str, str]] = field(default_factory=dict)
    counts: dict[int, int] = field(default_factory=dict)
    start_log_ns: int | None = None
    end_log_ns: int | None = None
    last_stamp_ns: int | None = None  # largest publish_time
    bad_chunks: int = 0
    malformed: str | None = None  # why the scan stopped before the end of the file
    zero_tail_at: int | None = None  # offset where an all-zero tail begins (treated as a cut)
    statistics: Statistics | None = None
    data_crc: bool = False  # the file carried a data-section CRC and it matched
    problems: list[str] = field(default_factory=list)  # CRC mismatches, duplicate chunks, count disagreements

    @property
    def discarded_bytes(self) -> int:
        return self.size - self.good_bytes

    @property
    def message_count(self) -> int:
        return sum(self.counts.values())

    @property
    def raw_channels(self) -> dict[int, RawChannel]:
        """The surviving channels with their schemas, as `IndexedBag.channels` gives them."""
        return {cid: RawChannel.of(ch, self.schemas.get(ch.schema_id)) for cid, ch in self.channels.items()}

    @property
    def orphans(self) -> list[int]:
        """Channel ids that have messages but no surviving channel record."""
        return sorted(set(self.counts) - set(self.channels))

    def _add_chunk(self, c: ChunkMessages) -> None:
        for cid, n in c.counts.items():
            self.counts[cid] = self.counts.get(cid, 0) + n
        self.start_log_ns = c.start_log_ns if self.start_log_ns is None else min(self.start_log_ns, c.start_log_ns)
        self.end_log_ns = c.end_log_ns if self.end_log_ns is None else max(self.end_log_ns, c.end_log_ns)
        self.last_stamp_ns = c.last_stamp_ns if self.last_stamp_ns is None else max(self.last_stamp_ns,
                                                                                     c.last_stamp_ns)

    def _add_message(self, m: Message) -> None:
        self.counts[m.channel_id] = self.counts.get(m.channel_id, 0) + 1
        if self.start_log_ns is None or m.log_time < self.start_log_ns:
            self.start_log_ns = m.log_time
        if self.end_log_ns is None or m.log_time > self.end_log_ns:
            self.end_log_ns = m.log_time
        if self.last_stamp_ns is None or m.publish_time > self.last_stamp_ns:
            self.last_stamp_ns = m.publish_time


def open_regular(path: str | Path) -> BinaryIO:
    """Open a file for reading only if it is a regular file (never blocks on a FIFO or device)."""
    p = Path(path)
    fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = "a FIFO" if stat.S_ISFIFO(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) \
                else "a socket" if stat.S_ISSOCK(mode) else "not a regular file"
            raise NotRegularFileError(f"{p}: {kind}, not a regular file")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _all_zero(f: BinaryIO, start: int, size: int) -> bool:
    """Whether bytes [start, size) are all zero: holes of a sparse file are skipped (SEEK_DATA /
    SEEK_HOLE), data regions read in 1 MiB blocks."""
    fd = f.fileno()
    pos = start
    while pos < size:
        try:
            data_at = os.lseek(fd, pos, os.SEEK_DATA)
            hole_at = min(os.lseek(fd, data_at, os.SEEK_HOLE), size)
        except OSError as exc:
            if exc.errno == errno.ENXIO:
                return True  # nothing but a hole up to the end
            data_at, hole_at = pos, size  # no sparse-file support here: read it all
        if data_at >= size:
            return True
        f.seek(data_at)
        remaining = hole_at - data_at
        while remaining > 0:
            block = f.read(min(BLOCK, remaining))
            if not block or block.strip(b"\0"):
                return False
            remaining -= len(block)
        pos = hole_at
    return True


def _top_level(f: BinaryIO, size: int, result: ScanResult, crc: list[int], pos: int = len(MAGIC)
               ) -> Iterator[tuple[int, int, bytes]]:
    """(offset, opcode, content) of each complete top-level record from `pos` (after the magic);
    stops at a cut, a zero tail or an impossible record (recorded in `result`). `crc[0]`
    accumulates the data CRC."""
    closed = size >= 2 * len(MAGIC) and _tail_is_magic(f, size)
    while pos + 9 <= size:
        f.seek(pos)
        prefix = f.read(9)
        opcode, length = struct.unpack("<BQ", prefix)
        if opcode == 0 and length == 0 and _all_zero(f, pos, size):
            result.zero_tail_at = pos
            return
        if opcode not in KNOWN_OPCODES:
            result.malformed = f"{result.path}: impossible record (opcode 0x{opcode:02x}) at byte {pos}"
            return
        if pos + 9 + length > size:
            if closed:
                result.malformed = (f"{result.path}: record at byte {pos} claims {length} bytes, past the end of a "
                                    "file that has its closing magic")
            return  # cut mid-record
        content = f.read(length)
        crc[0] = zlib.crc32(content, zlib.crc32(prefix, crc[0]))
        yield pos, opcode, content
        pos += 9 + length


def _tail_is_magic(f: BinaryIO, size: int) -> bool:
    f.seek(size - len(MAGIC))
    return f.read(len(MAGIC)) == MAGIC


def record_spans(path: str | Path, opcode: int | None = None) -> list[tuple[int, int]]:
    """(offset, length with the 9-byte prefix) of the top-level records (of `opcode`) up to the footer."""
    path = Path(path)
    out = []
    result = ScanResult(path=path, size=path.stat().st_size)
    with open_regular(path) as f:
        for pos, op, content in _top_level(f, result.size, result, [0]):
            if opcode is None or op == opcode:
                out.append((pos, 9 + len(content)))
            if op == Opcode.FOOTER:
                break
    return out


class _Scanner:
    def __init__(self, f: BinaryIO, result: ScanResult, on_message: Callable[[RawMessage], None] | None) -> None:
        self.f, self.result, self.on_message = f, result, on_message
        # (times, sizes, CRC, record length) of each chunk -> offsets of the chunks that have them: a
        # copy has the same key, and only chunks sharing a key are compared byte for byte (hashing
        # every chunk cost as much as decompressing it)
        self.chunk_keys: dict[tuple[bytes, int], list[int]] = {}
        self.data_end_at: int | None = None
        self.kept = True  # whether the last record given to `records` was kept (not skipped)

    def records(self, pos: int, opcode: int, content: bytes, crc_before: int) -> list[Any]:
        r = self.result
        self.kept = False
        if self.data_end_at is not None and opcode in (Opcode.CHUNK, Opcode.MESSAGE, Opcode.METADATA,
                                                       Opcode.ATTACHMENT, Opcode.DATA_END):
            r.problems.append(f"data record (opcode 0x{opcode:02x}) at byte {pos}, after the end of the data section")
            return []
        if opcode == Opcode.CHUNK:
            if self.duplicate(pos, content):
                r.problems.append(f"chunk at byte {pos} is a byte-identical copy of an earlier chunk (skipped)")
                return []
            try:
                held = chunk_records(content, messages=self.on_message is not None)
            except (Malformed, struct.error, UnicodeDecodeError, McapError, zstandard.ZstdError, RuntimeError,
                    MemoryError):
                r.bad_chunks += 1
                return []
            self.kept = True
            return held
        self.kept = True
        if opcode == Opcode.MESSAGE:
            return [message_record(content, 0, len(content))]
        if opcode in (Opcode.SCHEMA, Opcode.CHANNEL, Opcode.METADATA):
            return [parse_record(_RECORD_TYPES[opcode], content)]
        if opcode == Opcode.STATISTICS:
            r.statistics = parse_record(Statistics, content)
        elif opcode == Opcode.DATA_END:
            self.data_end_at = pos + 9 + len(content)
            expected = parse_record(DataEnd, content).data_section_crc
            if expected:
                if expected == crc_before:
                    r.data_crc = True
                else:
                    r.problems.append(f"data section CRC mismatch (recorded {expected:08x}, computed {crc_before:08x})")
        elif opcode == Opcode.FOOTER:
            self.footer(pos, parse_record(Footer, content))
        return []  # header, indexes, attachments, summary offsets: the summary is rebuilt, not read

    def duplicate(self, pos: int, content: bytes) -> bool:
        """Whether the chunk at `pos` is a byte-identical copy of an earlier one; else it is remembered."""
        earlier = self.chunk_keys.setdefault((content[:32], len(content)), [])
        for at in earlier:
            self.f.seek(at + 9)
            if self.f.read(len(content)) == content:
                return True
        earlier.append(pos)
        return False

    def footer(self, pos: int, footer: Footer) -> None:
        r, f = self.result, self.f
        r.complete = True
        if footer.summary_start and footer.summary_start != self.data_end_at:
            r.problems.append(f"footer says the summary starts at byte {footer.summary_start}, the data section "
                              f"ends at {self.data_end_at}")
        elif footer.summary_crc:
            start = footer.summary_start or pos
            f.seek(start)
            covered = f.read(pos + 9 + 16 - start)
            if zlib.crc32(covered) != footer.summary_crc:
                r.problems.append("summary section CRC mismatch")
        f.seek(pos + 9 + 20)
        if f.read(len(MAGIC)) != MAGIC:
            r.problems.append("no closing magic after the footer")
        elif pos + 9 + 20 + len(MAGIC) != r.size:
            r.problems.append(f"{r.size - (pos + 9 + 20 + len(MAGIC))} bytes after the closing magic")


class FollowMcap:
    """Reads an MCAP file that may still be growing (a recording in progress): each `poll` reads
    the complete records written since the previous one, so a watcher pays for every byte once.
    `result` accumulates what `scan` reports; a record cut mid-write is read by a later poll."""

    def __init__(self, path: str | Path, on_message: Callable[[RawMessage], None] | None = None,
                 on_record: OnRecord | None = None) -> None:
        self.path = Path(path)
        self.result = ScanResult(path=self.path, size=0)
        self._on_message = on_message
        self._on_record = on_record
        self._scanner: _Scanner | None = None
        self._pos = len(MAGIC)
        self._crc = [zlib.crc32(MAGIC)]

    @property
    def ended(self) -> bool:
        """The footer was read (the file is closed), or damage stops the reading for good."""
        return self.result.complete or self.result.malformed is not None

    def poll(self, growing: bool = True) -> int:
        """Read the complete records added since the last poll; how many. Raises `NotMcapError`
        for a file that is not MCAP (`growing`: one too short to tell yet reads as empty)."""
        r = self.result
        if self.ended:
            return 0
        with open_regular(self.path) as f:
            r.size = os.fstat(f.fileno()).st_size
            if self._scanner is None:
                if growing and r.size < len(MAGIC):
                    return 0
                if f.read(len(MAGIC)) != MAGIC:
                    raise NotMcapError(f"{self.path}: not an MCAP file (bad magic)")
                self._scanner = _Scanner(f, r, self._on_message)
            self._scanner.f = f
            r.zero_tail_at = None  # a growing file's tail is looked at again
            read = 0
            before = self._crc[0]
            for pos, opcode, content in _top_level(f, r.size, r, self._crc, self._pos):
                try:
                    records = self._scanner.records(pos, opcode, content, before)
                except (Malformed, struct.error, ValueError, UnicodeDecodeError, McapError) as exc:
                    r.malformed = f"{self.path}: malformed record at byte {pos}: {exc}"
                    break
                before = self._crc[0]
                read += 1
                self._pos = pos + 9 + len(content)
                r.good_bytes = self._pos + (len(MAGIC) if r.complete else 0)
                self._take(records)
                if self._on_record is not None and self._scanner.kept:
                    self._on_record(pos, opcode, content, records)
                if r.complete:
                    break
        return read

    def _take(self, records: list[Any]) -> None:
        r = self.result
        for rec in records:
            if isinstance(rec, Message):
                r._add_message(rec)
                if self._on_message is not None:
                    self._on_message(rec)
            elif isinstance(rec, ChunkMessages):
                r._add_chunk(rec)
            elif isinstance(rec, Channel):
                r.channels.setdefault(rec.id, rec)
            elif isinstance(rec, Schema):
                r.schemas.setdefault(rec.id, rec)
            elif isinstance(rec, Metadata):
                r.metadata[rec.name] = dict(rec.metadata)


def scan(path: str | Path, on_message: Callable[[RawMessage], None] | None = None,
         on_record: OnRecord | None = None) -> ScanResult:
    """Read every surviving record of `path` in file order (see the module docstring).

    Raises `NotMcapError` for a file that is not MCAP (or not a regular file) and OSError if it
    cannot be read; damage is reported in the result, not raised.
    """
    follow = FollowMcap(path, on_message, on_record)
    follow.poll(growing=False)
    _check_statistics(follow.result)
    return follow.result


def _check_statistics(result: ScanResult) -> None:
    s = result.statistics
    if s is None or result.bad_chunks:
        return
    counted = {cid: n for cid, n in result.counts.items() if n}
    recorded = {cid: n for cid, n in s.channel_message_counts.items() if n}
    if counted != recorded or s.message_count != result.message_count:
        diff = sorted(cid for cid in set(counted) | set(recorded) if counted.get(cid) != recorded.get(cid))
        result.problems.append(f"{result.message_count} messages read, the summary statistics say {s.message_count}"
                               f" (channels {diff[:8]} differ)")
