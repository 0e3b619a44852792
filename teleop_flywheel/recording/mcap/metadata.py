"""A bag directory's files: rosbag2 `metadata.yaml` (version 9), the QoS-profile YAML that rosbag2
stores with topics, and where the `.mcap` is (`mcap_file_name`, `find_mcap`: the one lookup).

The two YAML forms are written exactly in rosbag2's shape (key order, v9 string enums, infinite durations as
`{sec: 9223372036, nsec: 854775807}`, block style with indented sequences like yaml-cpp) so
`ros2 bag info/play`, `rosbags` and the data engine all accept our bags as their own.
In metadata.yaml `offered_qos_profiles` is a YAML sequence (v9); in the MCAP channel metadata it
is the same sequence dumped to a string (what rosbag2's `serialize_rclcpp_qos_vector` stores).
"""
from __future__ import annotations

import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from teleop_flywheel.core.errors import yaml_problem
from teleop_flywheel.core.files import create_exclusive
from teleop_flywheel.recording.mcap.exceptions import (
    BadMetadataError,
    BagNotFoundError,
    MissingMetadataError,
    NotMcapError,
)
from teleop_flywheel.recording.mcap.scan import open_regular

METADATA_FILE = "metadata.yaml"
VERSION = 9
STORAGE_ID = "mcap"
DEFAULT_DISTRO = "kilted"
INFINITE_NS = 2**63 - 1  # RMW_DURATION_INFINITE
NS = 1_000_000_000

HISTORY = ("system_default", "keep_last", "keep_all", "unknown")
RELIABILITY = ("system_default", "reliable", "best_effort", "unknown", "best_available")
DURABILITY = ("system_default", "transient_local", "volatile", "unknown", "best_available")
LIVELINESS = ("system_default", "automatic", "manual_by_topic", "unknown", "best_available")


def ros_distro() -> str:
    """The distro name rosbag2 records (`ROS_DISTRO`, else the Kilted wheels we run on)."""
    return os.environ.get("ROS_DISTRO") or DEFAULT_DISTRO


