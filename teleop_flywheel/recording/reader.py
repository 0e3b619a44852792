"""Read a recorded episode bag (no ROS): metadata, damage, and numpy streams of our message types.

Stable API (policy replay, the data engine and evaluation import it)::

    from teleop_flywheel.recording.reader import open_bag, BagDamage
    bag = open_bag("/data/ep_0001")          # a rosbag2 bag directory, or a bare .mcap
    bag.episode                              # EpisodeMeta | None (final record, else the start record)
    bag.metadata_yaml                        # dict | None (rosbag2_bagfile_information)
    bag.topics                               # {topic: type name}
    bag.damage                               # [BagDamage(code="TRUNCATED"|"CORRUPT", file, detail)]
    bag.episode_id                           # sha256 of the messages (see `content_id`)
    raw = bag.raw("/follower/joint_states")  # RawTopic(log_ns, publish_ns, data: list[bytes])
    js = bag.joint_state("/follower/joint_states")  # JointStream: stamps_ns, names, position (N,J), ...
    imgs = bag.images("/cameras/wrist/image/compressed")  # ImageStream: stamps_ns, log_ns, jpeg bytes
    bag.authority(), bag.strings("/teleop/intervention"), bag.joy("/pedal/joy"),
    bag.decode("/diagnostics")               # any other type via rosbags (dicts of fields)

`stamps_ns` are the source stamps (`header.stamp`, = MCAP publish_time, CLOCK_MONOTONIC);
`log_ns` the receive times (wall clock). All arrays are numpy; stamps int64.

Damage: the file is read record by record with `recording.recover.iter_surviving`, so a bag cut
mid-chunk (no footer/summary) still yields every complete chunk and is marked `TRUNCATED`, and a
chunk whose CRC or zstd frame is bad is skipped and marked `CORRUPT`; both name the file.

Decoding is vectorised: JointState messages of one topic share one byte layout (same frame_id
and names), so their float64 arrays sit at the same offsets; all messages of that layout are
joined into one (N, L) uint8 array and viewed as float64 columns — no per-message Python for
thousands of messages. Messages with a different layout fall back to a small CDR parser.
"""
from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
from mcap.records import Channel, Message, Metadata, Schema

from teleop_flywheel.core.episode import METADATA_RECORD, EpisodeMeta
from teleop_flywheel.core.errors import FlywheelError
from teleop_flywheel.core.topics import AUTHORITY
from teleop_flywheel.recording.metadata import read_metadata_yaml
from teleop_flywheel.recording.recover import RecoverError, ScanResult, find_mcap, iter_surviving
from teleop_flywheel.recording.writer import START_RECORD

__all__ = ["Bag", "BagDamage", "BagReadError", "RawTopic", "JointStream", "ImageStream", "Stream",
           "open_bag", "content_id", "TRUNCATED", "CORRUPT"]

TRUNCATED = "TRUNCATED"
CORRUPT = "CORRUPT"
JOINT_STATE = "sensor_msgs/msg/JointState"
COMPRESSED_IMAGE = "sensor_msgs/msg/CompressedImage"


class BagReadError(FlywheelError, RuntimeError):
    """The bag cannot be read at all (missing, not MCAP, no definitions); names the path."""


@dataclass(frozen=True)
class BagDamage:
    code: str  # TRUNCATED | CORRUPT
    file: str
    detail: str


@dataclass
class RawTopic:
    """One topic's messages in file order: receive time, source stamp, CDR bytes."""

    type: str
    log_ns: np.ndarray
    publish_ns: np.ndarray
    data: list[bytes]

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


# -- CDR primitives (little/big endian per encapsulation header; alignment from byte 4) ------------

class _Cdr:
    def __init__(self, data: bytes) -> None:
        if len(data) < 4:
            raise BagReadError(f"CDR buffer of {len(data)} bytes")
        self.data = data
        self.e = "<" if data[1] & 1 else ">"
        self.pos = 4

    def align(self, n: int) -> None:
        self.pos += (-(self.pos - 4)) % n

    def u32(self) -> int:
        self.align(4)
        (v,) = struct.unpack_from(self.e + "I", self.data, self.pos)
        self.pos += 4
        return v

    def i32(self) -> int:
        self.align(4)
        (v,) = struct.unpack_from(self.e + "i", self.data, self.pos)
        self.pos += 4
        return v

    def string(self) -> str:
        n = self.u32()
        s = self.data[self.pos:self.pos + n - 1].decode("utf-8") if n else ""
        self.pos += n
        return s

    def array(self, dtype: str, size: int) -> tuple[np.ndarray, int]:
        """(values, byte offset of the first element)."""
        n = self.u32()
        if n:
            self.align(size)
        off = self.pos
        arr = np.frombuffer(self.data, dtype=np.dtype(dtype).newbyteorder(self.e), count=n, offset=off)
        self.pos += n * size
        return arr, off

    def stamp(self) -> int:
        sec = self.i32()
        nsec = self.u32()
        return sec * 1_000_000_000 + nsec


