"""The one reader of our bags (no ROS): metadata, damage, numpy streams, and raw messages for replay.

Stable API (policy replay, the data engine, evaluation and `replay` use it)::

    from teleop_flywheel.recording.mcap.reader import open_bag, BagDamage
    bag = open_bag("/data/ep_0001")          # a rosbag2 bag directory, or a bare .mcap
    bag.episode                              # EpisodeMeta | None (final record, else the start record)
    bag.metadata_yaml                        # dict | None (rosbag2_bagfile_information)
    bag.topics                               # {topic: type name}
    bag.damage                               # [BagDamage(code="TRUNCATED"|"CORRUPT"|"UNSAFE_NAME", file, detail)]
    bag.episode_id                           # content id v2: messages + episode metadata (`episode_id_for`)
    bag.episode_id_v1                        # content id v1: the messages only (`content_id`)
    raw = bag.raw("/follower/joint_states")  # RawTopic(log_ns, publish_ns, sequence, data: list[bytes])
    bag.stamps("/follower/joint_states")     # header.stamp of every message, read from the CDR
    js = bag.joint_state("/follower/joint_states")  # JointStream: stamps_ns, names, position (N,J), ...
    imgs = bag.images("/cameras/wrist/image/compressed")  # ImageStream: stamps_ns, log_ns, jpeg bytes
    bag.authority(), bag.strings("/teleop/intervention"), bag.joy("/pedal/joy"),
    bag.decode("/diagnostics")               # any other type via rosbags (dicts of fields)

    idx = open_indexed("/data/ep_0001")      # seekable, streaming, nothing decoded (replay, info)
    idx.channels                             # {channel id: RawChannel(topic, schema name/encoding/data, ...)}
    idx.start_ns, idx.end_ns, idx.message_count, idx.metadata()
    for m in idx.messages(start_ns):         # RawMessage(channel_id, log_time, publish_time, data)
        ...                                  # in log-time order, read through the MCAP index
    read_episode("/data/ep_0001")            # EpisodeMeta from the MCAP record alone (reports: stats,
                                             # lineage); BagReadError if metadata.yaml disagrees

A bag still being recorded is read as it grows with `FollowMcap` (`scan.py`: each poll reads the
records written since the last), the same record scan `open_bag` uses. Every path hands out the
same records: channels as `RawChannel` (`IndexedBag.channels`, `ScanResult.raw_channels`), metadata
records as `{name: {key: value}}`, messages as `RawMessage` (MCAP's own Message record: channel_id,
sequence, log_time, publish_time, data), whether read through the index or record by record.

`stamps_ns` are the source stamps, `header.stamp` read from each message's CDR: the one time
base the data engine aligns and validates on. MCAP `publish_time` is kept as stored (rosbag2
writes the DDS send time there) and never used as a stamp. `log_ns` are the receive times (wall
clock). Header stamps are ROS time (`EpisodeMeta.stamp_clock == "ros"`, and in foreign rosbag2
bags). All arrays are numpy; stamps int64. Decoding is `cdr.py`'s. A bag in an older format of
ours is refused: `OutdatedBagError` names `teleop-flywheel migrate` (`upgrade.py`).

Damage: `open_bag` reads the file record by record with `scan.py`, so a bag cut mid-chunk (no
footer/summary) still yields every complete chunk and is marked `TRUNCATED`; a chunk whose CRC or
compressed frame is bad, a data-section or summary CRC mismatch, a duplicated chunk or record,
counts that disagree with the summary or with metadata.yaml, and an episode record that disagrees
with metadata.yaml `custom_data` are `CORRUPT` (`integrity.py`); all name the file. A name that could be
read as a path (`core/names.py`: a channel's topic not a ROS name, a camera name not an identifier, a
name in the episode metadata) is `UNSAFE_NAME`, naming the field; the episode metadata is then not
handed out (`Bag.episode` None) and nothing downstream builds a path or key from such a name. `open_indexed`
needs the summary and index a complete file has (else: `teleop-flywheel recover`). All find the
file with `metadata.find_mcap`; their errors are in `exceptions.py`.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
from mcap.exceptions import McapError
from mcap.reader import make_reader
from mcap.records import Message
from rosbags.typesys import Stores, get_typestore

from teleop_flywheel.core.bag_topics import AUTHORITY
from teleop_flywheel.core.episode import METADATA_RECORD, EpisodeMeta
from teleop_flywheel.core.errors import UnsafeNameError
from teleop_flywheel.core.names import UNSAFE_NAME, identifier_problem
from teleop_flywheel.core.topics import camera_name, is_ros_name, strip_namespace
from teleop_flywheel.recording.mcap import cdr, integrity, upgrade
from teleop_flywheel.recording.mcap.exceptions import (
    BagNotFoundError,
    BagReadError,
    NotABagError,
    NotMcapError,
    NotRegularFileError,
    OutdatedBagError,
    UnindexedBagError,
)
from teleop_flywheel.recording.mcap.metadata import find_mcap, read_metadata_yaml
from teleop_flywheel.recording.mcap.scan import FollowMcap, RawChannel, RawMessage, ScanResult, open_regular, scan
from teleop_flywheel.recording.mcap.writer import START_RECORD


def refuse_outdated(path: Path, schema_texts: Iterable[bytes], records: dict[str, dict[str, str]]) -> None:
    """OutdatedBagError naming `teleop-flywheel migrate` if anything in the bag is in an older format."""
    reasons = upgrade.outdated(schema_texts, records)
    if reasons:
        raise OutdatedBagError(upgrade.refusal(path, reasons))




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
            reader = make_reader(f)
            yield from (message for _s, _c, message in reader.iter_messages(starting_at=start_ns, log_time_order=True))

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


__all__ = ["Bag", "BagDamage", "RawTopic", "JointStream", "ImageStream", "Stream", "open_bag", "content_id",
           "episode_id_for", "TRUNCATED", "CORRUPT", "UNSAFE_NAME", "ID_VERSION",
           "name_problem", "IndexedBag", "RawChannel", "RawMessage", "open_indexed", "read_episode", "find_bag",
           "FollowMcap",
           "BagReadError", "NotABagError", "OutdatedBagError", "UnindexedBagError"]

TRUNCATED = "TRUNCATED"
CORRUPT = "CORRUPT"
JOINT_STATE = "sensor_msgs/msg/JointState"
COMPRESSED_IMAGE = "sensor_msgs/msg/CompressedImage"


@dataclass(frozen=True)
class BagDamage:
    code: str  # TRUNCATED | CORRUPT | UNSAFE_NAME
    file: str
    detail: str
    field: str = ""  # UNSAFE_NAME: the field whose name is refused (camera, stream, task, ...)


@dataclass
class RawTopic:
    """One topic's messages in file order: receive time, source stamp, CDR bytes."""

    type: str
    log_ns: np.ndarray
    publish_ns: np.ndarray
    data: list[bytes]
    sequence: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))

    def __len__(self) -> int:
        return len(self.data)


