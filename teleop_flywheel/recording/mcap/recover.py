"""`teleop-flywheel recover BAG`: rebuild an indexed MCAP and metadata.yaml from a crashed bag.

A recorder killed mid-episode (kill -9, power, full disk) leaves `<name>_0.mcap` without its
summary and index, maybe with half a record at the tail, and no `metadata.yaml`. Foxglove
refuses to seek in such a file and `ros2 bag` will not open the directory. Everything in the
file up to the last complete record is still good: the writer closes a zstd chunk at least
every `max_chunk_age_s`, so at most that much was never written.

What it does, never destroying anything:
1. scans the top-level records once with `recording.scan`: keeps schemas, channels, messages of
   every complete chunk that decompresses to its declared size and matches its CRC; stops at the
   first incomplete record (counts the discarded tail bytes); remembers where each kept record is;
2. writes a new `<name>_0.mcap`: the header, every kept chunk and its message-index records and
   the metadata records copied verbatim (no recompression: an hour-long bag is copied, not
   rewritten, and each chunk keeps the CRC it was written with), the final episode and `rosbag2`
   metadata records, then a summary (schemas, channels, statistics, chunk and metadata indexes)
   and footer built from what was scanned, fsync'd once; and a fresh `metadata.yaml`. A chunk
   whose message indexes were cut off gets them rebuilt from its records. A file holding messages
   outside chunks is rewritten message by message instead (same bytes, times and sequence numbers);
3. episode metadata: the final `teleop_flywheel.episode` record if it survived, else the
   `.start` record plus `extra.recovered` (what was lost) and the stop = the last surviving
   publish_time (`stopped_ros_ns`, and `stopped_mono_ns` through the start's clock sample);
4. in place (default): the damaged file is renamed `<name>_0.mcap.damaged` (and an old
   metadata.yaml `metadata.yaml.damaged`) beside the repaired one; with `--output DIR` the
   repaired bag goes to DIR and the original directory is not touched at all.
A complete file (it has its footer) is not rewritten; only a missing metadata.yaml is added.
A bag in an older format of ours is refused, naming `teleop-flywheel migrate`, which copies what
survived of a crashed one too (`recording/mcap/upgrade.py`).
"""
from __future__ import annotations

import errno
import os
import shutil
import struct
import tempfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from mcap.data_stream import RecordBuilder
from mcap.opcode import Opcode
from mcap.records import (
    ChunkIndex,
    DataEnd,
    Footer,
    Header,
    Message,
    MessageIndex,
    Metadata,
    MetadataIndex,
    Statistics,
    SummaryOffset,
)

from teleop_flywheel.core.clock import ClockMapping
from teleop_flywheel.core.episode import METADATA_RECORD, EpisodeMeta
from teleop_flywheel.recording.mcap.copy import copy_messages
from teleop_flywheel.recording.mcap.exceptions import BagExistsError, NotMcapError, RecoverError
from teleop_flywheel.recording.mcap.metadata import (
    METADATA_FILE,
    TopicRecord,
    bagfile_information,
    dump_yaml,
    find_mcap,
    mcap_file_name,
    parse_qos_yaml,
    ros_distro,
    write_metadata_yaml,
)
from teleop_flywheel.recording.mcap.scan import MAGIC, ChunkMessages, ScanResult, decompress, open_regular, scan
from teleop_flywheel.recording.mcap.upgrade import outdated, refusal
from teleop_flywheel.recording.mcap.writer import LIBRARY, PROFILE, ROSBAG2_RECORD, START_RECORD, BagWriter

DAMAGED_SUFFIX = ".damaged"


@dataclass
class RecoveryReport:
    bag: str
    mcap: str
    damaged: str | None
    rewritten: bool
    messages: int
    topic_counts: dict[str, int]
    discarded_bytes: int
    bad_chunks: int
    start_log_ns: int | None
    end_log_ns: int | None
    episode_source: str  # "final" | "start" | "none"
    notes: list[str] = field(default_factory=list)


@dataclass
class _Chunk:
    """A kept chunk record of the damaged file and the message-index records that followed it."""

    pos: int
    length: int  # with the 9-byte record prefix
    head: bytes  # the chunk's fields before its records (times, sizes, CRC, compression)
    counts: dict[int, int]  # messages per channel inside the chunk
    indexes: dict[int, tuple[int, int]] = field(default_factory=dict)  # channel -> (pos, length) of its index
    index_counts: dict[int, int] = field(default_factory=dict)

    @property
    def indexed(self) -> bool:
        """Its message indexes survived whole: one per channel, each naming every message."""
        return {c: n for c, n in self.index_counts.items() if n} == self.counts


