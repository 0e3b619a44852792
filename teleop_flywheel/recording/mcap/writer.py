"""`BagWriter`: one rosbag2-compatible MCAP bag directory per episode, crash-safe (no ROS import).

Layout written (what `ros2 bag record -s mcap` writes, plus our episode metadata):

    <name>/
      <name>_0.mcap    profile "ros2"; schemas "ros2msg" with full dependency text; "cdr"
                       channels with metadata offered_qos_profiles + topic_type_hash;
                       zstd chunks (CRC each) + message indexes + summary (CRC) +
                       data-section CRC covering every record; metadata records
                       "teleop_flywheel.episode.start" (at open), "teleop_flywheel.episode"
                       (final, at close) and "rosbag2" (serialized_metadata, at close)
      metadata.yaml    rosbag2_bagfile_information v9 (written at close, atomically)

Stable API (the data engine builds fixtures with it)::

    from teleop_flywheel.recording.mcap.writer import BagWriter, Qos
    with BagWriter("/data/ep_0001", episode=meta) as bag:           # meta: EpisodeMeta | None
        bag.add_topic("/follower/joint_states", "sensor_msgs/msg/JointState",
                      qos=[Qos(depth=50)])                           # definition from .msg files
        bag.write("/follower/joint_states", cdr_bytes,
                  log_time_ns=recv_wall_ns, publish_time_ns=send_wall_ns, sequence=n)
        bag.episode = final_meta                                     # or bag.close(episode=...)
    # close() → BagSummary(path, mcap_path, message_count, per-topic counts, start/end)

Times: `log_time` = receive time (DDS received_timestamp, wall-clock ns since the epoch, as
rosbag2 records it; metadata.yaml `starting_time`/`duration` come from it); `publish_time` =
the DDS source timestamp (send time, wall clock), as rosbag2 records it. Time itself is read from
the header stamps in the messages (ROS time, SPEC §4), never from either.

Crash safety: a chunk is closed, written and flushed to the OS when it holds `chunk_size`
bytes OR its oldest message is `max_chunk_age_s` old (checked on every write and by a
background thread, so an idle topic set still flushes); `fsync` after each chunk by default.
A `kill -9` therefore loses at most ~`max_chunk_age_s` (default 0.5 s) of data, and
`teleop-flywheel recover` rebuilds the summary. The bag directory must not exist (never
overwritten). ENOSPC/EDQUOT raise `DiskFullError` naming the file, any other write error
`BagWriteError` (its base class); the partial bag is left for `recover` and nothing else on disk
is touched. An error in the background flusher is recorded (`error`), not lost with the thread:
the owner's next `write`/`flush`/`close` raises it. An unknown `compression` is refused before
anything is created.
"""
from __future__ import annotations

import contextlib
import errno
import os
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import NoReturn

from mcap.writer import CompressionType, Writer

from teleop_flywheel import __version__
from teleop_flywheel.core.episode import METADATA_RECORD, EpisodeMeta
from teleop_flywheel.recording.mcap import msgdefs
from teleop_flywheel.recording.mcap.exceptions import BagError, BagExistsError, BagWriteError, DiskFullError
from teleop_flywheel.recording.mcap.metadata import (
    Qos,
    TopicRecord,
    bagfile_information,
    dump_yaml,
    mcap_file_name,
    qos_yaml,
    ros_distro,
    write_metadata_yaml,
)

__all__ = ["BagWriter", "BagSummary", "BagError", "BagExistsError", "BagWriteError", "DiskFullError", "Qos",
           "START_RECORD", "ROSBAG2_RECORD", "COMPRESSION", "mcap_file_name"]

START_RECORD = METADATA_RECORD + ".start"  # episode metadata as known at start (survives a crash)
ROSBAG2_RECORD = "rosbag2"  # rosbag2's own record: {"serialized_metadata": <yaml>}
PROFILE = "ros2"
LIBRARY = f"teleop_flywheel {__version__}"
_DISK_FULL = (errno.ENOSPC, errno.EDQUOT)
COMPRESSION = {"zstd": CompressionType.ZSTD, "lz4": CompressionType.LZ4, "none": CompressionType.NONE}










@dataclass
class BagSummary:
    """What `close()` wrote."""

    path: Path
    mcap_path: Path
    message_count: int
    topic_counts: dict[str, int]
    start_log_ns: int | None
    end_log_ns: int | None
    metadata: dict[str, str] = field(default_factory=dict)


@dataclass
class _Topic:
    record: TopicRecord
    channel_id: int


