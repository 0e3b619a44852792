"""Damaged copies of a good bag, for the integrity tests and the mutation fuzz (no ROS import).

Byte-level mutations of the `.mcap` (bit flips anywhere or inside a chosen kind of record,
truncations, zeroed ranges and chunk bodies, a zero-filled tail, duplicated chunks, record lengths
changed, bytes after the closing magic), edits of `metadata.yaml` (a custom_data value, a count,
invalid YAML, missing), rewrites through the writer that declare or carry the wrong thing (a joint
topic declared CompressedImage, an image on a joint topic, bytes that are not a JPEG, a JointState
claiming 0x7fffffff names, the calibration stored as a list), and odd names and file kinds (a name
that is not UTF-8, a FIFO, an empty file or a directory named `.mcap`, a dangling symlink, a bag
directory inside a bag). `fuzz_cases(seed, n)` draws a reproducible mix.

Every function writes a new bag directory `dest` from `src` and never modifies `src`.
"""
from __future__ import annotations

import os
import random
import shutil
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml
from mcap.opcode import Opcode

from teleop_flywheel.core.episode import METADATA_RECORD, EpisodeMeta
from teleop_flywheel.recording.mcap.cdr import compressed_image_cdr
from teleop_flywheel.recording.mcap.metadata import METADATA_FILE, find_mcap
from teleop_flywheel.recording.mcap.reader import open_indexed
from teleop_flywheel.recording.mcap.scan import record_spans
from teleop_flywheel.recording.mcap.writer import START_RECORD, BagWriter


@dataclass(frozen=True)
class Case:
    name: str
    make: Callable[[Path, Path], Path]  # (src bag, dest) -> the damaged bag to validate


def copy_bag(src: Path, dest: Path) -> Path:
    shutil.copytree(src, dest, symlinks=True)
    return dest


def mcap_of(bag: Path) -> Path:
    return find_mcap(bag)[1]


def _edit(src: Path, dest: Path, change: Callable[[bytearray], bytes | bytearray]) -> Path:
    copy_bag(src, dest)
    path = mcap_of(dest)
    path.write_bytes(bytes(change(bytearray(path.read_bytes()))))
    return dest


def flip_bit(offset: int, bit: int) -> Callable[[Path, Path], Path]:
    def make(src: Path, dest: Path) -> Path:
        def change(b: bytearray) -> bytearray:
            b[offset % len(b)] ^= 1 << (bit % 8)
            return b
        return _edit(src, dest, change)
    return make


def flip_in_record(opcode: int, which: int, where: float, bit: int) -> Callable[[Path, Path], Path]:
    """Flip a bit inside the `which`-th top-level record of `opcode` (prefix included), at fraction `where`."""
    def make(src: Path, dest: Path) -> Path:
        spans = record_spans(mcap_of(src), opcode)
        if not spans:
            return copy_bag(src, dest)
        pos, length = spans[which % len(spans)]
        return flip_bit(pos + int(where * (length - 1)), bit)(src, dest)
    return make


def truncate(fraction: float) -> Callable[[Path, Path], Path]:
    return lambda src, dest: _edit(src, dest, lambda b: b[:max(8, int(len(b) * fraction))])


def zero_range(fraction: float, length: int) -> Callable[[Path, Path], Path]:
    def change(b: bytearray) -> bytearray:
        start = int(len(b) * fraction)
        b[start:start + length] = bytes(len(b[start:start + length]))
        return b
    return lambda src, dest: _edit(src, dest, change)


def zero_chunk_body(which: int) -> Callable[[Path, Path], Path]:
    def make(src: Path, dest: Path) -> Path:
        pos, length = record_spans(mcap_of(src), Opcode.CHUNK)[which % len(record_spans(mcap_of(src), Opcode.CHUNK))]
        def change(b: bytearray) -> bytearray:
            b[pos + 9:pos + length] = bytes(length - 9)
            return b
        return _edit(src, dest, change)
    return make


def zero_tail(which: int, extra: int) -> Callable[[Path, Path], Path]:
    """Everything from the start of a chunk on replaced by zeros (and `extra` more): a crash on a
    filesystem that had allocated the blocks."""
    def make(src: Path, dest: Path) -> Path:
        spans = record_spans(mcap_of(src), Opcode.CHUNK)
        pos = spans[which % len(spans)][0]
        return _edit(src, dest, lambda b: b[:pos] + bytes(len(b) - pos + extra))
    return make


def duplicate_chunk(which: int, after_last: bool) -> Callable[[Path, Path], Path]:
    def make(src: Path, dest: Path) -> Path:
        spans = record_spans(mcap_of(src), Opcode.CHUNK)
        pos, length = spans[which % len(spans)]
        def change(b: bytearray) -> bytes:
            chunk = bytes(b[pos:pos + length])
            at = pos + length
            if after_last:  # after the last chunk's message indexes, before whatever follows them
                lp, ll = spans[-1]
                at = next((p for p, _ in record_spans(mcap_of(src)) if p > lp and b[p] != Opcode.MESSAGE_INDEX),
                          lp + ll)
            return bytes(b[:at]) + chunk + bytes(b[at:])
        return _edit(src, dest, change)
    return make


