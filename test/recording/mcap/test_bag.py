"""BagWriter / recover / info without ROS: bags read back by independent readers.

CDR bytes are made with `rosbags` (an implementation independent of ours); bags are read with
`rosbags.highlevel.AnyReader` and with `mcap` + `mcap_ros2` decoding.
"""
from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
import textwrap
import threading
import time
from io import BytesIO
from pathlib import Path

import numpy as np
import pytest
import yaml
from mcap.data_stream import ReadDataStream
from mcap.opcode import Opcode
from mcap.reader import make_reader
from mcap.records import MessageIndex
from mcap_ros2.decoder import DecoderFactory
from rosbags.highlevel import AnyReader
from rosbags.typesys import Stores, get_typestore
from support.foxglove_npm import decode_bag
from support.tmpfs import mount_tmpfs, unmount

from teleop_flywheel import cli
from teleop_flywheel.core.episode import METADATA_RECORD, EpisodeMeta, Intervention
from teleop_flywheel.data.reports.bag_info import bag_info
from teleop_flywheel.recording.mcap import msgdefs
from teleop_flywheel.recording.mcap.exceptions import (
    BagExistsError,
    BagNotFoundError,
    BagReadError,
    BagWriteError,
    DiskFullError,
)
from teleop_flywheel.recording.mcap.metadata import find_mcap
from teleop_flywheel.recording.mcap.reader import IndexedBag, open_bag
from teleop_flywheel.recording.mcap.recover import recover
from teleop_flywheel.recording.mcap.scan import decompress, record_spans, scan
from teleop_flywheel.recording.mcap.writer import START_RECORD, BagWriter, Qos

TS = get_typestore(Stores.LATEST)
T = TS.types
WALL0 = 1_700_000_000_000_000_000
MONO0 = 5_000_000_000