@dataclass
class Stream:
    """A stamped numeric stream: values[i] was true from stamps_ns[i] on."""

    name: str
    stamps_ns: np.ndarray  # int64, ascending
    values: np.ndarray  # (N, ...) any dtype


@dataclass
class JointStream:
    name: str
    stamps_ns: np.ndarray
    log_ns: np.ndarray
    names: list[str]
    position: np.ndarray  # (N, J) float64
    velocity: np.ndarray  # (N, J) or (N, 0)
    effort: np.ndarray
    frame_ids: list[str]

    def stream(self, columns: list[str] | None = None) -> Stream:
        """positions (optionally re-ordered to `columns`) as a Stream."""
        values = self.position
        if columns is not None:
            missing = [c for c in columns if c not in self.names]
            if missing:
                raise BagReadError(f"{self.name}: joint(s) {missing} not in names {self.names}")
            values = values[:, [self.names.index(c) for c in columns]]
        return Stream(self.name, self.stamps_ns, values)


@dataclass
class ImageStream:
    name: str
    stamps_ns: np.ndarray
    log_ns: np.ndarray
    formats: list[str]
    data: list[bytes]  # compressed bytes (jpeg)


ID_VERSION = 2  # what `Bag.episode_id` is; v1 ids (`Bag.episode_id_v1`) stay resolvable