def record_length(which: int, delta: int) -> Callable[[Path, Path], Path]:
    def make(src: Path, dest: Path) -> Path:
        spans = record_spans(mcap_of(src))
        pos, _length = spans[which % len(spans)]
        def change(b: bytearray) -> bytearray:
            (n,) = struct.unpack_from("<Q", b, pos + 1)
            struct.pack_into("<Q", b, pos + 1, max(0, n + delta))
            return b
        return _edit(src, dest, change)
    return make


def append_bytes(data: bytes) -> Callable[[Path, Path], Path]:
    return lambda src, dest: _edit(src, dest, lambda b: b + data)


def yaml_edit(change: Callable[[str], str]) -> Callable[[Path, Path], Path]:
    def make(src: Path, dest: Path) -> Path:
        copy_bag(src, dest)
        path = dest / METADATA_FILE
        path.write_text(change(path.read_text()))
        return dest
    return make


def yaml_custom_value(rng_key: int, rng_char: int) -> Callable[[Path, Path], Path]:
    """Change one character of one custom_data value in metadata.yaml (the MCAP keeps the truth)."""
    def change(text: str) -> str:
        data = yaml.safe_load(text)
        custom = data["rosbag2_bagfile_information"]["custom_data"]
        key = sorted(custom)[rng_key % len(custom)]
        value = str(custom[key]) or "x"
        i = rng_char % len(value)
        custom[key] = value[:i] + ("0" if value[i] != "0" else "1") + value[i + 1:]
        return yaml.safe_dump(data)
    return yaml_edit(change)


def rewrite(types: dict[str, str] | None = None, payload: Callable[[str, int, bytes], bytes] | None = None,
            meta: Callable[[dict[str, str]], dict[str, str]] | None = None,
            topics: dict[str, str] | None = None) -> Callable[[Path, Path], Path]:
    """A consistent rewrite through the writer (valid CRCs) that declares or carries the wrong thing
    (`topics`: channels renamed, old name -> new)."""
    def make(src: Path, dest: Path) -> Path:
        idx = open_indexed(src)
        records = idx.metadata()
        final = meta(dict(records[METADATA_RECORD])) if meta else records[METADATA_RECORD]
        with BagWriter(dest, custom_data=final, fsync=False) as w:
            w.add_metadata(START_RECORD, meta(dict(records[START_RECORD])) if meta else records[START_RECORD])
            names = {}
            for cid, ch in sorted(idx.channels.items()):
                type_name = (types or {}).get(ch.topic, ch.schema_name)
                names[cid] = (topics or {}).get(ch.topic, ch.topic)
                w.add_topic(names[cid], type_name)
            counters: dict[str, int] = {}
            for m in idx.messages():
                topic = names[m.channel_id]
                i = counters[topic] = counters.get(topic, -1) + 1
                w.write(topic, payload(topic, i, m.data) if payload else m.data, m.log_time, m.publish_time, m.sequence)
            w.add_metadata(METADATA_RECORD, final)
        return dest
    return make


def image_on_joint_topic(topic: str, i: int, data: bytes) -> bytes:
    if topic == "/follower/joint_states" and i % 7 == 3:
        return compressed_image_cdr(int.from_bytes(data[4:8], "little") * 10**9, b"\xff\xd8\xff\xe0" + bytes(60))
    return data


def not_a_jpeg(topic: str, i: int, data: bytes) -> bytes:
    if topic.startswith("/cameras/") and i == 5:
        sec, nsec = struct.unpack_from("<iI", data, 4)
        return compressed_image_cdr(sec * 10**9 + nsec, b"this is not a jpeg" * 20, "wrist")
    return data


def huge_name_count(topic: str, i: int, data: bytes) -> bytes:
    if topic == "/follower/joint_command" and i == 10:
        b = bytearray(data)
        (flen,) = struct.unpack_from("<I", b, 12)
        at = 16 + flen
        at += (-(at - 4)) % 4
        struct.pack_into("<I", b, at, 0x7FFFFFFF)
        return bytes(b)
    return data


def calibration_as_list(record: dict[str, str]) -> dict[str, str]:
    meta = EpisodeMeta.from_strings(record)
    record = dict(record)
    record["calibration"] = '[' + ", ".join(f'"{k}"' for k in meta.calibration) + ']'
    return record


def odd_name(src: Path, dest: Path) -> Path:
    """The same bag under a directory name that is not UTF-8 (a Latin-1 disk)."""
    return copy_bag(src, Path(os.fsdecode(os.fsencode(dest) + b"_caf\xe9")))


