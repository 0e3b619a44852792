"""Seekable access to one complete bag through its MCAP summary and index (no ROS import), the
errors of opening a bag, and its episode metadata read from the MCAP (never trusting
metadata.yaml over it).

    idx = open_indexed("/data/ep_0001")      # seekable, streaming, nothing decoded (replay, info)
    idx.channels                             # {channel id: RawChannel(topic, schema name/encoding/data, ...)}
    idx.start_ns, idx.end_ns, idx.message_count, idx.metadata()
    for m in idx.messages(start_ns):         # RawMessage(channel_id, log_time, publish_time, data)
        ...                                  # in log-time order, read through the MCAP index
    meta = read_episode("/data/ep_0001")     # EpisodeMeta from the MCAP record; BagReadError if
                                             # metadata.yaml custom_data disagrees with it

A bag in an older format of ours is refused (`OutdatedBagError`, one line naming `teleop-flywheel
migrate`, which writes it upgraded; `recording.migrate`). `recording.reader` re-exports all of it.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from mcap.exceptions import McapError
from mcap.reader import make_reader
from mcap.records import Channel, Schema

from teleop_flywheel.core.episode import METADATA_RECORD, EpisodeMeta
from teleop_flywheel.core.errors import FlywheelError
from teleop_flywheel.recording.mcap import integrity
from teleop_flywheel.recording.mcap import upgrade as migrate
from teleop_flywheel.recording.mcap.metadata import BagNotFoundError, find_mcap, read_metadata_yaml
from teleop_flywheel.recording.mcap.scan import NotMcapError, open_regular, scan
from teleop_flywheel.recording.mcap.writer import START_RECORD


class BagReadError(FlywheelError, RuntimeError):
    """The bag cannot be read at all (missing, not MCAP, no definitions); names the path."""

    fix = 'a crashed or damaged bag: teleop-flywheel recover BAG'


class NotABagError(BagReadError):
    """No bag at that path: missing, no .mcap in the directory, or a FIFO/device instead of a file."""

    fix = "check the path: a bag is a directory holding metadata.yaml and one .mcap file"


class OutdatedBagError(BagReadError):
    """A bag in an older format of ours (`recording.migrate.outdated`): `migrate` writes it upgraded."""

    fix = "migrate writes an upgraded copy beside it; the original is kept"


def refuse_outdated(path: Path, schema_texts: Iterable[bytes], records: dict[str, dict[str, str]]) -> None:
    """OutdatedBagError naming `teleop-flywheel migrate` if anything in the bag is in an older format."""
    reasons = migrate.outdated(schema_texts, records)
    if reasons:
        raise OutdatedBagError(migrate.refusal(path, reasons))


class UnindexedBagError(BagReadError):
    """The MCAP has no summary/index (a crashed recording): `recover` it before seeking in it."""


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


@dataclass(frozen=True)
class RawMessage:
    channel_id: int
    log_time: int
    publish_time: int
    data: bytes
    sequence: int = 0


def find_bag(path: Path) -> tuple[Path, Path]:
    try:
        return find_mcap(path)
    except BagNotFoundError as exc:
        raise NotABagError(str(exc)) from None


class IndexedBag:
    """Seekable access to one complete bag through its MCAP summary and index: channels, time
    span, metadata records and raw messages in log-time order; nothing is decoded."""

    def __init__(self, path: str | Path) -> None:
        self.bag_dir, self.path = find_bag(Path(path))
        try:
            with open_regular(self.path) as f:
                reader = make_reader(f)
                summary = reader.get_summary()
                self.chunk_indexed = bool(summary and summary.chunk_indexes)
        except (McapError, OSError, ValueError, EOFError, NotMcapError) as exc:
            raise BagReadError(f"{self.path}: cannot read MCAP summary ({exc}); try `teleop-flywheel recover`") from exc
        if summary is None or summary.statistics is None:
            raise UnindexedBagError(f"{self.path}: MCAP has no summary/index (crashed recording?); "
                                    "run `teleop-flywheel recover` first")
        self.channels = {cid: RawChannel.of(ch, summary.schemas.get(ch.schema_id))
                         for cid, ch in summary.channels.items()}
        self.start_ns = summary.statistics.message_start_time
        self.end_ns = summary.statistics.message_end_time
        self.message_count = summary.statistics.message_count
        refuse_outdated(self.bag_dir, (c.schema_data for c in self.channels.values()), self.metadata())

    def messages(self, start_ns: int | None = None) -> Iterator[RawMessage]:
        """Messages with log_time >= start_ns, in log-time order, read through the index."""
        with self.path.open("rb") as f:
            for _schema, channel, message in make_reader(f).iter_messages(starting_at=start_ns, log_time_order=True):
                yield RawMessage(channel.id, message.log_time, message.publish_time, message.data, message.sequence)

    def metadata(self) -> dict[str, dict[str, str]]:
        """The MCAP metadata records by name (episode metadata, rosbag2's own)."""
        with self.path.open("rb") as f:
            return {r.name: dict(r.metadata) for r in make_reader(f).iter_metadata()}


def open_indexed(path: str | Path) -> IndexedBag:
    """`IndexedBag` of a bag directory or .mcap; BagReadError (UnindexedBagError without a summary)."""
    return IndexedBag(path)


def read_episode(path: str | Path) -> EpisodeMeta | None:
    """A bag's episode metadata from its MCAP record (the final one, else the start record), read
    through the summary's metadata index (a whole-file scan for a bag without one). metadata.yaml is
    only compared: if its custom_data disagrees with the MCAP, BagReadError says so (a flipped byte
    in one of them), so a report never counts what the bag does not say. None: no record (a foreign
    rosbag2 bag)."""
    bag_dir, mcap_path = find_bag(Path(path))
    try:
        records = IndexedBag(mcap_path).metadata()
    except UnindexedBagError:
        try:
            records = scan(mcap_path).metadata
        except NotMcapError as exc:
            raise BagReadError(str(exc)) from None
    except (McapError, OSError, ValueError, EOFError) as exc:
        raise BagReadError(f"{mcap_path}: cannot read its metadata records: {exc}") from None
    refuse_outdated(bag_dir, (), records)
    record = records.get(METADATA_RECORD) or records.get(START_RECORD)
    try:
        meta_yaml = read_metadata_yaml(bag_dir) if Path(path).is_dir() else None
    except (OSError, ValueError):
        meta_yaml = None
    disagree = integrity.metadata_disagreement(records.get(METADATA_RECORD), meta_yaml)
    if disagree:
        raise BagReadError(f"{mcap_path}: {disagree}; not trusting either (run `teleop-flywheel validate`)")
    if not record:
        return None
    try:
        return EpisodeMeta.from_strings(record)
    except (ValueError, TypeError, AttributeError, KeyError) as exc:
        raise BagReadError(f"{mcap_path}: episode metadata unreadable: {exc}") from None