def image_stream_name(topic: str) -> str:
    """What an image stream is called: its camera's name (`core.topics.camera_name`), else — a foreign
    bag's image topic — the topic's parts joined."""
    return camera_name(topic) or "_".join(p for p in topic.split("/") if p)


def content_id(topics: dict[str, RawTopic]) -> str:
    """Content id v1: sha256 over every message: topic, type, log/publish time and CDR bytes, topics sorted.

    Independent of file and directory names, compression and chunking (it hashes decoded
    messages, not file bytes); any changed, added or removed message changes it.
    """
    h = hashlib.sha256()
    for name in sorted(topics):
        t = topics[name]
        h.update(f"{name}\0{t.type}\0{len(t)}\0".encode())
        h.update(np.ascontiguousarray(t.log_ns, dtype="<i8").tobytes())
        h.update(np.ascontiguousarray(t.publish_ns, dtype="<i8").tobytes())
        for d in t.data:
            h.update(len(d).to_bytes(8, "little"))
            h.update(d)
    return h.hexdigest()


def episode_id_for(messages_id: str, record: dict[str, str] | None) -> str:
    """Content id v2: the v1 message hash and the episode metadata record (canonical JSON, without
    `episode_name`, the bag's label; none for a bag without one). A flipped calibration or outcome
    in the metadata changes the id; renaming or copying the bag does not."""
    h = hashlib.sha256(f"teleop_flywheel.episode_id/{ID_VERSION}\0{messages_id}\0".encode())
    covered = None if record is None else {k: v for k, v in record.items() if k != "episode_name"}
    h.update(json.dumps(covered, sort_keys=True, ensure_ascii=True).encode())
    return h.hexdigest()


@dataclass
class Bag:
    path: Path
    mcap_path: Path
    topics: dict[str, str]
    episode: EpisodeMeta | None
    metadata_yaml: dict[str, Any] | None
    damage: list[BagDamage]
    mcap_metadata: dict[str, dict[str, str]]
    _raw: dict[str, RawTopic] = field(repr=False, default_factory=dict)
    episode_record: dict[str, str] | None = None  # the MCAP record `episode` was read from
    _stamps: dict[str, np.ndarray] = field(repr=False, default_factory=dict)

    @property
    def name(self) -> str:
        return self.path.name if self.path.is_dir() else self.mcap_path.stem

    @cached_property
    def episode_id_v1(self) -> str:
        return content_id(self._raw)

    @cached_property
    def episode_id(self) -> str:
        return episode_id_for(self.episode_id_v1, self.episode_record)

    def stamps(self, topic: str) -> np.ndarray:
        """header.stamp (ns) of every message of a stamped topic, read from the CDR (CdrError if a
        payload is too short); the time base of alignment and validation, never publish_time."""
        cached = self._stamps.get(topic)
        if cached is None:
            cached = self._stamps[topic] = cdr.header_stamps_ns(self.raw(topic).data)
        return cached

    def raw(self, topic: str) -> RawTopic:
        if topic not in self._raw:
            raise BagReadError(f"{self.mcap_path}: no topic {topic} (has {sorted(self._raw)})")
        return self._raw[topic]

    def has(self, topic: str) -> bool:
        return topic in self._raw and len(self._raw[topic]) > 0

    def camera_topics(self) -> dict[str, str]:
        """{camera name: topic} for every `/cameras/<name>/image/compressed`-style image topic."""
        return {image_stream_name(topic): topic for topic, type_name in sorted(self.topics.items())
                if type_name == COMPRESSED_IMAGE}

    def joint_state(self, topic: str) -> JointStream:
        raw = self.raw(topic)
        try:
            js = cdr.decode_joint_states(raw.data, f"{self.mcap_path}: {topic}")
        except cdr.CdrError as exc:
            raise BagReadError(str(exc)) from None
        return JointStream(topic, js.stamps_ns, raw.log_ns, js.names, js.position, js.velocity, js.effort,
                           js.frame_ids)

    def images(self, topic: str) -> ImageStream:
        raw = self.raw(topic)
        stamps, formats, data = cdr.decode_compressed_images(raw.data)
        return ImageStream(topic, stamps, raw.log_ns, formats, data)

    def authority(self, topic: str = AUTHORITY) -> JointStream:
        """`/teleop/authority`: names [alpha, mode, intervention_id, trigger] in `position`."""
        return self.joint_state(topic)

    def strings(self, topic: str) -> list[tuple[int, str]]:
        """std_msgs/String messages as (log_ns, text)."""
        raw = self.raw(topic)
        return [(int(t), cdr.decode_string(d)) for t, d in zip(raw.log_ns, raw.data, strict=True)]

    def joy(self, topic: str) -> Stream:
        """sensor_msgs/Joy buttons (N, B) int32 at their stamps (axes via `decode`)."""
        stamps, buttons = cdr.decode_joy_buttons(self.raw(topic).data)
        return Stream(topic, stamps, buttons)

    def decode(self, topic: str) -> list[Any]:
        """Any type (e.g. DiagnosticArray) with rosbags' pure-Python deserializer; slow, for rare topics."""
        store = get_typestore(Stores.LATEST)
        raw = self.raw(topic)
        return [store.deserialize_cdr(d, raw.type) for d in raw.data]


