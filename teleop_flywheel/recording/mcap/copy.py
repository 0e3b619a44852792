"""Copy what survives in a bag into a new one: the shared pass of `recover` (byte for byte: same
message bytes, log/publish times and sequence numbers) and `migrate` (which rewrites what it upgrades)."""
from __future__ import annotations

from collections.abc import Callable

from mcap.records import Message, Schema

from teleop_flywheel.core.errors import FlywheelError
from teleop_flywheel.recording.mcap import msgdefs
from teleop_flywheel.recording.mcap.metadata import parse_qos_yaml
from teleop_flywheel.recording.mcap.scan import ScanResult, scan
from teleop_flywheel.recording.mcap.writer import BagWriter


def copy_messages(scanned: ScanResult, writer: BagWriter, error: type[FlywheelError],
                  schema_text: Callable[[Schema], str] = lambda s: s.data.decode("utf-8"),
                  message: Callable[[str, Message], tuple[bytes, int]] | None = None) -> None:
    """Every channel of `scanned` as a topic of `writer` (its schema text through `schema_text`),
    then every surviving message (its bytes and publish time through `message(topic, m)`, given);
    a channel without a schema record is `error`, naming the file."""
    names: dict[int, str] = {}
    for cid, ch in sorted(scanned.channels.items()):
        schema = scanned.schemas.get(ch.schema_id)
        if schema is None:
            raise error(f"{scanned.path}: channel {ch.topic} has no schema record")
        definition = msgdefs.MessageDefinition(schema.name, schema_text(schema),
                                               ch.metadata.get("topic_type_hash", ""), schema.encoding)
        writer.add_topic(ch.topic, schema.name, qos=parse_qos_yaml(ch.metadata.get("offered_qos_profiles", "")),
                         serialization_format=ch.message_encoding, definition=definition)
        names[cid] = ch.topic

    def copy(m: Message) -> None:
        topic = names[m.channel_id]
        data, publish = (m.data, m.publish_time) if message is None else message(topic, m)
        writer.write(topic, data, m.log_time, publish, m.sequence)

    scan(scanned.path, copy)