@dataclass
class _Layout:
    """Where the records to copy are in the damaged file, in file order (`on_record` of the scan)."""

    header: tuple[int, int] | None = None
    records: list[_Chunk | tuple[int, int, str | None]] = field(default_factory=list)  # chunks; (pos, length,
    # metadata name or None for a schema/channel record)
    unchunked: bool = False  # messages outside chunks: the verbatim copy cannot index them
    ended: bool = False  # the data section's end was read: what follows is the old summary

    def take(self, pos: int, opcode: int, content: bytes, held: list[Any]) -> None:
        if self.ended:
            return
        span = (pos, 9 + len(content))
        last = self.records[-1] if self.records else None
        if opcode == Opcode.MESSAGE_INDEX and isinstance(last, _Chunk) and len(content) >= 6:
            channel_id, length = struct.unpack_from("<HI", content)
            if channel_id not in last.indexes and 6 + length == len(content) and length % 16 == 0:
                last.indexes[channel_id] = span
                last.index_counts[channel_id] = length // 16
            return
        if opcode == Opcode.HEADER and self.header is None:
            self.header = span
        elif opcode == Opcode.CHUNK:
            counts: dict[int, int] = {}
            for rec in held:
                if isinstance(rec, Message):
                    counts[rec.channel_id] = counts.get(rec.channel_id, 0) + 1
                elif isinstance(rec, ChunkMessages):
                    for cid, n in rec.counts.items():
                        counts[cid] = counts.get(cid, 0) + n
            (clen,) = struct.unpack_from("<I", content, 28)
            self.records.append(_Chunk(pos, span[1], content[:40 + clen], counts))
        elif opcode == Opcode.MESSAGE:
            self.unchunked = True
        elif opcode in (Opcode.SCHEMA, Opcode.CHANNEL):
            self.records.append((*span, None))
        elif opcode == Opcode.METADATA:
            self.records.append((*span, held[0].name))
        elif opcode == Opcode.DATA_END:
            self.ended = True


def _scan(mcap_path: Path, layout: _Layout | None = None) -> ScanResult:
    """Definitions, metadata, counts and time span of what survived (and where, into `layout`)."""
    try:
        scanned = scan(mcap_path, on_record=layout.take if layout is not None else None)
    except NotMcapError as exc:
        error = RecoverError(str(exc))
        error.fix = "it holds no recording to recover: give a bag directory or its .mcap file"
        raise error from None
    if scanned.malformed:
        raise RecoverError(scanned.malformed)
    if scanned.orphans:
        raise RecoverError(f"{mcap_path}: messages on channels {scanned.orphans} whose definitions were lost")
    reasons = outdated((s.data for s in scanned.schemas.values()), scanned.metadata)
    if reasons:
        raise RecoverError(refusal(mcap_path, reasons))
    return scanned


def _episode(scanned: ScanResult, notes: list[str]) -> tuple[EpisodeMeta | None, EpisodeMeta | None, str]:
    """(start, final, source) episode metadata for the repaired file."""
    start = scanned.metadata.get(START_RECORD)
    final = scanned.metadata.get(METADATA_RECORD)
    start_meta = EpisodeMeta.from_strings(start) if start else None
    if final:
        return start_meta, EpisodeMeta.from_strings(final), "final"
    if start is None:
        notes.append("no episode metadata survived")
        return None, None, "none"
    final_meta = EpisodeMeta.from_strings(start)  # a second copy, completed below
    if scanned.last_stamp_ns is not None and final_meta.clock_start:
        # publish_time is the DDS send time (wall clock): the stop in ROS time, and on CLOCK_MONOTONIC
        final_meta.stopped_ros_ns = scanned.last_stamp_ns
        final_meta.stopped_mono_ns = scanned.last_stamp_ns - ClockMapping.from_dict(final_meta.clock_start).offset_ns
    final_meta.extra["recovered"] = {
        "from": "start record", "discarded_bytes": scanned.discarded_bytes, "bad_chunks": scanned.bad_chunks,
        "note": "recorder died before stopping; messages after the last flushed chunk are lost",
    }
    notes.append("final episode metadata was lost; rebuilt from the start record (outcome as at start)")
    return start_meta, final_meta, "start"


def _topics(scanned: ScanResult) -> list[TopicRecord]:
    counts = scanned.counts
    topics = []
    for cid, ch in sorted(scanned.raw_channels.items()):
        topics.append(TopicRecord(
            name=ch.topic, type=ch.schema_name,
            type_description_hash=ch.metadata.get("topic_type_hash", ""),
            offered_qos_profiles=parse_qos_yaml(ch.metadata.get("offered_qos_profiles", "")),
            serialization_format=ch.message_encoding, message_count=counts.get(cid, 0)))
    return topics


