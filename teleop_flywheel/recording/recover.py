"""`teleop-flywheel recover BAG`: rebuild an indexed MCAP and metadata.yaml from a crashed bag.

A recorder killed mid-episode (kill -9, power, full disk) leaves `<name>_0.mcap` without its
summary and index, maybe with half a record at the tail, and no `metadata.yaml`. Foxglove
refuses to seek in such a file and `ros2 bag` will not open the directory. Everything in the
file up to the last complete record is still good: the writer closes a zstd chunk at least
every `max_chunk_age_s`, so at most that much was never written.

What it does, never destroying anything:
1. scans the top-level records (twice: definitions and counts, then the messages, so memory
   stays small); keeps schemas, channels, messages of every complete chunk whose CRC checks;
   stops at the first incomplete record (counts the discarded tail bytes);
2. writes a new, chunked, indexed, summarised `<name>_0.mcap` with the same messages (bytes,
   log/publish times and sequence numbers unchanged) and a fresh `metadata.yaml`;
3. episode metadata: the final `teleop_flywheel.episode` record if it survived, else the
   `.start` record plus `extra.recovered` (what was lost) and `stopped_mono_ns` = the last
   surviving source stamp;
4. in place (default): the damaged file is renamed `<name>_0.mcap.damaged` (and an old
   metadata.yaml `metadata.yaml.damaged`) beside the repaired one; with `--output DIR` the
   repaired bag goes to DIR and the original directory is not touched at all.
A complete file (it has its footer) is not rewritten; only a missing metadata.yaml is added.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import struct
import tempfile
from dataclasses import asdict, dataclass, field
from io import BytesIO
from pathlib import Path
from typing import Any, BinaryIO, Iterator

from mcap.data_stream import ReadDataStream
from mcap.opcode import Opcode
from mcap.records import Channel, Chunk, Message, Metadata, Schema
from mcap.stream_reader import breakup_chunk

from teleop_flywheel.core.episode import METADATA_RECORD, EpisodeMeta
from teleop_flywheel.core.errors import FlywheelError
from teleop_flywheel.recording import msgdefs
from teleop_flywheel.recording.metadata import (
    METADATA_FILE,
    TopicRecord,
    bagfile_information,
    parse_qos_yaml,
    write_metadata_yaml,
)
from teleop_flywheel.recording.writer import START_RECORD, BagWriter, mcap_file_name

MAGIC = b"\x89MCAP0\r\n"
DAMAGED_SUFFIX = ".damaged"


class RecoverError(FlywheelError, RuntimeError):
    """The bag cannot be recovered (not an MCAP bag, nothing readable, …)."""


@dataclass
class ScanResult:
    """What survived in a (possibly damaged) MCAP file; messages are counted, not kept."""

    path: Path
    size: int
    good_bytes: int = 8  # offset after the last complete top-level record
    complete: bool = False  # footer present
    schemas: dict[int, Schema] = field(default_factory=dict)
    channels: dict[int, Channel] = field(default_factory=dict)
    metadata: dict[str, dict[str, str]] = field(default_factory=dict)
    counts: dict[int, int] = field(default_factory=dict)
    start_log_ns: int | None = None
    end_log_ns: int | None = None
    last_stamp_ns: int | None = None
    bad_chunks: int = 0

    @property
    def discarded_bytes(self) -> int:
        return self.size - self.good_bytes

    @property
    def message_count(self) -> int:
        return sum(self.counts.values())


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


def _read_record(f: BinaryIO, pos: int, size: int) -> tuple[int, bytes] | None:
    if pos + 9 > size:
        return None
    f.seek(pos)
    opcode, length = struct.unpack("<BQ", f.read(9))
    if pos + 9 + length > size:
        return None
    return opcode, f.read(length)


def iter_surviving(path: Path, result: ScanResult) -> Iterator[Schema | Channel | Message | Metadata]:
    """Every complete record of an MCAP file in file order (chunks opened), tolerating a
    truncated or corrupt tail; `result` is updated as records go by."""
    with open(path, "rb") as f:
        if f.read(8) != MAGIC:
            raise RecoverError(f"{path}: not an MCAP file (bad magic)")
        pos = 8
        while not result.complete:
            rec = _read_record(f, pos, result.size)
            if rec is None:
                break
            opcode, content = rec
            stream = ReadDataStream(BytesIO(content))
            records: list[Any] = []
            try:
                if opcode == Opcode.CHUNK:
                    try:
                        records = breakup_chunk(Chunk.read(stream), validate_crc=True)
                    except Exception:  # corrupt chunk (bad CRC/zstd frame): lose it, keep going
                        result.bad_chunks += 1
                elif opcode == Opcode.MESSAGE:
                    records = [Message.read(stream, len(content))]
                elif opcode == Opcode.SCHEMA:
                    records = [Schema.read(stream)]
                elif opcode == Opcode.CHANNEL:
                    records = [Channel.read(stream)]
                elif opcode == Opcode.METADATA:
                    records = [Metadata.read(stream)]
                elif opcode == Opcode.FOOTER:
                    result.complete = True
            except (struct.error, ValueError, UnicodeDecodeError, EOFError) as exc:
                raise RecoverError(f"{path}: malformed record at byte {pos}: {exc}") from exc
            pos += 9 + len(content)
            if result.complete and f.read(8) == MAGIC:
                pos += 8
            result.good_bytes = pos
            yield from records


def scan(path: Path) -> ScanResult:
    """Pass one: definitions, metadata, counts and time span of what survived."""
    result = ScanResult(path=path, size=path.stat().st_size)
    for r in iter_surviving(path, result):
        if isinstance(r, Schema):
            result.schemas.setdefault(r.id, r)
        elif isinstance(r, Channel):
            result.channels.setdefault(r.id, r)
        elif isinstance(r, Metadata):
            result.metadata[r.name] = dict(r.metadata)
        else:
            result.counts[r.channel_id] = result.counts.get(r.channel_id, 0) + 1
            result.start_log_ns = r.log_time if result.start_log_ns is None else min(result.start_log_ns, r.log_time)
            result.end_log_ns = r.log_time if result.end_log_ns is None else max(result.end_log_ns, r.log_time)
            result.last_stamp_ns = r.publish_time if result.last_stamp_ns is None else max(
                result.last_stamp_ns, r.publish_time)
    orphans = set(result.counts) - set(result.channels)
    if orphans:
        raise RecoverError(f"{path}: messages on channels {sorted(orphans)} whose definitions were lost")
    return result


def _episode(scanned: ScanResult, notes: list[str]) -> tuple[EpisodeMeta | None, EpisodeMeta | None, str]:
    """(start, final, source) episode metadata for the repaired file."""
    start = scanned.metadata.get(START_RECORD)
    final = scanned.metadata.get(METADATA_RECORD)
    start_meta = EpisodeMeta.from_strings(start) if start else None
    if final:
        return start_meta, EpisodeMeta.from_strings(final), "final"
    if start_meta is None:
        notes.append("no episode metadata survived")
        return None, None, "none"
    final_meta = EpisodeMeta.from_strings(start)
    if scanned.last_stamp_ns is not None:
        final_meta.stopped_mono_ns = scanned.last_stamp_ns
    final_meta.extra["recovered"] = {
        "from": "start record", "discarded_bytes": scanned.discarded_bytes, "bad_chunks": scanned.bad_chunks,
        "note": "recorder died before stopping; messages after the last flushed chunk are lost",
    }
    notes.append("final episode metadata was lost; rebuilt from the start record (outcome as at start)")
    return start_meta, final_meta, "start"


def _topics(scanned: ScanResult) -> list[TopicRecord]:
    counts = scanned.counts
    topics = []
    for cid, ch in sorted(scanned.channels.items()):
        schema = scanned.schemas.get(ch.schema_id)
        topics.append(TopicRecord(
            name=ch.topic, type=schema.name if schema else "",
            type_description_hash=ch.metadata.get("topic_type_hash", ""),
            offered_qos_profiles=parse_qos_yaml(ch.metadata.get("offered_qos_profiles", "")),
            serialization_format=ch.message_encoding, message_count=counts.get(cid, 0)))
    return topics


def _write_repaired(scanned: ScanResult, out_dir: Path, start: EpisodeMeta | None,
                    final: EpisodeMeta | None) -> None:
    """Pass two: stream the surviving messages into a fresh bag (same bytes, times, sequence)."""
    with BagWriter(out_dir, episode=start, fsync=True) as bag:
        names: dict[int, str] = {}
        for cid, ch in sorted(scanned.channels.items()):
            schema = scanned.schemas.get(ch.schema_id)
            if schema is None:
                raise RecoverError(f"{scanned.path}: channel {ch.topic} has no schema record")
            d = msgdefs.MessageDefinition(schema.name, schema.data.decode("utf-8"),
                                          ch.metadata.get("topic_type_hash", ""), schema.encoding)
            bag.add_topic(ch.topic, schema.name, qos=parse_qos_yaml(ch.metadata.get("offered_qos_profiles", "")),
                          serialization_format=ch.message_encoding, definition=d)
            names[cid] = ch.topic
        replay = ScanResult(path=scanned.path, size=scanned.size)
        for r in iter_surviving(scanned.path, replay):
            if isinstance(r, Message):
                bag.write(names[r.channel_id], r.data, r.log_time, r.publish_time, r.sequence)
        bag.episode = final


def _free_name(path: Path) -> Path:
    candidate = path
    n = 1
    while candidate.exists():
        candidate = path.with_name(f"{path.name}.{n}")
        n += 1
    return candidate


def find_mcap(bag: Path) -> tuple[Path, Path]:
    """(bag directory, its mcap file) from a directory or a .mcap path."""
    bag = Path(bag)
    if bag.is_file():
        return bag.parent, bag
    if not bag.is_dir():
        raise RecoverError(f"{bag}: no such bag directory")
    expected = bag / mcap_file_name(bag.name)
    if expected.is_file():
        return bag, expected
    found = sorted(bag.glob("*.mcap"))
    if len(found) != 1:
        raise RecoverError(f"{bag}: expected one .mcap file, found {len(found)}")
    return bag, found[0]


def recover(bag: Path, output: Path | None = None) -> RecoveryReport:
    bag_dir, mcap_path = find_mcap(bag)
    scanned = scan(mcap_path)
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
        _write_repaired(scanned, output, start, final)
        report.bag, report.mcap, report.rewritten = str(output), str(output / mcap_file_name(output.name)), True
        return report
    # In place: build beside (same filesystem), then swap by renames; the damaged file is kept.
    with tempfile.TemporaryDirectory(prefix=f".recover-{bag_dir.name}-", dir=bag_dir.parent) as tmp:
        built = Path(tmp) / bag_dir.name
        _write_repaired(scanned, built, start, final)
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


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("bag", type=Path, help="bag directory (or its .mcap file)")
    parser.add_argument("--output", "-o", type=Path, default=None,
                        help="write the repaired bag to this new directory instead of in place")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


def run(args: argparse.Namespace) -> int:
    try:
        report = recover(args.bag, args.output)
    except (RecoverError, OSError) as exc:
        print(f"recover: {exc}")
        return 1
    if args.json:
        print(json.dumps(asdict(report), indent=2))
        return 0
    span = ""
    if report.start_log_ns is not None and report.end_log_ns is not None:
        span = f" spanning {(report.end_log_ns - report.start_log_ns) / 1e9:.3f} s"
    if not report.rewritten:
        print(f"{report.bag}: complete bag, {report.messages} messages{span}; not rewritten")
        for note in report.notes:
            print(f"note: {note}")
        return 0
    print(f"{report.bag}: {report.messages} messages recovered{span}")
    for topic, count in report.topic_counts.items():
        print(f"  {topic}: {count}")
    print(f"lost: {report.discarded_bytes} trailing bytes (incomplete record), {report.bad_chunks} corrupt chunks;"
          " anything the recorder had not yet flushed (≤ max_chunk_age_s) was never on disk")
    print(f"repaired file: {report.mcap}")
    if report.damaged:
        print(f"damaged original kept as: {report.damaged}")
    for note in report.notes:
        print(f"note: {note}")
    return 0
