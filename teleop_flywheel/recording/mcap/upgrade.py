"""Bags recorded in an older format of ours, upgraded into a copy in the current one (the bag half
of `teleop-flywheel migrate`). What the older formats were is known here and nowhere else: the
readers only ask `outdated` and, if anything is, refuse the bag naming the command to run.

- schemas: bags recorded before the schema fix name each dependency `MSG: std_msgs/msg/Header`
  while the text refers to `std_msgs/Header`; Foxglove's parser resolves dependencies by exact name
  and decodes no message with a header. The copy writes them as the referring `.msg` file does
  (`MSG: pkg/Type`, what rosbag2 and `recording.msgdefs` write).
- stamps: bags recorded before the ROS-time revision (episode metadata without `stamp_clock: ros`)
  carry header stamps, `publish_time` and intervention/correction times on CLOCK_MONOTONIC. The
  copy puts each of them on ROS time through the episode's (monotonic, wall) samples (linear
  between and beyond them), fills `started/stopped_ros_ns` and sets `stamp_clock: ros`. A time is
  on CLOCK_MONOTONIC when it is nearer the episode's first monotonic sample than its wall reading
  (days apart on any running machine), so a recorder that already stamped ROS time without writing
  `stamp_clock` gets only the marker.

Everything else is copied as it was: message bytes but for those stamps, log times, sequence
numbers, channel metadata, other metadata records. A schema-only upgrade keeps the content ids; a
stamp upgrade changes them (the messages change). A bag cut by a crash is copied as far as it
survived, complete and indexed. The original is never touched and the copy never overwrites.
"""
from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
from mcap.records import Message

from teleop_flywheel.core.bag_topics import INTERVENTION
from teleop_flywheel.core.clock import ClockMapping, mappings
from teleop_flywheel.core.episode import METADATA_RECORD, STAMP_CLOCK_ROS, EpisodeMeta, Intervention
from teleop_flywheel.core.topics import strip_namespace
from teleop_flywheel.recording.mcap import cdr
from teleop_flywheel.recording.mcap.copy import copy_messages
from teleop_flywheel.recording.mcap.exceptions import MigrateError, NotMcapError
from teleop_flywheel.recording.mcap.metadata import find_mcap
from teleop_flywheel.recording.mcap.scan import ScanResult, scan
from teleop_flywheel.recording.mcap.writer import ROSBAG2_RECORD, START_RECORD, BagWriter

_OLD_DEPENDENCY = re.compile(r"^MSG: ([A-Za-z][A-Za-z0-9_]*)/msg/([A-Za-z][A-Za-z0-9_]*)[ \t]*$", re.MULTILINE)
OLD_SCHEMAS = "schema dependencies named `MSG: pkg/msg/Type` (recorded before the schema fix)"
OLD_STAMPS = "header stamps on CLOCK_MONOTONIC (recorded before the ROS-time revision)"
SUFFIX = ".migrated"




def command(path: Path | str) -> str:
    return f"teleop-flywheel migrate {path}"


def fixed_text(text: str) -> str:
    """Schema text with every `MSG: pkg/msg/Type` dependency header written `MSG: pkg/Type`."""
    return _OLD_DEPENDENCY.sub(r"MSG: \1/\2", text)


def _episode_records(records: dict[str, dict[str, str]]) -> list[dict[str, str]]:
    return [r for r in (records.get(METADATA_RECORD), records.get(START_RECORD)) if r]


def outdated(schema_texts: Iterable[bytes], records: dict[str, dict[str, str]]) -> list[str]:
    """What in a bag (its schema texts, its metadata records) is in an older format; [] if nothing."""
    out = []
    if any(_OLD_DEPENDENCY.search(t.decode("utf-8", "replace")) for t in schema_texts):
        out.append(OLD_SCHEMAS)
    if any(r.get("stamp_clock", "") != STAMP_CLOCK_ROS for r in _episode_records(records)):
        out.append(OLD_STAMPS)
    return out


def refusal(path: Path | str, reasons: list[str]) -> str:
    """The one line a reader refuses an outdated bag with."""
    return f"{path}: bag format older than this reader ({'; '.join(reasons)}); run `{command(path)}`"


class _ToRos:
    """CLOCK_MONOTONIC → ROS time through an episode's (monotonic, wall) samples, counting what it moved."""

    def __init__(self, samples: list[ClockMapping]) -> None:
        self.mono = np.array([m.mono_ns for m in samples], dtype=np.float64)
        self.offset = np.array([m.offset_ns for m in samples], dtype=np.float64)
        self.first = samples[0]
        self.moved: dict[str, int] = {}

    def on_monotonic(self, t: int) -> bool:
        return abs(t - self.first.mono_ns) < abs(t - self.first.wall_ns)

    def __call__(self, t: int, what: str) -> int:
        if not self.on_monotonic(t):
            return t
        self.moved[what] = self.moved.get(what, 0) + 1
        if len(self.mono) == 1:
            return t + int(self.offset[0])
        if t < self.mono[0]:
            lo, hi = 0, 1
        elif t > self.mono[-1]:
            lo, hi = len(self.mono) - 2, len(self.mono) - 1
        else:
            return t + round(float(np.interp(t, self.mono, self.offset)))
        slope = (self.offset[hi] - self.offset[lo]) / max(self.mono[hi] - self.mono[lo], 1.0)
        return t + round(self.offset[lo] + (t - self.mono[lo]) * slope)

    def spans(self, spans: list[Intervention], what: str) -> list[Intervention]:
        return [replace(s, start_ns=self(s.start_ns, what), end_ns=None if s.end_ns is None else self(s.end_ns, what))
                for s in spans]

    def episode(self, record: dict[str, str]) -> dict[str, str]:
        ep = EpisodeMeta.from_strings(record)
        ep.interventions = self.spans(ep.interventions, "intervention times")
        ep.corrections = self.spans(ep.corrections, "intervention times")
        ep.started_ros_ns = ep.started_ros_ns or (self(ep.started_mono_ns, "start/stop") if ep.started_mono_ns else 0)
        ep.stopped_ros_ns = ep.stopped_ros_ns or (self(ep.stopped_mono_ns, "start/stop") if ep.stopped_mono_ns else 0)
        ep.stamp_clock = STAMP_CLOCK_ROS
        return ep.to_strings()