def _header(ns: int, frame: str = "") -> object:
    return T["std_msgs/msg/Header"](stamp=T["builtin_interfaces/msg/Time"](sec=ns // 10**9, nanosec=ns % 10**9),
                                    frame_id=frame)


def joint(i: int) -> object:
    return T["sensor_msgs/msg/JointState"](
        header=_header(MONO0 + i * 2_000_000, "base"), name=["shoulder_pan", "gripper"],
        position=np.array([0.001 * i, -0.5]), velocity=np.array([0.1, 0.2]), effort=np.array([], dtype=np.float64))


def image(i: int) -> object:
    return T["sensor_msgs/msg/CompressedImage"](
        header=_header(MONO0 + i * 33_333_333, "wrist"), format="jpeg",
        data=np.frombuffer(bytes([i % 256]) * 1000 + os.urandom(200), dtype=np.uint8))


def text(i: int) -> object:
    return T["std_msgs/msg/String"](data=json.dumps({"id": i, "trigger": None}))


def cdr(msg: object) -> bytes:
    return bytes(TS.serialize_cdr(msg, msg.__msgtype__))  # type: ignore[attr-defined]


TOPICS = {
    "/follower/joint_states": ("sensor_msgs/msg/JointState", joint, [Qos(depth=50)]),
    "/cameras/wrist/image/compressed": ("sensor_msgs/msg/CompressedImage", image, [Qos(depth=10)]),
    "/teleop/intervention": ("std_msgs/msg/String", text, [Qos(depth=20, durability="transient_local")]),
}


def write_bag(path: Path, n: int = 40, episode: EpisodeMeta | None = None, close: bool = True,
              **kwargs: object) -> tuple[BagWriter, dict[str, list[object]]]:
    sent: dict[str, list[object]] = {t: [] for t in TOPICS}
    bag = BagWriter(path, episode=episode, **kwargs)  # type: ignore[arg-type]
    for topic, (typ, _f, qos) in TOPICS.items():
        bag.add_topic(topic, typ, qos=qos)
    for i in range(n):
        for k, (topic, (_typ, make, _q)) in enumerate(TOPICS.items()):
            msg = make(i)
            sent[topic].append(msg)
            bag.write(topic, cdr(msg), WALL0 + i * 1_000_000 + k, MONO0 + i * 1_000, sequence=i + 1)
    if close:
        bag.close()
    return bag, sent


def _same(a: object, b: object) -> bool:
    """Field-by-field equality between a rosbags message and a decoded one (any reader)."""
    fields = getattr(a, "__dataclass_fields__", None)
    if fields is None:
        if isinstance(a, np.ndarray) or isinstance(b, (np.ndarray, bytes, list, tuple)):
            return np.array_equal(np.asarray(a), np.asarray(bytearray(b) if isinstance(b, bytes) else b))
        return a == b
    return all(_same(getattr(a, f), getattr(b, f)) for f in fields if f != "__msgtype__")


def meta(name: str = "ep", **kw: object) -> EpisodeMeta:
    return EpisodeMeta(episode_name=name, task="pick mug", operator="ana", rig_id="rig-1", **kw)  # type: ignore[arg-type]


def test_round_trip_rosbags_anyreader(tmp_path: Path) -> None:
    _, sent = write_bag(tmp_path / "ep", episode=meta())
    got: dict[str, list[object]] = {t: [] for t in TOPICS}
    with AnyReader([tmp_path / "ep"]) as reader:
        assert {c.topic: c.msgtype for c in reader.connections} == {t: v[0] for t, v in TOPICS.items()}
        for conn, _ts, raw in reader.messages():
            got[conn.topic].append(reader.deserialize(raw, conn.msgtype))
        qos = {c.topic: c.ext.offered_qos_profiles for c in reader.connections}  # type: ignore[union-attr]
    for topic in TOPICS:
        assert len(got[topic]) == len(sent[topic])
        assert all(_same(a, b) for a, b in zip(sent[topic], got[topic], strict=True))
    assert qos["/teleop/intervention"][0].durability.name == "TRANSIENT_LOCAL"
    assert qos["/follower/joint_states"][0].depth == 50


def test_round_trip_mcap_ros2_and_layout(tmp_path: Path) -> None:
    _, sent = write_bag(tmp_path / "ep", episode=meta())
    path = tmp_path / "ep" / "ep_0.mcap"
    with open(path, "rb") as f:
        reader = make_reader(f, decoder_factories=[DecoderFactory()])
        header = reader.get_header()
        summary = reader.get_summary()
        assert header.profile == "ros2"
        assert summary is not None and summary.chunk_indexes and summary.statistics.message_count == 120
        assert all(ci.compression == "zstd" for ci in summary.chunk_indexes)
        assert all(ci.message_index_offsets for ci in summary.chunk_indexes)
        for ch in summary.channels.values():
            assert ch.message_encoding == "cdr"
            schema = summary.schemas[ch.schema_id]
            assert schema.encoding == "ros2msg"
            assert ch.metadata["topic_type_hash"] == msgdefs.type_hash(schema.name)
            assert ch.metadata["topic_type_hash"].startswith("RIHS01_")
            assert yaml.safe_load(ch.metadata["offered_qos_profiles"])[0]["reliability"] == "reliable"
        got: dict[str, list[tuple[object, int, int]]] = {t: [] for t in TOPICS}
        for _s, ch, m, decoded in reader.iter_decoded_messages(log_time_order=False):
            got[ch.topic].append((decoded, m.publish_time, m.sequence))
        records = {r.name: dict(r.metadata) for r in reader.iter_metadata()}
    for topic in TOPICS:
        assert [g[2] for g in got[topic]] == list(range(1, 41))
        assert [g[1] for g in got[topic]] == [MONO0 + i * 1_000 for i in range(40)]
        for a, (b, _p, _s) in zip(sent[topic], got[topic], strict=True):
            assert _same(a, b)
    assert records[METADATA_RECORD] == meta().to_strings()
    assert records[START_RECORD] == meta().to_strings()
    assert "serialized_metadata" in records["rosbag2"]


def test_schema_text_full_dependencies() -> None:
    text = msgdefs.full_text("sensor_msgs/msg/JointState")
    lines = text.splitlines()
    seps = [i for i, line in enumerate(lines) if set(line) == {"="}]
    assert [len(lines[i]) for i in seps] == [80, 80]
    assert [lines[i + 1] for i in seps] == ["MSG: std_msgs/Header", "MSG: builtin_interfaces/Time"]
    assert text.startswith(msgdefs.msg_text("sensor_msgs/msg/JointState"))
    assert "float64[] position" in text and "uint32 nanosec" in text
    with pytest.raises(msgdefs.DefinitionNotFoundError, match="no_such_msgs"):
        msgdefs.full_text("no_such_msgs/msg/Nope")


def test_metadata_yaml_matches_file(tmp_path: Path) -> None:
    m = meta(outcome="success", attempts=2, interventions=[Intervention(1, 10, 20, "too_slow")])
    write_bag(tmp_path / "ep", episode=m)
    info = yaml.safe_load((tmp_path / "ep" / "metadata.yaml").read_text())["rosbag2_bagfile_information"]
    assert info["version"] == 9 and info["storage_identifier"] == "mcap"
    assert info["relative_file_paths"] == ["ep_0.mcap"]
    assert info["message_count"] == 120 and info["files"][0]["message_count"] == 120
    with open(tmp_path / "ep" / "ep_0.mcap", "rb") as f:
        stats = make_reader(f).get_summary().statistics  # type: ignore[union-attr]
    assert info["starting_time"]["nanoseconds_since_epoch"] == stats.message_start_time
    assert info["duration"]["nanoseconds"] == stats.message_end_time - stats.message_start_time
    assert info["files"][0]["starting_time"] == info["starting_time"]
    for t in info["topics_with_message_count"]:
        tm = t["topic_metadata"]
        assert t["message_count"] == 40
        assert tm["serialization_format"] == "cdr"
        assert tm["type_description_hash"] == msgdefs.type_hash(tm["type"])
        assert isinstance(tm["offered_qos_profiles"], list)
        assert set(tm["offered_qos_profiles"][0]) == {
            "history", "depth", "reliability", "durability", "deadline", "lifespan", "liveliness",
            "liveliness_lease_duration", "avoid_ros_namespace_conventions"}
    assert info["custom_data"] == m.to_strings()
    assert EpisodeMeta.from_strings(info["custom_data"]).interventions[0].trigger == "too_slow"
    assert info["ros_distro"]


def test_never_overwrites(tmp_path: Path) -> None:
    write_bag(tmp_path / "ep", n=3)
    before = (tmp_path / "ep" / "ep_0.mcap").read_bytes()
    with pytest.raises(BagExistsError, match=str(tmp_path / "ep")):
        BagWriter(tmp_path / "ep")
    assert (tmp_path / "ep" / "ep_0.mcap").read_bytes() == before


def test_chunks_flush_on_time_not_only_size(tmp_path: Path) -> None:
    bag = BagWriter(tmp_path / "ep", max_chunk_age_s=0.3, chunk_size=64 * 1024 * 1024)
    bag.add_topic("/t", "std_msgs/msg/String")
    for i in range(5):
        bag.write("/t", cdr(text(i)), WALL0 + i, MONO0 + i)
    # No more writes: the background flusher must still push the chunk out.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and scan(bag.mcap_path).message_count < 5:
        time.sleep(0.05)
    assert scan(bag.mcap_path).message_count == 5
    bag.abort()


def test_unknown_compression_creates_nothing(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="compression must be one of"):
        BagWriter(tmp_path / "ep", compression="brotli")
    assert not (tmp_path / "ep").exists()  # a later BagWriter(tmp_path / "ep") must not find a stale bag
    write_bag(tmp_path / "ep", n=2)


def test_flusher_error_fails_the_bag_not_the_thread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An I/O error (not disk full) in the background flush is recorded and raised to the owner."""
    died: list[threading.ExceptHookArgs] = []
    monkeypatch.setattr(threading, "excepthook", died.append)
    bag = BagWriter(tmp_path / "ep", max_chunk_age_s=0.05)
    bag.add_topic("/t", "std_msgs/msg/String")
    real_fsync = os.fsync

    def failing_fsync(fd: int) -> None:
        if threading.current_thread().name.startswith("bag-flush-"):
            raise OSError(5, "Input/output error")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", failing_fsync)
    bag.write("/t", cdr(text(0)), WALL0, MONO0)  # the flusher picks this chunk up 50 ms later
    deadline = time.monotonic() + 10
    while bag.error is None and time.monotonic() < deadline:
        time.sleep(0.01)
    monkeypatch.setattr(os, "fsync", real_fsync)
    assert died == [], f"flusher thread died: {died[0].exc_value!r}"
    mcap = str(tmp_path / "ep" / "ep_0.mcap")
    assert isinstance(bag.error, BagWriteError) and mcap in str(bag.error) and "Input/output error" in str(bag.error)
    with pytest.raises(BagWriteError, match=mcap):
        bag.write("/t", cdr(text(1)), WALL0 + 1, MONO0 + 1)
    with pytest.raises(BagWriteError, match=mcap):
        bag.close()
    assert bag.closed  # the file handle is released; the partial bag stays for `recover`


def test_one_lookup_for_the_mcap(tmp_path: Path) -> None:
    """Reader, indexed reader (replay, info) and recover find the same file, or refuse alike."""
    write_bag(tmp_path / "ep", n=3)
    renamed = tmp_path / "renamed"
    (tmp_path / "ep").rename(renamed)  # holds ep_0.mcap: the only .mcap is the bag's file
    assert find_mcap(renamed) == (renamed, renamed / "ep_0.mcap")
    assert find_mcap(renamed / "ep_0.mcap") == (renamed, renamed / "ep_0.mcap")
    assert open_bag(renamed).mcap_path == IndexedBag(renamed).path == renamed / "ep_0.mcap"
    assert recover(renamed).mcap == str(renamed / "ep_0.mcap")
    (renamed / "other.mcap").write_bytes((renamed / "ep_0.mcap").read_bytes())
    for read in (find_mcap, open_bag, IndexedBag, recover):
        with pytest.raises((BagNotFoundError, BagReadError), match="found ep_0.mcap, other.mcap"):
            read(renamed)
    with pytest.raises((BagNotFoundError, BagReadError), match="no such bag directory"):
        IndexedBag(tmp_path / "missing")


def test_recover_truncated_tail_in_place(tmp_path: Path) -> None:
    bag, sent = write_bag(tmp_path / "ep", n=200, episode=meta(), close=False, chunk_size=16 * 1024)
    bag.flush()
    bag.abort()
    path = tmp_path / "ep" / "ep_0.mcap"
    size = path.stat().st_size
    with open(path, "r+b") as f:  # cut the last chunk in half: a torn write
        f.truncate(size - 5000)
    damaged_bytes = path.read_bytes()
    report = recover(tmp_path / "ep")
    assert report.rewritten and report.discarded_bytes > 0 and report.episode_source == "start"
    assert Path(report.damaged).read_bytes() == damaged_bytes  # original kept, byte for byte
    assert 0 < report.messages < 600
    with AnyReader([tmp_path / "ep"]) as reader:
        got = [(c.topic, reader.deserialize(raw, c.msgtype)) for c, _t, raw in reader.messages()]
    assert len(got) == report.messages
    per_topic: dict[str, list[object]] = {}
    for topic, msg in got:
        per_topic.setdefault(topic, []).append(msg)
    for topic, msgs in per_topic.items():  # a prefix of what was written, nothing invented
        assert all(_same(a, b) for a, b in zip(sent[topic], msgs, strict=False))
    with open(path, "rb") as f:
        reader = make_reader(f, decoder_factories=[DecoderFactory()])
        assert reader.get_summary().chunk_indexes  # type: ignore[union-attr]
        records = {r.name: dict(r.metadata) for r in reader.iter_metadata()}
    recovered = EpisodeMeta.from_strings(records[METADATA_RECORD])
    assert recovered.extra["recovered"]["discarded_bytes"] == report.discarded_bytes
    assert recovered.task == "pick mug" and recovered.outcome == "unset"
    info = bag_info(tmp_path / "ep")
    assert info.message_count == report.messages and not any("no MCAP summary" in w for w in info.warnings)


def _records(path: Path, opcode: int) -> list[bytes]:
    data = path.read_bytes()
    return [data[pos:pos + length] for pos, length in record_spans(path, opcode)]


def _check_message_indexes(path: Path) -> int:
    """Every chunk index's message-index records name exactly the chunk's messages (channel, log
    time, offset of the record in the decompressed chunk); the number of messages indexed."""
    data = path.read_bytes()
    with open(path, "rb") as f:
        summary = make_reader(f).get_summary()
    assert summary is not None and summary.chunk_indexes
    indexed = 0
    for ci in summary.chunk_indexes:
        chunk = data[ci.chunk_start_offset + 9:ci.chunk_start_offset + ci.chunk_length]
        clen = struct.unpack_from("<I", chunk, 28)[0]
        records = decompress(ci.compression, chunk[40 + clen:], ci.uncompressed_size)
        messages = set()
        pos = 0
        while pos < len(records):
            opcode, length = struct.unpack_from("<BQ", records, pos)
            if opcode == Opcode.MESSAGE:
                cid, _seq, log_time = struct.unpack_from("<HIQ", records, pos + 9)
                messages.add((cid, log_time, pos))
            pos += 9 + length
        entries = set()
        for cid, offset in ci.message_index_offsets.items():
            assert data[offset] == Opcode.MESSAGE_INDEX
            index = MessageIndex.read(ReadDataStream(BytesIO(data[offset + 9:])))
            assert index.channel_id == cid
            entries |= {(cid, t, o) for t, o in index.records}
        assert entries == messages
        indexed += len(entries)
    return indexed


def test_recover_copies_complete_chunks_verbatim(tmp_path: Path) -> None:
    """A killed bag's chunks and message indexes are copied byte for byte, not recompressed, and the
    repaired file is read whole by Foxglove's indexed reader (npm @mcap/core)."""
    bag, sent = write_bag(tmp_path / "ep", n=200, episode=meta(), close=False, chunk_size=16 * 1024)
    bag.flush()
    bag.abort()
    path = tmp_path / "ep" / "ep_0.mcap"
    chunks, indexes = _records(path, Opcode.CHUNK), _records(path, Opcode.MESSAGE_INDEX)
    assert len(chunks) > 3
    report = recover(tmp_path / "ep")
    assert report.rewritten and report.discarded_bytes == 0 and report.messages == 600
    assert _records(path, Opcode.CHUNK) == chunks and _records(path, Opcode.MESSAGE_INDEX) == indexes
    assert _check_message_indexes(path) == 600
    topics = decode_bag(path)
    assert {t: e["count"] for t, e in topics.items()} == {t: len(m) for t, m in sent.items()}
    assert all(e["errors"] == [] for e in topics.values())
    repaired = scan(path)
    assert repaired.complete and repaired.data_crc and repaired.problems == [] and repaired.message_count == 600


@pytest.mark.parametrize("cut", ["in the last chunk", "in its message indexes"])
def test_recover_torn_tail_keeps_every_complete_chunk(tmp_path: Path, cut: str) -> None:
    """A tail torn inside the last chunk loses that chunk only; torn inside the message indexes that
    follow it, the chunk is kept and its indexes rebuilt. Foxglove reads the repaired file whole."""
    bag, sent = write_bag(tmp_path / "ep", n=200, episode=meta(), close=False, chunk_size=16 * 1024)
    bag.flush()
    bag.abort()
    path = tmp_path / "ep" / "ep_0.mcap"
    spans = record_spans(path)
    last = max(i for i, (pos, _n) in enumerate(spans) if path.read_bytes()[pos] == Opcode.CHUNK)
    chunks = _records(path, Opcode.CHUNK)
    if cut == "in the last chunk":
        keep, size = chunks[:-1], spans[last][0] + spans[last][1] // 2
    else:
        keep, size = chunks, spans[last + 1][0] + 20
    with open(path, "r+b") as f:
        f.truncate(size)
    expected: list[tuple[int, int, bytes]] = []
    scan(path, lambda m: expected.append((m.channel_id, m.sequence, m.data)))
    report = recover(tmp_path / "ep")
    assert report.discarded_bytes > 0 and report.messages == len(expected)
    assert len(expected) < 600 if cut == "in the last chunk" else len(expected) == 600
    assert _records(path, Opcode.CHUNK) == keep
    assert _check_message_indexes(path) == len(expected)
    got: list[tuple[int, int, bytes]] = []
    scan(path, lambda m: got.append((m.channel_id, m.sequence, m.data)))
    assert got == expected
    topics = decode_bag(path)
    assert sum(e["count"] for e in topics.values()) == len(expected)
    assert all(e["errors"] == [] for e in topics.values())
    for topic, entry in topics.items():  # a prefix of what was written
        assert entry["count"] <= len(sent[topic])


def test_recover_to_output_leaves_original_untouched(tmp_path: Path) -> None:
    bag, _ = write_bag(tmp_path / "ep", n=50, close=False)
    bag.flush()
    bag.abort()
    before = sorted((p.name, p.read_bytes()) for p in (tmp_path / "ep").iterdir())
    assert cli.main(["recover", str(tmp_path / "ep"), "--output", str(tmp_path / "fixed")]) == 0
    assert sorted((p.name, p.read_bytes()) for p in (tmp_path / "ep").iterdir()) == before
    with AnyReader([tmp_path / "fixed"]) as reader:
        assert reader.message_count == 150
    assert cli.main(["recover", str(tmp_path / "fixed")]) == 0  # complete: nothing rewritten
    assert sorted(p.name for p in (tmp_path / "fixed").iterdir()) == ["fixed_0.mcap", "metadata.yaml"]


def test_info_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    m = meta(drops={"/follower/joint_states": 3, "/cameras/wrist/image/compressed": 0,
                    "/teleop/intervention": 0})
    write_bag(tmp_path / "ep", episode=m)
    assert cli.main(["info", str(tmp_path / "ep")]) == 0
    out = capsys.readouterr().out
    assert "Storage id:        mcap" in out and "Messages:          120" in out
    assert ("Topic: /follower/joint_states | Type: sensor_msgs/msg/JointState | Count: 40 | "
            "Serialization Format: cdr | Drops: 3") in out
    assert "task:" in out and "pick mug" in out and "outcome is unset" in out
    assert cli.main(["info", str(tmp_path / "ep"), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["message_count"] == 120 and data["episode"]["operator"] == "ana"
    assert {t["name"]: t["drops"] for t in data["topics"]}["/follower/joint_states"] == 3
    assert cli.main(["info", str(tmp_path / "missing")]) == 2  # nothing could be read: one line on stderr
    assert "teleop-flywheel info: error: no such bag directory" in capsys.readouterr().err
    bag, _ = write_bag(tmp_path / "crashed", n=3, close=False)
    bag.abort()
    assert cli.main(["info", str(tmp_path / "crashed")]) == 2
    assert "recover" in capsys.readouterr().err


def test_recover_rejects_non_mcap(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "bad_0.mcap").write_bytes(b"not an mcap file at all")
    assert cli.main(["recover", str(tmp_path / "bad")]) == 2
    assert "teleop-flywheel recover: error: not an MCAP file" in capsys.readouterr().err


_CRASH_WRITER = textwrap.dedent("""
    import sys, time
    from teleop_flywheel.recording.mcap.writer import BagWriter
    from teleop_flywheel.core.episode import EpisodeMeta
    bag = BagWriter(sys.argv[1], episode=EpisodeMeta(episode_name="crash", task="t"))
    bag.add_topic("/t", "std_msgs/msg/String")
    payload = bytes.fromhex("000100000600000068656c6c6f000000")  # std_msgs/String "hello"
    i = 0
    while True:
        now = time.time_ns()
        bag.write("/t", payload, now, time.monotonic_ns(), sequence=i)
        i += 1
        if i == 50:
            print("writing", flush=True)
        time.sleep(0.002)
""")


def test_kill_9_loses_at_most_one_second(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", _CRASH_WRITER, str(tmp_path / "crash")],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "writing"
    time.sleep(2.5)
    killed_at = time.time_ns()
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert not (tmp_path / "crash" / "metadata.yaml").exists()
    report = recover(tmp_path / "crash")
    assert report.messages > 50 and report.end_log_ns is not None
    lost_s = (killed_at - report.end_log_ns) / 1e9
    assert lost_s <= 1.0, f"lost {lost_s:.3f} s of data"
    with AnyReader([tmp_path / "crash"]) as reader:
        assert reader.message_count == report.messages
        assert [reader.deserialize(raw, c.msgtype).data for c, _t, raw in reader.messages()][-1] == "hello"


def test_full_disk_clean_error_earlier_bag_intact(tmp_path: Path) -> None:
    disk = tmp_path / "disk"
    mount_tmpfs(disk, "2m")
    try:
        _, sent = write_bag(disk / "first", n=20, episode=meta("first"))
        first_before = {p.name: p.read_bytes() for p in (disk / "first").iterdir()}
        bag = BagWriter(disk / "second", episode=meta("second"), max_chunk_age_s=0.05)
        bag.add_topic("/big", "sensor_msgs/msg/CompressedImage")
        def noise() -> bytes:  # distinct random payloads: incompressible, even across messages
            return cdr(T["sensor_msgs/msg/CompressedImage"](
                header=_header(MONO0), format="jpeg", data=np.frombuffer(os.urandom(20_000), dtype=np.uint8)))

        with pytest.raises(DiskFullError) as err:
            for i in range(1_000):  # 20 MB into 2 MB
                bag.write("/big", noise(), WALL0 + i, MONO0 + i)
        assert str(disk / "second" / "second_0.mcap") in str(err.value) and "disk full" in str(err.value)
        with pytest.raises(DiskFullError):  # stays failed; nothing half-written afterwards
            bag.write("/big", noise(), WALL0, MONO0)
        bag.abort()
        assert {p.name: p.read_bytes() for p in (disk / "first").iterdir()} == first_before
        with AnyReader([disk / "first"]) as reader:
            assert reader.message_count == 60
        report = recover(disk / "second", output=tmp_path / "second_fixed")  # what fit is kept
        assert report.messages > 0
        with AnyReader([tmp_path / "second_fixed"]) as reader:
            assert reader.message_count == report.messages
    finally:
        unmount(disk)


def test_a_scan_nobody_asked_messages_of_counts_each_chunk_in_place(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """`recover` (no message consumer) reads a chunk's message fields in place, no Message per message,
    and finds what a scan handing out every message finds; the bag it writes is byte for byte the one
    recovered with a Message per message, and Foxglove's reader reads it whole."""
    import shutil  # noqa: PLC0415

    from teleop_flywheel.recording.mcap import scan as scan_module  # noqa: PLC0415

    bag, sent = write_bag(tmp_path / "ep", n=200, episode=meta(), close=False, chunk_size=16 * 1024)
    bag.flush()
    bag.abort()
    path = tmp_path / "ep" / "ep_0.mcap"
    with open(path, "r+b") as f:  # killed mid-chunk
        f.truncate(path.stat().st_size - 3000)
    shutil.copytree(tmp_path / "ep", tmp_path / "ref" / "ep")  # the same name: the same metadata
    handed = scan(path, lambda m: None)
    built: list[int] = []
    real_message, real_chunk = scan_module.message_record, scan_module.chunk_records
    monkeypatch.setattr(scan_module, "message_record", lambda *a: built.append(1) or real_message(*a))
    counted = scan(path)
    assert built == [] and counted.message_count == handed.message_count > 500
    for name in ("counts", "start_log_ns", "end_log_ns", "last_stamp_ns", "channels", "schemas", "metadata",
                 "good_bytes", "bad_chunks", "problems"):
        assert getattr(counted, name) == getattr(handed, name), name
    report = recover(tmp_path / "ep")
    assert built == [] and report.messages == handed.message_count
    monkeypatch.setattr(scan_module, "chunk_records", lambda content, messages=True: real_chunk(content))
    recover(tmp_path / "ref" / "ep")  # a Message per message, as before
    assert path.read_bytes() == (tmp_path / "ref" / "ep" / "ep_0.mcap").read_bytes()
    topics = decode_bag(path)
    assert sum(e["count"] for e in topics.values()) == handed.message_count
    assert all(e["errors"] == [] for e in topics.values())



def test_a_chunk_decompresses_to_its_declared_size_or_is_malformed() -> None:
    """zstd with the size in its frame header (one call) and without it (blocks up to the bound) give
    the same bytes; another size in the header, or bytes beyond the declared size, are Malformed, and
    so is anything after the frame (the block reader fails on it, the one call says so)."""
    import zstandard  # noqa: PLC0415

    from teleop_flywheel.recording.mcap.scan import Malformed  # noqa: PLC0415

    raw = bytes(range(256)) * 4000
    sized = zstandard.ZstdCompressor().compress(raw)
    unsized = zstandard.ZstdCompressor(write_content_size=False).compress(raw)
    assert zstandard.frame_content_size(sized) == len(raw) and zstandard.frame_content_size(unsized) == -1
    for data in (sized, unsized):
        assert decompress("zstd", data, len(raw)) == raw
    with pytest.raises(Malformed, match="after the chunk's zstd frame"):
        decompress("zstd", sized + b"tail", len(raw))
    with pytest.raises(zstandard.ZstdError):
        decompress("zstd", unsized + b"tail", len(raw))
    for data in (sized, unsized):
        with pytest.raises(Malformed, match="declares"):
            decompress("zstd", data, len(raw) - 1)
    with pytest.raises(zstandard.ZstdError):
        decompress("zstd", sized[:20] + bytes(len(sized) - 20), len(raw))