def _duration(ns: int) -> dict[str, int]:
    return {"sec": ns // NS, "nsec": ns % NS}


def _duration_ns(node: Mapping[str, Any]) -> int:
    return int(node["sec"]) * NS + int(node["nsec"])


@dataclass(frozen=True)
class Qos:
    """A ROS-free QoS profile in rosbag2 v9 vocabulary; durations in ns (INFINITE_NS = none)."""

    history: str = "keep_last"
    depth: int = 10
    reliability: str = "reliable"
    durability: str = "volatile"
    deadline_ns: int = INFINITE_NS
    lifespan_ns: int = INFINITE_NS
    liveliness: str = "automatic"
    liveliness_lease_duration_ns: int = INFINITE_NS
    avoid_ros_namespace_conventions: bool = False

    def __post_init__(self) -> None:
        for value, allowed, what in ((self.history, HISTORY, "history"),
                                     (self.reliability, RELIABILITY, "reliability"),
                                     (self.durability, DURABILITY, "durability"),
                                     (self.liveliness, LIVELINESS, "liveliness")):
            if value not in allowed:
                raise ValueError(f"QoS {what} must be one of {allowed}, got {value!r}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "history": self.history,
            "depth": int(self.depth),
            "reliability": self.reliability,
            "durability": self.durability,
            "deadline": _duration(self.deadline_ns),
            "lifespan": _duration(self.lifespan_ns),
            "liveliness": self.liveliness,
            "liveliness_lease_duration": _duration(self.liveliness_lease_duration_ns),
            "avoid_ros_namespace_conventions": bool(self.avoid_ros_namespace_conventions),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Qos:
        return cls(
            history=str(d["history"]), depth=int(d["depth"]), reliability=str(d["reliability"]),
            durability=str(d["durability"]), deadline_ns=_duration_ns(d["deadline"]),
            lifespan_ns=_duration_ns(d["lifespan"]), liveliness=str(d["liveliness"]),
            liveliness_lease_duration_ns=_duration_ns(d["liveliness_lease_duration"]),
            avoid_ros_namespace_conventions=bool(d["avoid_ros_namespace_conventions"]),
        )


class _Rosbag2Dumper(yaml.SafeDumper):
    """yaml-cpp's look: sequences indented under their key, `~` for null, `""` for empty."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    if value == "":
        return dumper.represent_scalar("tag:yaml.org,2002:str", "", style='"')
    return dumper.represent_str(value)


_Rosbag2Dumper.add_representer(str, _represent_str)
_Rosbag2Dumper.add_representer(type(None), lambda d, _v: d.represent_scalar("tag:yaml.org,2002:null", "~"))


def dump_yaml(data: Any) -> str:
    return yaml.dump(data, Dumper=_Rosbag2Dumper, sort_keys=False, default_flow_style=False,
                     width=2**31 - 1, allow_unicode=True)


def qos_yaml(profiles: Sequence[Qos]) -> str:
    """The `offered_qos_profiles` string of MCAP channel metadata ('' for no profiles)."""
    if not profiles:
        return ""
    return dump_yaml([p.to_dict() for p in profiles]).rstrip("\n")


def parse_qos_yaml(text: str) -> list[Qos]:
    """Inverse of `qos_yaml` (also accepts rosbag2's own strings)."""
    if not text.strip():
        return []
    return [Qos.from_dict(d) for d in yaml.safe_load(text) or []]


@dataclass
class TopicRecord:
    """One topic as metadata.yaml describes it."""

    name: str
    type: str
    type_description_hash: str = ""
    offered_qos_profiles: list[Qos] = field(default_factory=list)
    serialization_format: str = "cdr"
    message_count: int = 0


def bagfile_information(
    file_name: str,
    topics: Sequence[TopicRecord],
    start_ns: int | None,
    end_ns: int | None,
    custom_data: Mapping[str, str] | None,
    distro: str | None = None,
) -> dict[str, Any]:
    """The `rosbag2_bagfile_information` mapping (starting_time/duration from log times)."""
    start = int(start_ns or 0)
    duration = max(0, int(end_ns or 0) - start) if start_ns is not None else 0
    total = sum(t.message_count for t in topics)
    return {
        "version": VERSION,
        "storage_identifier": STORAGE_ID,
        "duration": {"nanoseconds": duration},
        "starting_time": {"nanoseconds_since_epoch": start},
        "message_count": total,
        "topics_with_message_count": [
            {
                "topic_metadata": {
                    "name": t.name,
                    "type": t.type,
                    "serialization_format": t.serialization_format,
                    "offered_qos_profiles": [q.to_dict() for q in t.offered_qos_profiles],
                    "type_description_hash": t.type_description_hash,
                },
                "message_count": t.message_count,
            }
            for t in topics
        ],
        "compression_format": "",
        "compression_mode": "",
        "relative_file_paths": [file_name],
        "files": [
            {
                "path": file_name,
                "starting_time": {"nanoseconds_since_epoch": start},
                "duration": {"nanoseconds": duration},
                "message_count": total,
            }
        ],
        "custom_data": dict(custom_data) if custom_data else None,
        "ros_distro": distro or ros_distro(),
    }


def write_metadata_yaml(bag_dir: Path, info: Mapping[str, Any]) -> Path:
    """Create `<bag_dir>/metadata.yaml` exclusively (O_EXCL|O_NOFOLLOW, fsynced): a bag's metadata is
    written once and never overwritten, and no predictable temp name exists for a planted symlink."""
    path = Path(bag_dir) / METADATA_FILE
    return create_exclusive(path, dump_yaml({"rosbag2_bagfile_information": dict(info)}))


# libyaml's safe loader where PyYAML was built with it: reading a fleet's bags is mostly parsing
# metadata.yaml, ~25 ms a bag in pure Python.
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def read_metadata_yaml(bag_dir: Path) -> dict[str, Any]:
    """The `rosbag2_bagfile_information` mapping of a bag directory, with a clear error."""
    path = Path(bag_dir) / METADATA_FILE
    try:
        with open_regular(path) as f:  # a FIFO named metadata.yaml must not block a reader
            data = yaml.load(f.read().decode("utf-8"), Loader=_SAFE_LOADER)
    except FileNotFoundError:
        raise MissingMetadataError(f"{path}: no metadata.yaml") from None
    except (yaml.YAMLError, UnicodeDecodeError, NotMcapError) as exc:
        raise BadMetadataError(f"{path}: not valid YAML ({yaml_problem(exc)})") from exc
    if not isinstance(data, dict) or not isinstance(data.get("rosbag2_bagfile_information"), dict):
        raise BadMetadataError(f"{path}: no rosbag2_bagfile_information mapping")
    return data["rosbag2_bagfile_information"]








def mcap_file_name(bag_name: str) -> str:
    """`<name>_0.mcap`: the file rosbag2 (and `BagWriter`) writes in bag directory `<name>`."""
    return f"{bag_name}_0.mcap"


def find_mcap(bag: str | os.PathLike[str]) -> tuple[Path, Path]:
    """(bag directory, its .mcap file) from a bag directory or the .mcap file itself.

    A directory's file is `<name>_0.mcap` if present, else its only `*.mcap` (a renamed bag
    directory); none, or several without `<name>_0.mcap`, is an error that names them. Only
    regular files count: a FIFO or device named `.mcap` is an error, never opened (it would block).
    """
    bag = Path(bag)
    if bag.is_file():
        return bag.parent, bag
    if not bag.is_dir():
        if bag.exists() or bag.is_symlink():
            raise BagNotFoundError(f"{bag}: {_kind(bag)}, not a bag directory or .mcap file")
        raise BagNotFoundError(f"{bag}: no such bag directory (or .mcap file)")
    expected = bag / mcap_file_name(bag.name)
    if expected.is_file():
        return bag, expected
    candidates = sorted(bag.glob("*.mcap"))
    found = [p for p in candidates if p.is_file()]
    if len(found) != 1:
        odd = [f"{p.name} ({_kind(p)})" for p in candidates if not p.is_file()]
        names = ", ".join([p.name for p in found] + odd) or "none"
        raise BagNotFoundError(f"{bag}: expected {expected.name} or a single .mcap file, found {names}")
    return bag, found[0]


def _kind(path: Path) -> str:
    """What a path that is not a regular file is, for an error message."""
    try:
        mode = path.lstat().st_mode
    except OSError as exc:
        return exc.strerror or "unreadable"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISLNK(mode):
        return "a dangling symlink" if not path.exists() else "a symlink"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"
