"""`teleop-flywheel recover BAG`: rebuild an indexed MCAP and metadata.yaml from a crashed bag.

A recorder killed mid-episode (kill -9, power, full disk) leaves `<name>_0.mcap` without its
summary and index, maybe with half a record at the tail, and no `metadata.yaml`. Foxglove
refuses to seek in such a file and `ros2 bag` will not open the directory. Everything in the
file up to the last complete record is still good: the writer closes a zstd chunk at least
every `max_chunk_age_s`, so at most that much was never written.

What it does, never destroying anything:
1. scans the top-level records with `recording.scan` (twice: definitions and counts, then the
   messages, so memory stays small); keeps schemas, channels, messages of every complete chunk
   whose CRC checks; stops at the first incomplete record (counts the discarded tail bytes);
2. writes a new, chunked, indexed, summarised `<name>_0.mcap` with the same messages (bytes,
   log/publish times and sequence numbers unchanged) and a fresh `metadata.yaml`;
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

import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from teleop_flywheel.core.clock import ClockMapping
from teleop_flywheel.core.episode import METADATA_RECORD, EpisodeMeta
from teleop_flywheel.recording.mcap.copy import copy_messages
from teleop_flywheel.recording.mcap.exceptions import NotMcapError, RecoverError
from teleop_flywheel.recording.mcap.metadata import (
    METADATA_FILE,
    TopicRecord,
    bagfile_information,
    find_mcap,
    mcap_file_name,
    parse_qos_yaml,
    write_metadata_yaml,
)
from teleop_flywheel.recording.mcap.scan import ScanResult, scan
from teleop_flywheel.recording.mcap.upgrade import outdated, refusal
from teleop_flywheel.recording.mcap.writer import START_RECORD, BagWriter

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


def _scan(mcap_path: Path) -> ScanResult:
    """Pass one: definitions, metadata, counts and time span of what survived."""
    try:
        scanned = scan(mcap_path)
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


def _write_repaired(scanned: ScanResult, out_dir: Path, start: EpisodeMeta | None,
                    final: EpisodeMeta | None) -> None:
    """Pass two: stream the surviving messages into a fresh bag (same bytes, times, sequence)."""
    with BagWriter(out_dir, episode=start, fsync=True) as bag:
        copy_messages(scanned, bag, RecoverError)
        bag.episode = final


def _free_name(path: Path) -> Path:
    candidate = path
    n = 1
    while candidate.exists():
        candidate = path.with_name(f"{path.name}.{n}")
        n += 1
    return candidate


def recover(bag: Path, output: Path | None = None) -> RecoveryReport:
    bag_dir, mcap_path = find_mcap(bag)
    scanned = _scan(mcap_path)
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

