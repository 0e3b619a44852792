"""The record-by-record scan of an MCAP file that tolerates what a crash leaves (no ROS import).

`open_bag` (the reader) and `recover` both read bags with it, so they agree on what survived:

- records are read top level one at a time (no footer, summary or index needed); chunks are
  opened and their CRC checked;
- the scan stops at the first incomplete record (a file cut mid-write): `complete` stays False
  and `good_bytes` says where the readable part ends;
- a chunk whose CRC or compressed frame is bad is skipped and counted (`bad_chunks`);
- a malformed record (a length that points inside the file but bytes that do not parse) stops
  the scan with `malformed` saying where; messages whose channel record was lost are `orphans`.

Definitions, metadata records, per-channel counts and time spans are collected; messages are
handed to `on_message` (and not kept) so memory stays small for a multi-GB bag.
"""
from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from io import BytesIO
from pathlib import Path
from typing import Any, BinaryIO

from mcap.data_stream import ReadDataStream
from mcap.opcode import Opcode
from mcap.records import Channel, Chunk, Message, Metadata, Schema
from mcap.stream_reader import breakup_chunk

from teleop_flywheel.core.errors import FlywheelError

MAGIC = b"\x89MCAP0\r\n"


class NotMcapError(FlywheelError, ValueError):
    """The file does not start with the MCAP magic."""


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
    last_stamp_ns: int | None = None  # largest publish_time (the source stamp)
    bad_chunks: int = 0
    malformed: str | None = None  # why the scan stopped before the end of a file with a footer

    @property
    def discarded_bytes(self) -> int:
        return self.size - self.good_bytes

    @property
    def message_count(self) -> int:
        return sum(self.counts.values())

    @property
    def orphans(self) -> list[int]:
        """Channel ids that have messages but no surviving channel record."""
        return sorted(set(self.counts) - set(self.channels))

    def _add_message(self, m: Message) -> None:
        self.counts[m.channel_id] = self.counts.get(m.channel_id, 0) + 1
        if self.start_log_ns is None or m.log_time < self.start_log_ns:
            self.start_log_ns = m.log_time
        if self.end_log_ns is None or m.log_time > self.end_log_ns:
            self.end_log_ns = m.log_time
        if self.last_stamp_ns is None or m.publish_time > self.last_stamp_ns:
            self.last_stamp_ns = m.publish_time


def _top_level(f: BinaryIO, size: int) -> Iterator[tuple[int, int, bytes]]:
    """(offset, opcode, content) of each complete top-level record after the magic."""
    pos = len(MAGIC)
    while pos + 9 <= size:
        f.seek(pos)
        opcode, length = struct.unpack("<BQ", f.read(9))
        if pos + 9 + length > size:
            return  # cut mid-record
        yield pos, opcode, f.read(length)
        pos += 9 + length


def record_spans(path: str | Path, opcode: int | None = None) -> list[tuple[int, int]]:
    """(offset, length with the 9-byte prefix) of the top-level records (of `opcode`) up to the footer."""
    path = Path(path)
    out = []
    with open(path, "rb") as f:
        for pos, op, content in _top_level(f, path.stat().st_size):
            if opcode is None or op == opcode:
                out.append((pos, 9 + len(content)))
            if op == Opcode.FOOTER:
                break
    return out


def _records(opcode: int, content: bytes, result: ScanResult) -> list[Any]:
    stream = ReadDataStream(BytesIO(content))
    if opcode == Opcode.CHUNK:
        try:
            return list(breakup_chunk(Chunk.read(stream), validate_crc=True))
        except Exception:  # corrupt chunk (bad CRC/zstd frame): lose it, keep going
            result.bad_chunks += 1
            return []
    if opcode == Opcode.MESSAGE:
        return [Message.read(stream, len(content))]
    if opcode == Opcode.SCHEMA:
        return [Schema.read(stream)]
    if opcode == Opcode.CHANNEL:
        return [Channel.read(stream)]
    if opcode == Opcode.METADATA:
        return [Metadata.read(stream)]
    if opcode == Opcode.FOOTER:
        result.complete = True
    return []  # indexes, statistics, attachments: the summary is rebuilt, not read


def scan(path: str | Path, on_message: Callable[[Message], None] | None = None) -> ScanResult:
    """Read every surviving record of `path` in file order (see the module docstring).

    Raises `NotMcapError` for a file that is not MCAP and OSError if it cannot be read; damage
    is reported in the result, not raised.
    """
    path = Path(path)
    result = ScanResult(path=path, size=path.stat().st_size)
    with open(path, "rb") as f:
        if f.read(len(MAGIC)) != MAGIC:
            raise NotMcapError(f"{path}: not an MCAP file (bad magic)")
        for pos, opcode, content in _top_level(f, result.size):
            try:
                records = _records(opcode, content, result)
            except (struct.error, ValueError, UnicodeDecodeError, EOFError) as exc:
                result.malformed = f"{path}: malformed record at byte {pos}: {exc}"
                break
            end = pos + 9 + len(content)
            if result.complete and f.read(len(MAGIC)) == MAGIC:  # the closing magic after the footer
                end += len(MAGIC)
            result.good_bytes = end
            for r in records:
                if isinstance(r, Message):
                    result._add_message(r)
                    if on_message is not None:
                        on_message(r)
                elif isinstance(r, Channel):
                    result.channels.setdefault(r.id, r)
                elif isinstance(r, Schema):
                    result.schemas.setdefault(r.id, r)
                elif isinstance(r, Metadata):
                    result.metadata[r.name] = dict(r.metadata)
            if result.complete:
                break
    return result