def open_bag(path: str | Path) -> Bag:
    """Read the whole bag (what survived of it); damage is recorded in `Bag.damage`, not raised."""
    path = Path(path)
    bag_dir, mcap_path = find_bag(path)
    meta_yaml, yaml_problem = _metadata_yaml(bag_dir) if path.is_dir() else (None, None)
    scanned, per_channel = _scan_messages(mcap_path)
    refuse_outdated(bag_dir, (s.data for s in scanned.schemas.values()), scanned.metadata)
    file = str(mcap_path)
    damage = _scan_damage(scanned, file)
    if yaml_problem:
        damage.append(BagDamage(CORRUPT, str(bag_dir / "metadata.yaml"), yaml_problem))
    record = scanned.metadata.get(METADATA_RECORD) or scanned.metadata.get(START_RECORD)
    episode = _episode(record, file, damage)
    namespace = episode.namespace if episode is not None and isinstance(episode.namespace, str) else ""
    topics, raw = _streams(scanned, per_channel, namespace, file, damage)
    if scanned.complete and not scanned.bad_chunks:
        counts = {ch.topic: len(raw[strip_namespace(ch.topic, namespace) if namespace else ch.topic])
                  if name_problem(ch.topic, ch.schema_name) is None else len(per_channel.get(cid, ((),))[0])
                  for cid, ch in scanned.raw_channels.items()}
        damage += [BagDamage(CORRUPT, file, p) for p in integrity.yaml_count_problems(meta_yaml, counts)]
    if episode is not None and namespace:
        try:
            episode = episode.without_namespace()
        except (ValueError, TypeError, AttributeError) as exc:
            damage.append(BagDamage(CORRUPT, file, f"episode metadata namespace unusable: {exc}"))
    disagree = integrity.metadata_disagreement(scanned.metadata.get(METADATA_RECORD), meta_yaml)
    if disagree and scanned.complete:
        damage.append(BagDamage(CORRUPT, file, disagree))
    return Bag(bag_dir if path.is_dir() else mcap_path, mcap_path, topics, episode, meta_yaml, damage,
               scanned.metadata, raw, record or None)


_Columns = tuple[list[int], list[int], list[int], list[bytes]]  # one channel's log, publish, sequence, data


def _metadata_yaml(bag_dir: Path) -> tuple[dict[str, Any] | None, str | None]:
    """(rosbag2's metadata.yaml, None), (None, None) when there is none, (None, why) when it is unreadable."""
    try:
        return read_metadata_yaml(bag_dir), None
    except FileNotFoundError:  # a crashed recorder writes none: the MCAP is the truth
        return None, None
    except Exception as exc:  # noqa: BLE001 - there but unreadable: damage, named
        return None, f"metadata.yaml unreadable: {exc}"


def _scan_messages(mcap_path: Path) -> tuple[ScanResult, dict[int, _Columns]]:
    """Every message that survived, in columns per channel id, and the scan's findings."""
    per_channel: dict[int, _Columns] = {}

    def keep(m: Message) -> None:
        entry = per_channel.get(m.channel_id)
        if entry is None:
            entry = per_channel[m.channel_id] = ([], [], [], [])
        entry[0].append(m.log_time)
        entry[1].append(m.publish_time)
        entry[2].append(m.sequence)
        entry[3].append(m.data)

    try:
        scanned = scan(mcap_path, keep)
    except NotRegularFileError as exc:
        raise NotABagError(str(exc)) from None
    except NotMcapError as exc:
        raise BagReadError(str(exc)) from None
    return scanned, per_channel


