"""MCAP records parsed with explicit bounds (no ROS import): `recording/mcap/scan.py` hands them bytes.

mcap's own parsers read short silently or raise their own `EndOfFile`; here every record must
fill its bytes exactly, a chunk decompresses to exactly its declared size (bounded: a declared
size beyond MAX_CHUNK_BYTES is damage, not data) and matches its CRC when the writer computed one.
Anything else is `Malformed`, which the scan turns into a verdict about the file.
"""
from __future__ import annotations

import struct
import zlib
from io import BytesIO
from typing import Any

import lz4.frame
import zstandard
from mcap.data_stream import ReadDataStream
from mcap.opcode import Opcode
from mcap.records import Channel, Message, Schema

MAX_CHUNK_BYTES = 1 << 30  # a declared uncompressed chunk size beyond this is damage, not data
BLOCK = 1 << 20  # read and decompress in blocks of this size


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
    elif compression == "zstd":
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


def chunk_records(content: bytes) -> list[Any]:
    """Schemas, channels and messages of one chunk; Malformed for any inconsistency."""
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
    while pos < len(data):
        if pos + 9 > len(data):
            raise Malformed("chunk ends inside a record header")
        opcode, length = struct.unpack_from("<BQ", data, pos)
        body = pos + 9
        if body + length > len(data):
            raise Malformed(f"chunk record at {pos} runs past the chunk")
        if opcode == Opcode.MESSAGE:
            out.append(message_record(data, body, length))
        elif opcode == Opcode.SCHEMA:
            out.append(parse_record(Schema, data[body:body + length]))
        elif opcode == Opcode.CHANNEL:
            out.append(parse_record(Channel, data[body:body + length]))
        else:
            raise Malformed(f"record with opcode 0x{opcode:02x} inside a chunk")
        pos = body + length
    return out
