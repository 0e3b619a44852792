"""Episode metadata: the contract between the recorder, the data engine and the reports.

Stored twice in every bag, identically: as the MCAP metadata record named
`METADATA_RECORD` and as `custom_data` in `metadata.yaml`. Both are string→string maps,
so structured fields are JSON-encoded strings. Nothing here is ever defaulted into a
claim: an outcome nobody set is `"unset"`, an intervention nobody labelled has
`trigger: None`, and the validator rejects both.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from teleop_flywheel.core.errors import UnsafeNameError
from teleop_flywheel.core.labels import TRIGGER_LABELS
from teleop_flywheel.core.names import check_identifier, check_text
from teleop_flywheel.core.topics import is_ros_name, strip_namespace

METADATA_RECORD = "teleop_flywheel.episode"
# The MCAP metadata record of a bag `export --to mcap` wrote from a dataset: where it came from. Such
# a bag keeps no receive times, clock samples or PTP offsets (a dataset has none), and says so.
EXPORT_RECORD = "teleop_flywheel.export"
# EpisodeMeta.extra key: camera -> the publisher GIDs (hex) its image topic came from this episode, in the
# order first seen. A camera process restarted publishes under a new GID: for a camera driver that is not
# ours (ours says its instance in every frame, `frame_meta`) this is the validator's camera instance.
CAMERA_PUBLISHERS = "camera_publishers"
# EpisodeMeta.extra key: topic -> how many messages stamped before the episode's start arrived during it
# (not recorded: they belong to no episode). Absent when none did.
BEFORE_START = "before_start"
SCHEMA_VERSION = 1
OUTCOMES = ("success", "failure", "unset")
CALIBRATION_ROLES = ("leader", "follower")
# A gap between one operator's episodes at a station this long or longer is a break, not a scene
# reset: the same rule for the offline throughput (`stats`) and the live reset-time metric.
BREAK_S = 600.0

# The name-bearing fields (`core/names.py`): identifiers, and text.
IDENTIFIER_FIELDS = ("episode_name", "rig_id", "robot_type", "session_kind")
# A checkpoint id names a directory (`lerobot:<dir>:<hash>`): text, whatever the directory is called.
TEXT_FIELDS = ("task", "operator", "policy_checkpoint", "condition", "failure_label")
# Fields stored as JSON strings in the flat string map.
_JSON_FIELDS = ("calibration", "cameras", "interventions", "clock_start", "clock_end", "drops", "topics", "extra",
                "clock_samples", "corrections", "task_spec", "outcome_check")
# Written only when set: bags recorded before these fields existed read back unchanged, and an
# episode recorded without a task spec has the same content id as before specs existed.
_OMITTED_WHEN_EMPTY = ("corrections", "task_spec", "task_spec_id", "outcome_check")
# `stamp_clock`: the clock of every header stamp and recorded event time in the bag. "ros" (the
# system clock, SPEC §4 revised); "" in older bags, whose stamps are CLOCK_MONOTONIC: readers refuse
# them and `teleop-flywheel migrate` (recording/mcap/upgrade.py) puts them on ROS time.
STAMP_CLOCK_ROS = "ros"
_INT_FIELDS = ("schema_version", "started_mono_ns", "stopped_mono_ns", "started_ros_ns", "stopped_ros_ns")
_OPTIONAL_INT_FIELDS = ("attempts", "ptp_offset_ns")


@dataclass
class Intervention:
    """One takeover: human authority from start_ns to end_ns (None while still running). The same
    record describes a teleop-mode correction span (`EpisodeMeta.corrections`): the operator marked,
    with the pedal, a stretch where they reached in to fix something; authority never changed."""

    id: int
    start_ns: int
    end_ns: int | None = None
    trigger: str | None = None

    def __post_init__(self) -> None:
        if self.trigger is not None and self.trigger not in TRIGGER_LABELS:
            raise ValueError(f"intervention {self.id}: unknown trigger label {self.trigger!r}")

    @property
    def labelled(self) -> bool:
        return self.trigger is not None


@dataclass
class EpisodeMeta:
    """Everything a recorded episode says about itself besides its messages."""

    episode_name: str
    task: str = ""
    operator: str = ""
    rig_id: str = ""
    robot_type: str = "so101_follower"
    session_kind: str = "teleop"
    software_version: str = ""
    policy_checkpoint: str = ""
    calibration: dict[str, Any] = field(default_factory=dict)  # role -> calibration document (see calibration_by_role)
    cameras: list[str] = field(default_factory=list)
    topics: list[str] = field(default_factory=list)
    outcome: str = "unset"
    attempts: int | None = None
    failure_label: str = ""
    interventions: list[Intervention] = field(default_factory=list)
    clock_start: dict[str, int] = field(default_factory=dict)
    clock_end: dict[str, int] = field(default_factory=dict)
    ptp_offset_ns: int | None = None
    drops: dict[str, int] = field(default_factory=dict)
    started_mono_ns: int = 0
    stopped_mono_ns: int = 0
    protocol_hash: str = ""
    condition: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION
    stamp_clock: str = STAMP_CLOCK_ROS  # "" only in older bags (refused by readers)
    clock_samples: list[dict[str, int]] = field(default_factory=list)  # ClockMapping dicts sampled through the episode
    # Start/stop in ROS time, the clock of header stamps and intervention times;
    # started/stopped_mono_ns stay CLOCK_MONOTONIC (durations, clock samples).
    started_ros_ns: int = 0
    stopped_ros_ns: int = 0
    namespace: str = ""  # the rig's ROS namespace ("/rig_a"): recorded topic names carry it, readers strip it
    # Teleop-mode corrections (the pedal pressed while the human teleoperates: "I reached in to fix
    # something"), labelled like interventions; their own ids (1, 2, …), times like interventions'.
    corrections: list[Intervention] = field(default_factory=list)
    # The task spec the rig recorded under (`core/task_spec.py`): its canonical content, so the
    # validator judges the episode by the spec it was recorded against, and its content id.
    task_spec: dict[str, Any] = field(default_factory=dict)
    task_spec_id: str = ""
    # The spec's success predicate on the final state, judged at stop beside the operator's flag:
    # {"passed": bool, "detail": str}; empty when no spec was set.
    outcome_check: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.outcome not in OUTCOMES:
            raise ValueError(f"outcome must be one of {OUTCOMES}, got {self.outcome!r}")

    def to_strings(self) -> dict[str, str]:
        """The flat string map written to MCAP metadata and metadata.yaml custom_data."""
        raw = asdict(self)
        out: dict[str, str] = {}
        for key, value in raw.items():
            if key in _OMITTED_WHEN_EMPTY and not value:
                continue
            if key in _JSON_FIELDS:
                out[key] = json.dumps(value, sort_keys=True)
            elif value is None:
                out[key] = ""
            else:
                out[key] = str(value)
        return out

    @classmethod
    def from_strings(cls, data: dict[str, str]) -> EpisodeMeta:
        """Inverse of `to_strings`; unknown keys go to `extra` so newer bags still load."""
        known = set(cls.__dataclass_fields__)
        kwargs: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        for key, value in data.items():
            if key not in known:
                extra[key] = value
            elif key in _JSON_FIELDS:
                kwargs[key] = json.loads(value) if value else None
            elif key in _INT_FIELDS:
                kwargs[key] = int(value) if value else 0
            elif key in _OPTIONAL_INT_FIELDS:
                kwargs[key] = int(value) if value not in ("", "None") else None
            else:
                kwargs[key] = value
        kwargs = {k: v for k, v in kwargs.items() if v is not None or k in _OPTIONAL_INT_FIELDS}
        kwargs["interventions"] = [Intervention(**i) for i in kwargs.get("interventions") or []]
        kwargs["corrections"] = [Intervention(**i) for i in kwargs.get("corrections") or []]
        merged_extra = dict(kwargs.get("extra") or {})
        merged_extra.update(extra)
        kwargs["extra"] = merged_extra
        meta = cls(**kwargs)
        meta.check_names()
        return meta

    def check_names(self) -> None:
        """UnsafeNameError naming the first field whose name could be read as a path (`core/names.py`):
        run where metadata is decoded (`from_strings`), so a recording's names are data, never paths."""
        for key in IDENTIFIER_FIELDS:
            check_identifier(key, getattr(self, key))
        for key in TEXT_FIELDS:
            check_text(key, getattr(self, key))
        # Fields of the wrong structure are the validator's SCHEMA_MISMATCH; every name in them is checked.
        for cam in self.cameras if isinstance(self.cameras, list) else ():
            if isinstance(cam, str):
                check_identifier("camera", cam, empty=False)
        for names in (self.topics, self.drops):
            for name in names if isinstance(names, (list, dict)) else ():
                if isinstance(name, str) and not is_ros_name(name):
                    raise UnsafeNameError("stream", name, "not a ROS topic name (tokens of letters, digits and '_')")
        if isinstance(self.namespace, str) and self.namespace != "" and not is_ros_name(self.namespace):
            raise UnsafeNameError("namespace", self.namespace, "not a ROS namespace (tokens of letters, digits, '_')")

    def calibration_by_role(self) -> dict[str, Any]:
        """{role: calibration document} for each of CALIBRATION_ROLES this episode recorded.

        `calibration` is keyed by role: `{"leader": {...}, "follower": {...}}` (each document as in
        the arm's calibration YAML). Bags recorded before keyed it by the file's stem
        (`{"follower_sim": {...}}`): a stem that names exactly one role is read as that role,
        unless a key is the role itself or two stems name it. A role left out is unknown here.
        """
        out = {role: doc for role, doc in self.calibration.items() if role in CALIBRATION_ROLES}
        for role in CALIBRATION_ROLES:
            stems = [k for k in self.calibration if k not in CALIBRATION_ROLES
                     and [r for r in CALIBRATION_ROLES if r in k] == [role]]
            if role not in out and len(stems) == 1:
                out[role] = self.calibration[stems[0]]
        return out

    def without_namespace(self) -> EpisodeMeta:
        """A copy whose topic names (`topics`, `drops`) have the rig's namespace stripped, as the
        reader presents the bag's topics (`core.topics.strip_namespace`)."""
        if not self.namespace:
            return self
        return replace(self, topics=[strip_namespace(t, self.namespace) for t in self.topics],
                       drops={strip_namespace(t, self.namespace): n for t, n in self.drops.items()})

    @property
    def unlabelled_interventions(self) -> list[Intervention]:
        return [i for i in self.interventions if not i.labelled]

    @property
    def unlabelled_corrections(self) -> list[Intervention]:
        return [c for c in self.corrections if not c.labelled]