def _write_repaired(scanned: ScanResult, layout: _Layout, out_dir: Path, start: EpisodeMeta | None,
                    final: EpisodeMeta | None, topics: list[TopicRecord]) -> None:
    if layout.unchunked:  # messages outside chunks: rewrite them into indexed chunks
        with BagWriter(out_dir, episode=start, fsync=True) as bag:
            copy_messages(scanned, bag, RecoverError)
            bag.episode = final
        return
    try:
        out_dir.mkdir()
    except FileExistsError:
        raise BagExistsError(errno.EEXIST, f"bag already exists, refusing to overwrite: {out_dir}",
                             str(out_dir)) from None
    custom = final.to_strings() if final is not None else None
    info = bagfile_information(mcap_file_name(out_dir.name), topics, scanned.start_log_ns, scanned.end_log_ns,
                               custom, ros_distro())
    try:
        with open_regular(scanned.path) as src, open(out_dir / mcap_file_name(out_dir.name), "xb") as dst:
            _Copy(src, dst).run(scanned, layout, custom, info)
            dst.flush()
            os.fsync(dst.fileno())
        write_metadata_yaml(out_dir, info)
    except BaseException:
        shutil.rmtree(out_dir)  # created above, exclusively: no half-repaired bag is left
        raise


class _Copy:
    """Writes the repaired MCAP: kept records verbatim, then a summary built from the scan."""

    def __init__(self, src: BinaryIO, dst: BinaryIO) -> None:
        self.src, self.dst = src, dst
        self.crc = 0  # of the data section, for DataEnd
        self.pos = 0
        self.metadata: list[MetadataIndex] = []
        self.chunks: list[ChunkIndex] = []

    def emit(self, data: bytes) -> int:
        at = self.pos
        self.dst.write(data)
        self.crc = zlib.crc32(data, self.crc)
        self.pos += len(data)
        return at

    def copy(self, span: tuple[int, int]) -> int:
        self.src.seek(span[0])
        data = self.src.read(span[1])
        if len(data) != span[1]:
            raise RecoverError(f"{self.src.name}: changed while being recovered (short read at byte {span[0]})")
        return self.emit(data)

    def record(self, rec: Any) -> int:
        builder = RecordBuilder()
        rec.write(builder)
        return self.emit(builder.end())

    def chunk(self, chunk: _Chunk) -> None:
        start, end, size, _crc, clen = struct.unpack_from("<QQQII", chunk.head)
        (compressed,) = struct.unpack_from("<Q", chunk.head, 32 + clen)
        at = self.copy((chunk.pos, chunk.length))
        offsets: dict[int, int] = {}
        if chunk.indexed:
            for cid, span in chunk.indexes.items():  # in the order they were written
                offsets[cid] = self.copy(span)
        else:  # cut off after the chunk: rebuild its indexes from its records
            for cid, entries in sorted(_message_indexes(self.src, chunk).items()):
                offsets[cid] = self.record(MessageIndex(cid, entries))
        self.chunks.append(ChunkIndex(
            message_start_time=start, message_end_time=end, chunk_start_offset=at, chunk_length=chunk.length,
            message_index_offsets=offsets, message_index_length=self.pos - at - chunk.length,
            compression=chunk.head[32:32 + clen].decode("utf-8"), compressed_size=compressed, uncompressed_size=size))

    def metadata_record(self, name: str, data: bytes | None = None, span: tuple[int, int] | None = None) -> None:
        at = self.copy(span) if span is not None else self.emit(data or b"")
        self.metadata.append(MetadataIndex(offset=at, length=self.pos - at, name=name))

    def run(self, scanned: ScanResult, layout: _Layout, custom: dict[str, str] | None,
            info: dict[str, Any]) -> None:
        self.emit(MAGIC)
        if layout.header is not None:
            self.copy(layout.header)
        else:
            self.record(Header(profile=PROFILE, library=LIBRARY))
        for item in layout.records:
            if isinstance(item, _Chunk):
                self.chunk(item)
            elif item[2] is None:
                self.copy(item[:2])
            elif item[2] not in (METADATA_RECORD, ROSBAG2_RECORD):  # those two are written afresh below
                self.metadata_record(item[2], span=item[:2])
        for name, strings in ((METADATA_RECORD, custom), (ROSBAG2_RECORD, {"serialized_metadata": dump_yaml(info)})):
            if strings:
                builder = RecordBuilder()
                Metadata(name=name, metadata=strings).write(builder)
                self.metadata_record(name, data=builder.end())
        self.record(DataEnd(data_section_crc=self.crc))
        self.summary(scanned)

    def summary(self, scanned: ScanResult) -> None:
        start = self.pos
        builder = RecordBuilder()
        groups: list[SummaryOffset] = []

        def group(opcode: Opcode, records: list[Any]) -> None:
            at = builder.count
            for rec in records:
                rec.write(builder)
            if records:
                groups.append(SummaryOffset(group_opcode=opcode, group_start=start + at,
                                            group_length=builder.count - at))

        counts = {cid: n for cid, n in sorted(scanned.counts.items()) if n}
        group(Opcode.SCHEMA, [scanned.schemas[k] for k in sorted(scanned.schemas)])
        group(Opcode.CHANNEL, [scanned.channels[k] for k in sorted(scanned.channels)])
        group(Opcode.STATISTICS, [Statistics(
            message_count=scanned.message_count, schema_count=len(scanned.schemas),
            channel_count=len(scanned.channels), attachment_count=0, metadata_count=len(self.metadata),
            chunk_count=len(self.chunks), message_start_time=scanned.start_log_ns or 0,
            message_end_time=scanned.end_log_ns or 0, channel_message_counts=counts)])
        group(Opcode.CHUNK_INDEX, self.chunks)
        group(Opcode.METADATA_INDEX, self.metadata)
        offsets_at = start + builder.count
        for g in groups:
            g.write(builder)
        summary = builder.end()
        crc = zlib.crc32(struct.pack("<BQQQ", Opcode.FOOTER, 20, start, offsets_at), zlib.crc32(summary))
        self.emit(summary)
        self.record(Footer(summary_start=start, summary_offset_start=offsets_at, summary_crc=crc))
        self.emit(MAGIC)