class BagWriter:
    """Writes one bag directory; thread-safe (one lock around every file operation)."""

    def __init__(
        self,
        bag_dir: str | os.PathLike[str],
        *,
        episode: EpisodeMeta | None = None,
        custom_data: Mapping[str, str] | None = None,
        chunk_size: int = 1024 * 1024,
        max_chunk_age_s: float = 0.5,
        compression: str = "zstd",
        fsync: bool = True,
    ) -> None:
        self.path = Path(bag_dir)
        self.name = self.path.name
        if not self.name:
            raise ValueError(f"bag path {bag_dir!r} has no name")
        self.mcap_path = self.path / mcap_file_name(self.name)
        self.episode = episode
        self.custom_data = dict(custom_data or {})
        self._max_age_ns = int(max_chunk_age_s * 1e9)
        self._fsync = fsync
        self._lock = threading.Lock()
        self._topics: dict[str, _Topic] = {}
        self._schemas: dict[str, int] = {}
        self._start: int | None = None
        self._end: int | None = None
        self._chunk_opened_ns: int | None = None  # process monotonic time of the oldest unflushed message
        self._closed = False
        self._failed: BagWriteError | None = None
        if compression not in COMPRESSION:  # before anything is created on disk
            raise ValueError(f"compression must be one of {sorted(COMPRESSION)}, got {compression!r}")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.mkdir()
        except FileExistsError:
            raise BagExistsError(errno.EEXIST, f"bag already exists, refusing to overwrite: {self.path}",
                                 str(self.path)) from None
        except OSError as exc:
            self._raise_io(exc, self.path)
        try:
            self._file = open(self.mcap_path, "xb")  # noqa: SIM115 - open for the bag's life, closed in close()
            self._mcap = Writer(self._file, chunk_size=chunk_size, compression=COMPRESSION[compression],
                                enable_crcs=True, enable_data_crcs=True)
            self._mcap.start(profile=PROFILE, library=LIBRARY)
            if episode is not None:
                self._mcap.add_metadata(START_RECORD, episode.to_strings())
            self._sync()
        except OSError as exc:
            self._raise_io(exc, self.mcap_path)
        self._stop = threading.Event()
        self._flusher = threading.Thread(target=self._flush_loop, name=f"bag-flush-{self.name}", daemon=True)
        self._flusher.start()

    # -- topics and messages ------------------------------------------------------------------

    def add_topic(
        self,
        name: str,
        type_name: str,
        qos: Iterable[Qos] = (Qos(),),
        serialization_format: str = "cdr",
        definition: msgdefs.MessageDefinition | None = None,
    ) -> int:
        """Register a topic (idempotent for the same type); returns its MCAP channel id."""
        type_name = msgdefs.normalize_type(type_name)
        with self._lock:
            self._check_open()
            existing = self._topics.get(name)
            if existing is not None:
                if existing.record.type != type_name:
                    raise BagError(f"{self.mcap_path}: topic {name} already recorded as {existing.record.type}, "
                                   f"not {type_name}")
                return existing.channel_id
            d = definition or msgdefs.definition(type_name)
            profiles = list(qos)
            try:
                schema_id = self._schemas.get(type_name)
                if schema_id is None:
                    schema_id = self._mcap.register_schema(type_name, d.encoding, d.text.encode("utf-8"))
                    self._schemas[type_name] = schema_id
                channel_id = self._mcap.register_channel(
                    topic=name, message_encoding=serialization_format, schema_id=schema_id,
                    metadata={"offered_qos_profiles": qos_yaml(profiles), "topic_type_hash": d.type_hash},
                )
            except OSError as exc:
                self._raise_io(exc, self.mcap_path)
            self._topics[name] = _Topic(
                TopicRecord(name, type_name, d.type_hash, profiles, serialization_format), channel_id)
            return channel_id

    @property
    def topics(self) -> dict[str, str]:
        return {n: t.record.type for n, t in self._topics.items()}

    def write(self, topic: str, data: bytes | memoryview, log_time_ns: int, publish_time_ns: int,
              sequence: int = 0) -> None:
        """Append one serialized message (kept byte-for-byte)."""
        with self._lock:
            self._check_open()
            entry = self._topics.get(topic)
            if entry is None:
                raise BagError(f"{self.mcap_path}: topic {topic} was not added (add_topic first)")
            try:
                self._mcap.add_message(entry.channel_id, log_time=int(log_time_ns), data=bytes(data),
                                       publish_time=int(publish_time_ns), sequence=int(sequence) & 0xFFFFFFFF)
            except OSError as exc:
                self._raise_io(exc, self.mcap_path)
            entry.record.message_count += 1
            self._start = log_time_ns if self._start is None else min(self._start, log_time_ns)
            self._end = log_time_ns if self._end is None else max(self._end, log_time_ns)
            now = time.monotonic_ns()
            if self._chunk_opened_ns is None:
                self._chunk_opened_ns = now
            elif now - self._chunk_opened_ns >= self._max_age_ns:
                self._flush_locked()

    def add_metadata(self, name: str, record: Mapping[str, str]) -> None:
        """Write an MCAP metadata record verbatim (copies of bags keep their records byte for byte)."""
        with self._lock:
            self._check_open()
            try:
                self._mcap.add_metadata(name, dict(record))
            except OSError as exc:
                self._raise_io(exc, self.mcap_path)

    @property
    def message_count(self) -> int:
        return sum(t.record.message_count for t in self._topics.values())

    def topic_counts(self) -> dict[str, int]:
        return {n: t.record.message_count for n, t in self._topics.items()}

    # -- flushing ---------------------------------------------------------------------------

    def flush(self) -> None:
        """Close the open chunk and push it to the OS (and disk, with fsync)."""
        with self._lock:
            self._check_open()
            self._flush_locked()

    def _flush_locked(self) -> None:
        try:
            self._mcap.flush()
            self._sync()
        except OSError as exc:
            self._raise_io(exc, self.mcap_path)
        self._chunk_opened_ns = None

    def _sync(self) -> None:
        self._file.flush()
        if self._fsync:
            os.fsync(self._file.fileno())

    def _flush_loop(self) -> None:
        period = max(self._max_age_ns / 4e9, 0.01)
        while not self._stop.wait(period):
            with self._lock:
                if self._closed or self._failed is not None:
                    return
                if self._chunk_opened_ns is None or time.monotonic_ns() - self._chunk_opened_ns < self._max_age_ns:
                    continue
                try:
                    self._flush_locked()
                except Exception as exc:  # noqa: BLE001 - any failure fails the bag, never the thread
                    if self._failed is None:
                        self._failed = BagWriteError(self.mcap_path, exc)
                    return  # recorded: the owner's next write/flush/close raises it

    # -- closing ----------------------------------------------------------------------------

    def close(self, episode: EpisodeMeta | None = None) -> BagSummary:
        """Write the final episode metadata, the summary and metadata.yaml."""
        if episode is not None:
            self.episode = episode
        self._stop.set()
        if self._flusher is not threading.current_thread():
            self._flusher.join()
        with self._lock:
            if self._failed is not None and not self._closed:
                self._release_file()  # the partial bag stays for `recover`
            self._check_open()
            strings = self.episode.to_strings() if self.episode is not None else {}
            custom = {**self.custom_data, **strings}
            records = sorted(self._topics.values(), key=lambda t: t.channel_id)
            info = bagfile_information(self.mcap_path.name, [t.record for t in records], self._start,
                                       self._end, custom or None, ros_distro())
            try:
                if strings:
                    self._mcap.add_metadata(METADATA_RECORD, strings)
                self._mcap.add_metadata(ROSBAG2_RECORD, {"serialized_metadata": dump_yaml(info)})
                self._mcap.finish()
                self._sync()
                self._file.close()
                self._closed = True
                write_metadata_yaml(self.path, info)
            except OSError as exc:
                self._raise_io(exc, self.mcap_path if not self._closed else self.path / "metadata.yaml")
            self._closed = True
            return BagSummary(self.path, self.mcap_path, info["message_count"], self.topic_counts(),
                              self._start, self._end, custom)

    def abort(self) -> None:
        """Stop writing without a summary (the file stays as a crash would leave it)."""
        self._stop.set()
        if self._flusher is not threading.current_thread():
            self._flusher.join()
        with self._lock:
            if not self._closed:
                self._release_file()

    def _release_file(self) -> None:
        self._closed = True
        # already failed (disk full); the bytes that reached the OS stay for `recover`
        with contextlib.suppress(OSError):
            self._file.close()

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def error(self) -> BagWriteError | None:
        """The write error that stopped this bag (e.g. DiskFullError from the flusher thread)."""
        return self._failed

    def __enter__(self) -> BagWriter:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    # -- errors -----------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._failed is not None:
            raise self._failed
        if self._closed:
            raise BagError(f"{self.mcap_path}: bag is closed")

    def _raise_io(self, exc: OSError, path: Path) -> NoReturn:
        err = DiskFullError(path, exc) if exc.errno in _DISK_FULL else BagWriteError(path, exc)
        self._failed = err
        raise err from exc