def _joint_state_layout(data: bytes) -> tuple[int, str, list[str], list[tuple[int, int]]]:
    """(stamp, frame_id, names, [(offset, count)] for position/velocity/effort)."""
    c = _Cdr(data)
    stamp = c.stamp()
    frame = c.string()
    names = [c.string() for _ in range(c.u32())]
    spans = []
    for _ in range(3):
        arr, off = c.array("f8", 8)
        spans.append((off, len(arr)))
    return stamp, frame, names, spans


def _decode_joint_states(topic: str, raw: RawTopic) -> JointStream:
    n = len(raw)
    if n == 0:
        return JointStream(topic, np.zeros(0, np.int64), np.zeros(0, np.int64), [], np.zeros((0, 0)),
                           np.zeros((0, 0)), np.zeros((0, 0)), [])
    _, frame0, names, spans0 = _joint_state_layout(raw.data[0])
    j = len(names)
    out = [np.full((n, j if cnt else 0), np.nan) for _, cnt in spans0]
    stamps = np.empty(n, np.int64)
    frames = [frame0] * n
    first = raw.data[0]
    layout_len = len(first)
    prefix_end = spans0[0][0]  # everything before position: stamp differs, rest must match
    same = np.fromiter((len(d) == layout_len and d[8:prefix_end] == first[8:prefix_end] and d[1] == first[1]
                        for d in raw.data), dtype=bool, count=n)
    idx = np.flatnonzero(same)
    if len(idx):
        buf = np.frombuffer(b"".join(raw.data[i] for i in idx), dtype=np.uint8).reshape(len(idx), layout_len)
        e = "<" if first[1] & 1 else ">"
        stamps[idx] = (buf[:, 4:8].copy().view(e + "i4")[:, 0].astype(np.int64) * 1_000_000_000
                       + buf[:, 8:12].copy().view(e + "u4")[:, 0].astype(np.int64))
        for k, (off, cnt) in enumerate(spans0):
            if cnt:
                out[k][idx] = buf[:, off:off + 8 * cnt].copy().view(e + "f8").reshape(len(idx), cnt)
    for i in np.flatnonzero(~same):
        stamp, frame, nm, spans = _joint_state_layout(raw.data[i])
        stamps[i] = stamp
        frames[i] = frame
        if nm != names:
            raise BagReadError(f"{topic}: message {i} has joint names {nm}, the first had {names}")
        for k, (off, cnt) in enumerate(spans):
            if cnt and out[k].shape[1] == cnt:
                out[k][i] = np.frombuffer(raw.data[i], dtype=("<" if raw.data[i][1] & 1 else ">") + "f8",
                                          count=cnt, offset=off)
    return JointStream(topic, stamps, raw.log_ns, names, out[0], out[1], out[2], frames)


def _decode_images(topic: str, raw: RawTopic) -> ImageStream:
    stamps = np.empty(len(raw), np.int64)
    formats: list[str] = []
    data: list[bytes] = []
    for i, d in enumerate(raw.data):
        c = _Cdr(d)
        stamps[i] = c.stamp()
        c.string()  # frame_id
        formats.append(c.string())
        n = c.u32()
        data.append(d[c.pos:c.pos + n])
    return ImageStream(topic, stamps, raw.log_ns, formats, data)


