"""Message definitions and type hashes from the installed ROS interface packages (no ROS import).

A bag is only self-describing if every schema carries the full `.msg` text of its type and of
everything it depends on, because readers (Foxglove, `mcap_ros2`, `rosbags`) decode CDR from
that text alone. rosbag2 builds this text from the `.msg` files under
`<prefix>/share/<pkg>/msg/`, and so do we, so a bag written here decodes exactly like one
written by `ros2 bag record`:

    <top-level .msg text>
    ================================================================================
    MSG: std_msgs/Header
    <Header.msg text>
    ================================================================================
    MSG: builtin_interfaces/Time
    <Time.msg text>

Dependencies are appended depth first, each once, in sorted order per level, each after a
newline (rosbag2's order and spacing). The `MSG:` line names the type exactly as the referring
`.msg` file writes it (`std_msgs/Header`), or `pkg/Type` for a same-package reference written
without a package (`DiagnosticStatus` in diagnostic_msgs) — rosbag2's
`local_message_definition_source` does the same, and Foxglove's parser (`@foxglove/rosmsg`)
resolves dependencies by that exact name: `MSG: std_msgs/msg/Header` leaves a JointState
undecodable there.
The RIHS01 type hash (`type_description_hash` / `topic_type_hash`) comes from the `.json` type
description that rosidl installs beside each `.msg`.

Prefixes searched: `AMENT_PREFIX_PATH` (like ament_index), else `sys.prefix` (the venv the ROS
wheels were pip-installed into).
"""
from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from teleop_flywheel.recording.mcap.exceptions import DefinitionNotFoundError

SEPARATOR = "=" * 80
PRIMITIVE_TYPES = frozenset(
    {"bool", "byte", "char", "float32", "float64", "int8", "uint8", "int16", "uint16", "int32",
     "uint32", "int64", "uint64", "string", "wstring"}
)
# The type token at the start of a field line: "std_msgs/Header header", "float64[] position",
# "string<=10 name", "uint8[<=4] x". Constants ("uint8 OK=0") also match and are primitives.
_FIELD_TYPE = re.compile(r"^\s*([A-Za-z][A-Za-z0-9_/]*)(?:<=\d+)?(?:\[[^\]]*\])?\s+\S", re.MULTILINE)




@dataclass(frozen=True)
class MessageDefinition:
    """What a bag needs to describe one message type."""

    type_name: str  # "sensor_msgs/msg/JointState"
    text: str  # full ros2msg text with dependencies
    type_hash: str  # "RIHS01_…" ("" if the package installed no type description)
    encoding: str = "ros2msg"


def prefixes() -> list[Path]:
    """Install prefixes to search, in priority order."""
    raw = os.environ.get("AMENT_PREFIX_PATH", "")
    found = [Path(p) for p in raw.split(os.pathsep) if p]
    return found or [Path(sys.prefix)]


def normalize_type(type_name: str) -> str:
    """'std_msgs/Header' or 'std_msgs/msg/Header' → 'std_msgs/msg/Header'."""
    parts = type_name.strip().split("/")
    if len(parts) == 2:
        return f"{parts[0]}/msg/{parts[1]}"
    if len(parts) == 3 and parts[1] == "msg":
        return type_name.strip()
    raise ValueError(f"not a message type name: {type_name!r} (expected pkg/msg/Type)")


def _interface_file(type_name: str, suffix: str) -> Path:
    pkg, _, name = normalize_type(type_name).split("/")
    searched = []
    for prefix in prefixes():
        candidate = prefix / "share" / pkg / "msg" / f"{name}{suffix}"
        if candidate.is_file():
            return candidate
        searched.append(str(candidate))
    raise DefinitionNotFoundError(
        f"no {suffix} file for {type_name}; looked in: {', '.join(searched)} "
        "(is the interface package installed and AMENT_PREFIX_PATH set?)"
    )


@cache
def msg_text(type_name: str) -> str:
    """The verbatim `.msg` file of one type (no dependencies)."""
    return _interface_file(type_name, ".msg").read_text(encoding="utf-8")


def dependencies(type_name: str) -> list[str]:
    """Direct non-primitive field types of a `.msg` as written there (`pkg/Type` for bare names), sorted."""
    pkg = normalize_type(type_name).split("/")[0]
    deps: set[str] = set()
    for line in msg_text(type_name).splitlines():
        line = line.split("#", 1)[0]
        match = _FIELD_TYPE.match(line)
        if not match:
            continue
        token = match.group(1)
        if token in PRIMITIVE_TYPES:
            continue
        deps.add(token if "/" in token else f"{pkg}/{token}")
    return sorted(deps)


@cache
def full_text(type_name: str) -> str:
    """The full ros2msg schema text rosbag2 writes for `type_name`."""
    root = normalize_type(type_name)
    seen: set[str] = {root}

    def append(current: str) -> str:
        out = msg_text(current)
        for dep in dependencies(current):
            if normalize_type(dep) in seen:
                continue
            seen.add(normalize_type(dep))
            out += f"\n{SEPARATOR}\nMSG: {dep}\n" + append(dep)
        return out

    return append(root)


@cache
def type_hash(type_name: str) -> str:
    """RIHS01 hash of `type_name` from its installed type description ('' when none installed)."""
    name = normalize_type(type_name)
    try:
        path = _interface_file(name, ".json")
    except DefinitionNotFoundError:
        return ""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise DefinitionNotFoundError(f"{path}: unreadable type description ({exc})") from exc
    for entry in data.get("type_hashes", []):
        if entry.get("type_name") == name:
            return str(entry["hash_string"])
    return ""


def definition(type_name: str) -> MessageDefinition:
    """Everything the bag writer needs for one type."""
    name = normalize_type(type_name)
    return MessageDefinition(type_name=name, text=full_text(name), type_hash=type_hash(name))