def fifo_mcap(src: Path, dest: Path) -> Path:
    dest.mkdir()
    (dest / METADATA_FILE).write_bytes((src / METADATA_FILE).read_bytes())
    os.mkfifo(dest / f"{dest.name}_0.mcap")
    return dest


def empty_mcap(src: Path, dest: Path) -> Path:
    copy_bag(src, dest)
    mcap_of(dest).write_bytes(b"")
    return dest


def directory_mcap(src: Path, dest: Path) -> Path:
    dest.mkdir()
    (dest / f"{dest.name}_0.mcap").mkdir()
    return dest


def dangling_mcap(src: Path, dest: Path) -> Path:
    dest.mkdir()
    (dest / f"{dest.name}_0.mcap").symlink_to(dest / "nowhere")
    return dest


def nested_bag(src: Path, dest: Path) -> Path:
    copy_bag(src, dest)
    copy_bag(src, dest / "inner")
    return dest


TARGETED: dict[str, tuple[Callable[[Path, Path], Path], set[str]]] = {
    # name: (make, the reason codes any of which is the right verdict)
    "joint topic declared CompressedImage": (
        rewrite(types={"/follower/joint_states": "sensor_msgs/msg/CompressedImage"}),
        {"SCHEMA_MISMATCH"},
    ),
    "image payload on a joint topic": (rewrite(payload=image_on_joint_topic), {"CORRUPT"}),
    "bytes that are not a JPEG": (rewrite(payload=not_a_jpeg), {"CORRUPT"}),
    "JointState with 0x7fffffff names": (rewrite(payload=huge_name_count), {"CORRUPT"}),
    "calibration stored as a list": (rewrite(meta=calibration_as_list), {"SCHEMA_MISMATCH"}),
}


def fuzz_cases(seed: int, n: int, chunks: int) -> list[Case]:
    """`n` reproducible byte-level and metadata.yaml mutations (for a bag of `chunks` chunks)."""
    rng = random.Random(seed)
    kinds: list[tuple[int, Callable[[], Case]]] = [
        (30, lambda: Case("flip", flip_bit(rng.randrange(1 << 30), rng.randrange(8)))),
        (
            30,
            lambda: (
                lambda op, w: Case(f"flip in {op.name.lower()}", flip_in_record(op, w, rng.random(), rng.randrange(8)))
            )(
                rng.choice(
                    [
                        Opcode.CHUNK,
                        Opcode.CHUNK,
                        Opcode.METADATA,
                        Opcode.MESSAGE_INDEX,
                        Opcode.CHUNK_INDEX,
                        Opcode.STATISTICS,
                        Opcode.FOOTER,
                        Opcode.DATA_END,
                        Opcode.HEADER,
                        Opcode.SCHEMA,
                        Opcode.CHANNEL,
                        Opcode.SUMMARY_OFFSET,
                        Opcode.METADATA_INDEX,
                    ]
                ),
                rng.randrange(chunks),
            ),
        ),
        (8, lambda: Case("truncate", truncate(rng.random()))),
        (6, lambda: Case("zero range", zero_range(rng.random(), rng.choice([1, 8, 64, 4096])))),
        (4, lambda: Case("zero chunk body", zero_chunk_body(rng.randrange(chunks)))),
        (3, lambda: Case("zero tail", zero_tail(rng.randrange(chunks), rng.choice([0, 100_000])))),
        (6, lambda: Case("duplicate chunk", duplicate_chunk(rng.randrange(chunks), rng.random() < 0.5))),
        (5, lambda: Case("record length", record_length(rng.randrange(40), rng.choice([-9, -1, 1, 7, 1 << 20])))),
        (2, lambda: Case("bytes after the magic", append_bytes(bytes([rng.randrange(256)]) * rng.choice([1, 20])))),
        (6, lambda: Case("metadata.yaml custom_data", yaml_custom_value(rng.randrange(100), rng.randrange(100)))),
        (
            2,
            lambda: Case(
                "metadata.yaml count", yaml_edit(lambda t: t.replace("message_count: ", "message_count: 1", 1))
            ),
        ),
        (1, lambda: Case("metadata.yaml not YAML", yaml_edit(lambda t: "rosbag2_bagfile_information: [\n" + t))),
        (1, lambda: Case("odd name", odd_name)),
        (1, lambda: Case("fifo .mcap", fifo_mcap)),
        (1, lambda: Case("empty .mcap", empty_mcap)),
        (1, lambda: Case("directory .mcap", directory_mcap)),
        (1, lambda: Case("dangling .mcap", dangling_mcap)),
        (1, lambda: Case("nested bag", nested_bag)),
    ]
    weights = [w for w, _ in kinds]
    return [rng.choices([k for _, k in kinds], weights)[0]() for _ in range(n)]
