"""`teleop-flywheel recover --fix-schemas BAG`: a Foxglove-readable copy of a bag recorded before the
schema fix, written next to it; the original is never touched.

Bags recorded before commit 2adad37 name each schema dependency `MSG: std_msgs/msg/Header`, while the
text refers to `std_msgs/Header`. `mcap_ros2` and `rosbags` accept that, but Foxglove's parser
(`@foxglove/rosmsg`) resolves dependencies by the exact name and cannot decode a single message
with a header. The copy rewrites every dependency line to the form the referring `.msg` file
writes (`MSG: pkg/Type`, what rosbag2 and `recording.msgdefs` write) and keeps everything else:
the messages (bytes, log/publish times, sequence numbers), channel metadata, and the episode
metadata records verbatim, so the copy has the same content ids as the original. A bag whose
schemas are already in that form is not copied. A bag cut by a crash is copied as far as it
survived (the copy is then also recovered).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from teleop_flywheel.core.episode import METADATA_RECORD
from teleop_flywheel.core.errors import FlywheelError
from teleop_flywheel.recording.mcap.copy import copy_messages
from teleop_flywheel.recording.mcap.metadata import find_mcap
from teleop_flywheel.recording.mcap.scan import NotMcapError, scan
from teleop_flywheel.recording.mcap.writer import ROSBAG2_RECORD, START_RECORD, BagWriter

_OLD_DEPENDENCY = re.compile(r"^MSG: ([A-Za-z][A-Za-z0-9_]*)/msg/([A-Za-z][A-Za-z0-9_]*)[ \t]*$", re.MULTILINE)
SUFFIX = "_foxglove"


class FixSchemasError(FlywheelError, RuntimeError):
    """The bag cannot be copied (not MCAP, damaged beyond its last complete record, target exists)."""


def fixed_text(text: str) -> str:
    """Schema text with every `MSG: pkg/msg/Type` dependency header written `MSG: pkg/Type`."""
    return _OLD_DEPENDENCY.sub(r"MSG: \1/\2", text)


@dataclass
class FixReport:
    bag: str
    copy: str | None
    schemas_fixed: list[str] = field(default_factory=list)
    messages: int = 0
    notes: list[str] = field(default_factory=list)


def fix_schemas(bag: Path, output: Path | None = None) -> FixReport:
    """Write the copy (default `<bag>_foxglove` beside the bag; never overwritten) and say what changed."""
    bag_dir, mcap_path = find_mcap(bag)
    try:
        scanned = scan(mcap_path)
    except NotMcapError as exc:
        raise FixSchemasError(str(exc)) from None
    if scanned.malformed:
        raise FixSchemasError(scanned.malformed)
    report = FixReport(str(bag_dir), None)
    texts = {sid: s.data.decode("utf-8", "replace") for sid, s in scanned.schemas.items()}
    report.schemas_fixed = sorted(s.name for sid, s in scanned.schemas.items() if fixed_text(texts[sid]) != texts[sid])
    if not report.schemas_fixed:
        report.notes.append("every schema already names its dependencies as rosbag2 does: nothing to fix, no copy")
        return report
    dest = Path(output) if output is not None else bag_dir.with_name(bag_dir.name + SUFFIX)
    custom = scanned.metadata.get(METADATA_RECORD)
    with BagWriter(dest, custom_data=custom, fsync=True) as writer:
        if START_RECORD in scanned.metadata:
            writer.add_metadata(START_RECORD, scanned.metadata[START_RECORD])
        copy_messages(scanned, writer, FixSchemasError, lambda schema: fixed_text(texts[schema.id]))
        for name, record in scanned.metadata.items():
            if name not in (START_RECORD, ROSBAG2_RECORD):
                writer.add_metadata(name, record)
    report.copy, report.messages = str(dest), scanned.message_count
    if not scanned.complete:
        report.notes.append(f"the original has no summary (a crash): copied its {scanned.message_count} surviving "
                            "messages; the copy is complete and indexed")
    return report
