"""What the recorder is configured with and told about an episode (no ROS): `RecorderConfig` (fixed
for its life), `EpisodeFields` (what the operator or session says), a recorded stream's counters
(`TopicEntry`) and the calibration documents copied into the metadata.

Calibration files are given as `ROLE=PATH` (stored under the role, e.g. `follower`) or a plain
`PATH` (stored under the file's stem, as bags did before roles).
"""
from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from teleop_flywheel.core.episode import CALIBRATION_ROLES
from teleop_flywheel.core.errors import FlywheelError
from teleop_flywheel.core.topics import normalize_namespace, qualify
from teleop_flywheel.recording.mcap.cdr import SequenceTracker
from teleop_flywheel.recording.mcap.metadata import Qos
from teleop_flywheel.recording.recorder import clock_probe

LATENCY_WINDOW = 64  # a camera's last receive-minus-stamp latencies kept for the status

SAFE_NAME = r"[A-Za-z0-9_.-]+"
OUTCOMES = ("", "success", "failure")  # "" = unset (stored as "unset")
Log = Callable[[str, str], None]  # (level "info" | "warning" | "error", message)


class RecordingError(FlywheelError, RuntimeError):
    """An episode could not be started, stopped or discarded; the message says why."""


@dataclass(frozen=True)
class RecorderConfig:
    """Fixed for the recorder's life: where data goes and what is recorded."""

    output_dir: Path
    topics: tuple[str, ...] = ()
    cameras: tuple[str, ...] = ()
    episode_prefix: str = "episode"
    chunk_size_mb: float = 1.0
    max_chunk_age_s: float = 0.5
    fsync: bool = True
    calibration_files: tuple[str, ...] = ()
    ptp_probe: str = ""
    namespace: str = ""  # the rig's ROS namespace ("/rig_a"; "" = none): relative topics resolve in it

    def __post_init__(self) -> None:
        if not re.fullmatch(SAFE_NAME, self.episode_prefix):
            raise ValueError(f"episode_prefix {self.episode_prefix!r} must be letters, digits, '-', '_' or '.'")
        clock_probe.check_probe(self.ptp_probe)
        object.__setattr__(self, "namespace", normalize_namespace(self.namespace))
        object.__setattr__(self, "topics", tuple(qualify(t, self.namespace) for t in self.topics))


@dataclass
class EpisodeFields:
    """What the operator or the session says about an episode (start: the first block; stop: all)."""

    task: str = ""
    operator: str = ""
    rig_id: str = ""
    robot_type: str = "so101_follower"
    session_kind: str = "teleop"
    policy_checkpoint: str = ""  # empty: the checkpoint ids seen on /policy/joint_command
    protocol_hash: str = ""
    condition: str = ""
    ptp_offset_ns: int | None = None  # measured elsewhere; None: ask the probe, if any
    outcome: str = ""  # success | failure; "" = unset
    attempts: int = 0  # 0 = unset
    failure_label: str = ""
    machine_check: str = ""


@dataclass
class TopicEntry:
    """One recorded stream and its counters (this episode; `window_count` since the last status)."""

    name: str
    type: str
    has_header: bool
    offered: list[Qos]
    tracker: SequenceTracker = field(default_factory=SequenceTracker)
    count: int = 0
    drops: int = 0
    window_count: int = 0
    camera: str | None = None  # the camera's name for a camera image stream
    last_recv_ns: int = 0  # wall clock: is the stream live at stop?
    state: bool = False  # a latched state topic (core.topics.STATE_TOPICS): its latest message opens each episode
    latest: tuple[bytes, int, int] | None = None  # a state topic's latest (data, source stamp, sequence number)
    latencies_ns: deque[int] = field(default_factory=lambda: deque(maxlen=LATENCY_WINDOW))  # receive − stamp


def read_calibrations(files: Sequence[str]) -> dict[str, Any]:
    """{role or file stem: calibration document} of `ROLE=PATH` / `PATH` entries (empty ones skipped)."""
    out: dict[str, Any] = {}
    for entry in files:
        if not entry:
            continue
        role, sep, text = entry.partition("=")
        if not sep or role not in CALIBRATION_ROLES:
            role, text = "", entry
        path = Path(text).expanduser()
        try:
            out[role or path.stem] = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError) as exc:
            raise RecordingError(f"calibration file {path}: {exc}") from exc
    return out