def _episode(record: dict[str, str] | None, file: str, damage: list[BagDamage]) -> EpisodeMeta | None:
    """The episode metadata record, or None (an unsafe name or an unreadable record is damage)."""
    if not record:
        return None
    try:
        return EpisodeMeta.from_strings(record)
    except UnsafeNameError as exc:
        damage.append(BagDamage(UNSAFE_NAME, file, f"episode metadata: {exc}", exc.field))
    except (ValueError, TypeError, AttributeError, KeyError) as exc:
        damage.append(BagDamage(CORRUPT, file, f"episode metadata unreadable: {exc}"))
    return None


def _streams(scanned: ScanResult, per_channel: dict[int, _Columns], namespace: str, file: str,
             damage: list[BagDamage]) -> tuple[dict[str, str], dict[str, RawTopic]]:
    """(type by topic, RawTopic by topic), the rig's namespace stripped; a channel with an unsafe
    name, a topic on two channels and duplicated records are damage."""
    topics: dict[str, str] = {}
    raw: dict[str, RawTopic] = {}
    for cid, ch in sorted(scanned.raw_channels.items()):
        type_name = ch.schema_name
        problem = name_problem(ch.topic, type_name)
        if problem is not None:
            damage.append(BagDamage(UNSAFE_NAME, file, problem[1], problem[0]))
            continue  # never a stream: nothing reads it, names a file or a feature after it
        name = strip_namespace(ch.topic, namespace) if namespace else ch.topic
        if name in raw:
            damage.append(BagDamage(CORRUPT, file, f"topic {ch.topic} is on two channels"))
            continue
        topics[name] = type_name
        log, pub, seq, data = per_channel.get(cid, ([], [], [], []))
        raw[name] = RawTopic(type_name, np.asarray(log, np.int64), np.asarray(pub, np.int64), data,
                             np.asarray(seq, np.int64))
        dup = integrity.duplicate_records(ch.topic, raw[name].log_ns, raw[name].publish_ns, raw[name].sequence, data)
        if dup:
            damage.append(BagDamage(CORRUPT, file, dup))
    return topics, raw


def name_problem(topic: str, type_name: str) -> tuple[str, str] | None:
    """(field, why) if a channel's camera name, or its topic, could be read as a path (every reader
    of channels asks: `open_bag`, the pre-encoder of a growing bag)."""
    if type_name == COMPRESSED_IMAGE:
        why = identifier_problem(image_stream_name(topic))
        if why:
            return "camera", f"{UnsafeNameError('camera', image_stream_name(topic), why)} (topic {topic!r})"
    if not is_ros_name(topic):
        return "stream", f"{UnsafeNameError('stream', topic, 'not a ROS topic name')}"
    return None


def _scan_damage(scanned: ScanResult, file: str) -> list[BagDamage]:
    damage: list[BagDamage] = []
    if scanned.malformed:
        damage.append(BagDamage(CORRUPT, file, scanned.malformed))
    if scanned.bad_chunks:
        damage.append(BagDamage(CORRUPT, file, f"{scanned.bad_chunks} chunk(s) failed their CRC or decompression "
                                               "and were skipped"))
    damage += [BagDamage(CORRUPT, file, p) for p in scanned.problems]
    if scanned.zero_tail_at is not None:
        damage.append(BagDamage(TRUNCATED, file, f"no footer/summary: file ends in zeros from byte "
                                                 f"{scanned.zero_tail_at} of {scanned.size}"))
    elif not scanned.complete and not scanned.malformed:
        damage.append(BagDamage(TRUNCATED, file,
                                f"no footer/summary: file ends after {scanned.good_bytes} readable bytes of "
                                f"{scanned.size} ({scanned.discarded_bytes} bytes of a cut record discarded)"))
    if scanned.orphans:
        damage.append(BagDamage(CORRUPT, file, f"messages on channels {scanned.orphans} without definitions"))
    return damage