def content_id(topics: dict[str, RawTopic]) -> str:
    """sha256 over every message: topic, type, log/publish time and CDR bytes, topics sorted.

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

    @property
    def name(self) -> str:
        return self.path.name if self.path.is_dir() else self.mcap_path.stem

    @cached_property
    def episode_id(self) -> str:
        return content_id(self._raw)

    def raw(self, topic: str) -> RawTopic:
        if topic not in self._raw:
            raise BagReadError(f"{self.mcap_path}: no topic {topic} (has {sorted(self._raw)})")
        return self._raw[topic]

    def has(self, topic: str) -> bool:
        return topic in self._raw and len(self._raw[topic]) > 0

    def camera_topics(self) -> dict[str, str]:
        """{camera name: topic} for every `/cameras/<name>/image/compressed`-style image topic."""
        out = {}
        for topic, type_name in sorted(self.topics.items()):
            if type_name == COMPRESSED_IMAGE:
                parts = [p for p in topic.split("/") if p]
                name = parts[1] if len(parts) >= 2 and parts[0] == "cameras" else "_".join(parts)
                out[name] = topic
        return out

    def joint_state(self, topic: str) -> JointStream:
        return _decode_joint_states(topic, self.raw(topic))

    def images(self, topic: str) -> ImageStream:
        return _decode_images(topic, self.raw(topic))

    def authority(self, topic: str = AUTHORITY) -> JointStream:
        """`/teleop/authority`: names [alpha, mode, intervention_id, trigger] in `position`."""
        return self.joint_state(topic)

    def strings(self, topic: str) -> list[tuple[int, str]]:
        """std_msgs/String messages as (log_ns, text)."""
        raw = self.raw(topic)
        return [(int(t), _Cdr(d).string()) for t, d in zip(raw.log_ns, raw.data)]

    def joy(self, topic: str) -> Stream:
        """sensor_msgs/Joy buttons (N, B) int32 at their stamps (axes via `decode`)."""
        raw = self.raw(topic)
        stamps, rows = [], []
        for d in raw.data:
            c = _Cdr(d)
            stamps.append(c.stamp())
            c.string()
            c.array("f4", 4)
            rows.append(c.array("i4", 4)[0].astype(np.int32))
        width = max((len(r) for r in rows), default=0)
        values = np.zeros((len(rows), width), np.int32)
        for i, r in enumerate(rows):
            values[i, :len(r)] = r
        return Stream(topic, np.asarray(stamps, np.int64), values)

    def decode(self, topic: str) -> list[Any]:
        """Any type (e.g. DiagnosticArray) with rosbags' pure-Python deserializer; slow, for rare topics."""
        from rosbags.typesys import Stores, get_typestore

        store = get_typestore(Stores.LATEST)
        raw = self.raw(topic)
        return [store.deserialize_cdr(d, raw.type) for d in raw.data]


def open_bag(path: str | Path) -> Bag:
    """Read the whole bag (what survived of it); damage is recorded in `Bag.damage`, not raised."""
    path = Path(path)
    try:
        bag_dir, mcap_path = find_mcap(path)
    except RecoverError as exc:
        raise BagReadError(str(exc)) from None
    meta_yaml: dict[str, Any] | None = None
    if path.is_dir():
        try:
            meta_yaml = read_metadata_yaml(bag_dir)
        except Exception:  # missing (crashed recorder) or unreadable: the MCAP is the truth
            meta_yaml = None
    result = ScanResult(path=mcap_path, size=mcap_path.stat().st_size)
    schemas: dict[int, Schema] = {}
    channels: dict[int, Channel] = {}
    metadata: dict[str, dict[str, str]] = {}
    per_channel: dict[int, tuple[list[int], list[int], list[bytes]]] = {}
    damage: list[BagDamage] = []
    try:
        for r in iter_surviving(mcap_path, result):
            if isinstance(r, Message):
                entry = per_channel.get(r.channel_id)
                if entry is None:
                    entry = per_channel[r.channel_id] = ([], [], [])
                entry[0].append(r.log_time)
                entry[1].append(r.publish_time)
                entry[2].append(r.data)
            elif isinstance(r, Channel):
                channels.setdefault(r.id, r)
            elif isinstance(r, Schema):
                schemas.setdefault(r.id, r)
            elif isinstance(r, Metadata):
                metadata[r.name] = dict(r.metadata)
    except RecoverError as exc:
        if "bad magic" in str(exc):
            raise BagReadError(str(exc)) from None
        damage.append(BagDamage(CORRUPT, str(mcap_path), str(exc)))
    if result.bad_chunks:
        damage.append(BagDamage(CORRUPT, str(mcap_path),
                                f"{result.bad_chunks} chunk(s) failed their CRC or decompression and were skipped"))
    if not result.complete:
        damage.append(BagDamage(TRUNCATED, str(mcap_path),
                                f"no footer/summary: file ends after {result.good_bytes} readable bytes of "
                                f"{result.size} ({result.size - result.good_bytes} bytes of a cut record discarded)"))
    topics: dict[str, str] = {}
    raw: dict[str, RawTopic] = {}
    for cid, ch in sorted(channels.items()):
        schema = schemas.get(ch.schema_id)
        type_name = schema.name if schema is not None else ""
        topics[ch.topic] = type_name
        log, pub, data = per_channel.get(cid, ([], [], []))
        raw[ch.topic] = RawTopic(type_name, np.asarray(log, np.int64), np.asarray(pub, np.int64), data)
    lost = set(per_channel) - set(channels)
    if lost:
        damage.append(BagDamage(CORRUPT, str(mcap_path), f"messages on channels {sorted(lost)} without definitions"))
    episode = None
    record = metadata.get(METADATA_RECORD) or metadata.get(START_RECORD)
    if record:
        try:
            episode = EpisodeMeta.from_strings(record)
        except (ValueError, TypeError) as exc:
            damage.append(BagDamage(CORRUPT, str(mcap_path), f"episode metadata unreadable: {exc}"))
    return Bag(bag_dir if path.is_dir() else mcap_path, mcap_path, topics, episode, meta_yaml, damage, metadata, raw)