def _stamp_rewriter(scanned: ScanResult, to_ros: _ToRos, namespace: str) -> Callable[[str, Message], tuple[bytes, int]]:
    """(bytes, publish_time) of a message with its monotonic times on ROS time."""
    stamped = {ch.topic for ch in scanned.channels.values() if ch.schema_id in scanned.schemas
               and cdr.definition_starts_with_header(scanned.schemas[ch.schema_id].data.decode("utf-8", "replace"))}

    def rewrite(topic: str, m: Message) -> tuple[bytes, int]:
        data = bytes(m.data)
        if topic in stamped:
            stamp = cdr.header_stamp_ns(data)
            moved = to_ros(stamp, "header stamps")
            if moved != stamp:
                data = cdr.with_header_stamp(data, moved)
        elif strip_namespace(topic, namespace) == INTERVENTION:
            event = json.loads(cdr.decode_string(data))
            for key in ("start_ns", "end_ns"):
                if event.get(key) is not None:
                    event[key] = to_ros(int(event[key]), "intervention times")
            data = cdr.string_cdr(json.dumps(event))
        return data, to_ros(m.publish_time, "publish times")

    return rewrite


@dataclass
class BagMigration:
    bag: str
    copy: str | None = None
    messages: int = 0
    changes: list[str] = field(default_factory=list)  # one line per kind of change
    notes: list[str] = field(default_factory=list)


def migrate_bag(bag: Path, output: Path | None = None) -> BagMigration:
    """Write the upgraded copy (default `<bag>.migrated` beside it) and say what changed; no copy if
    the bag is current."""
    bag_dir, mcap_path = find_mcap(bag)
    try:
        scanned = scan(mcap_path)
    except NotMcapError as exc:
        raise MigrateError(str(exc)) from None
    if scanned.malformed:
        raise MigrateError(scanned.malformed)
    report = BagMigration(str(bag_dir))
    reasons = outdated((s.data for s in scanned.schemas.values()), scanned.metadata)
    if not reasons:
        return report
    texts = {sid: s.data.decode("utf-8", "replace") for sid, s in scanned.schemas.items()}
    fixed = sorted(s.name for sid, s in scanned.schemas.items() if fixed_text(texts[sid]) != texts[sid])
    if fixed:
        report.changes.append(f"schemas: {len(fixed)} message definitions given their dependencies as rosbag2 "
                              f"names them (MSG: pkg/Type): {', '.join(fixed)}")
    records = dict(scanned.metadata)
    rewrite = None
    to_ros: _ToRos | None = None
    if OLD_STAMPS in reasons:
        episode = EpisodeMeta.from_strings(_episode_records(records)[0])
        samples = mappings([episode.clock_start, *episode.clock_samples, episode.clock_end])
        if not samples:
            raise MigrateError(f"{mcap_path}: header stamps on CLOCK_MONOTONIC and no monotonic→wall clock "
                               "mapping recorded: they cannot be put on ROS time")
        to_ros = _ToRos(samples)
        for name in (METADATA_RECORD, START_RECORD):
            if records.get(name):
                records[name] = to_ros.episode(records[name])
        rewrite = _stamp_rewriter(scanned, to_ros, episode.namespace)
    dest = Path(output) if output is not None else bag_dir.with_name(bag_dir.name + SUFFIX)
    with BagWriter(dest, custom_data=records.get(METADATA_RECORD), fsync=True) as writer:
        if START_RECORD in records:
            writer.add_metadata(START_RECORD, records[START_RECORD])
        copy_messages(scanned, writer, MigrateError, lambda schema: fixed_text(texts[schema.id]), rewrite)
        for name, record in records.items():
            if name not in (START_RECORD, ROSBAG2_RECORD):
                writer.add_metadata(name, record)
    if to_ros is not None:
        moved = ", ".join(f"{n} {what}" for what, n in sorted(to_ros.moved.items())) or "no time"
        report.changes.append(f"stamps: {moved} moved from CLOCK_MONOTONIC to ROS time through the episode's "
                              f"clock samples (offset {to_ros.first.offset_ns / 1e9:.3f} s at its start); "
                              "stamp_clock: ros (content ids change with the stamps)")
    report.copy, report.messages = str(dest), scanned.message_count
    if not scanned.complete:
        report.notes.append(f"the original has no summary (a crash): copied its {scanned.message_count} surviving "
                            "messages; the copy is complete and indexed")
    return report