def _message_indexes(src: BinaryIO, chunk: _Chunk) -> dict[int, list[tuple[int, int]]]:
    """(log_time, offset in the uncompressed records) of each message of `chunk`, by channel."""
    src.seek(chunk.pos + 9)
    content = src.read(chunk.length - 9)
    _s, _e, size, _crc, clen = struct.unpack_from("<QQQII", content)
    data = decompress(content[32:32 + clen].decode("utf-8"), content[40 + clen:], size)  # it decompressed in the scan
    out: dict[int, list[tuple[int, int]]] = {}
    pos = 0
    while pos + 9 <= len(data):
        opcode, length = struct.unpack_from("<BQ", data, pos)
        if opcode == Opcode.MESSAGE:
            channel_id, _seq, log_time = struct.unpack_from("<HIQ", data, pos + 9)
            out.setdefault(channel_id, []).append((log_time, pos))
        pos += 9 + length
    return out


def _free_name(path: Path) -> Path:
    candidate = path
    n = 1
    while candidate.exists():
        candidate = path.with_name(f"{path.name}.{n}")
        n += 1
    return candidate


def recover(bag: Path, output: Path | None = None) -> RecoveryReport:
    bag_dir, mcap_path = find_mcap(bag)
    layout = _Layout()
    scanned = _scan(mcap_path, layout)
    notes: list[str] = []
    start, final, source = _episode(scanned, notes)
    topics = _topics(scanned)
    span = (scanned.start_log_ns, scanned.end_log_ns)
    report = RecoveryReport(
        bag=str(bag_dir), mcap=str(mcap_path), damaged=None, rewritten=False,
        messages=scanned.message_count, topic_counts={t.name: t.message_count for t in topics},
        discarded_bytes=scanned.discarded_bytes, bad_chunks=scanned.bad_chunks,
        start_log_ns=span[0], end_log_ns=span[1], episode_source=source, notes=notes)
    if scanned.complete and output is None:
        if (bag_dir / METADATA_FILE).exists():
            notes.append("bag is complete (summary present, metadata.yaml present): nothing to do")
        else:
            custom = final.to_strings() if final else None
            write_metadata_yaml(bag_dir, bagfile_information(mcap_path.name, topics, span[0], span[1], custom))
            notes.append("MCAP was complete; wrote the missing metadata.yaml")
        return report
    if output is not None:
        output = Path(output)
        output.parent.mkdir(parents=True, exist_ok=True)
        _write_repaired(scanned, layout, output, start, final, topics)
        report.bag, report.mcap, report.rewritten = str(output), str(output / mcap_file_name(output.name)), True
        return report
    # In place: build beside (same filesystem), then swap by renames; the damaged file is kept.
    with tempfile.TemporaryDirectory(prefix=f".recover-{bag_dir.name}-", dir=bag_dir.parent) as tmp:
        built = Path(tmp) / bag_dir.name
        _write_repaired(scanned, layout, built, start, final, topics)
        damaged = _free_name(mcap_path.with_name(mcap_path.name + DAMAGED_SUFFIX))
        os.rename(mcap_path, damaged)
        old_meta = bag_dir / METADATA_FILE
        if old_meta.exists():
            os.rename(old_meta, _free_name(old_meta.with_name(METADATA_FILE + DAMAGED_SUFFIX)))
        target = bag_dir / mcap_file_name(bag_dir.name)  # free: it was the damaged file, now renamed
        os.rename(built / target.name, target)
        shutil.move(str(built / METADATA_FILE), str(bag_dir / METADATA_FILE))
    report.damaged, report.mcap, report.rewritten = str(damaged), str(target), True
    return report

