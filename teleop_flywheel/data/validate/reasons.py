"""What the validator can say about an episode: reason codes, a reason, the thresholds, and what a
user supplies for foreign bags (no ROS import).

Codes (thresholds: `config/validate.yaml`, documented there and in docs/validate.md):
MISSING_STREAM, FRAME_GAP, CLOCK_OFFSET, CLOCK_STEP, CLOCK_DRIFT, DURATION_OUT_OF_RANGE, OUTCOME_UNSET,
OUTCOME_MISMATCH, UNLABELLED_INTERVENTION, DEAD_AIR, SERVO_FAULT, FOLLOWER_OUTRUN, SCHEMA_MISMATCH, TRUNCATED,
CORRUPT.
OUTCOME_MISMATCH and the spec's thresholds need a task spec (`task_checks.py`); CLOCK_DRIFT is
per episode (the PTP offset moved) and per session (`session_drift.py`). UNSAFE_NAME: a name in the
bag that could be read as a path (`core/names.py`), naming the field.

Warnings are a third outcome, never a rejection: CAMERA_LAG_UNKNOWN (too little motion to tell a
camera's lag from its content), TRACKING_LAG (the follower lags its command beyond a bound; the gripper's
grasp at its force limit left out),
START_OUT_OF_REGION (the first follower pose outside the spec's start region),
OUTCOME_MISMATCH kept under `trust_operator`, and EXPORTED (a bag `export --to mcap` wrote from a
dataset: the clock checks had nothing to check).
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from teleop_flywheel.core.bag_topics import (
    AUTHORITY,
    FOLLOWER_COMMAND,
    FOLLOWER_STATE,
    INTERVENTION,
    LEADER_FEEDBACK,
    LEADER_STATE,
    PEDAL_JOY,
    POLICY_INFERENCE,
)
from teleop_flywheel.core.errors import yaml_problem
from teleop_flywheel.core.names import UNSAFE_NAME
from teleop_flywheel.core.resources import config_path
from teleop_flywheel.core.task_spec import TaskSpec
from teleop_flywheel.data.errors import ConfigError
from teleop_flywheel.recording.mcap.reader import CORRUPT, TRUNCATED

MISSING_STREAM = "MISSING_STREAM"
FRAME_GAP = "FRAME_GAP"
CLOCK_OFFSET = "CLOCK_OFFSET"
CLOCK_STEP = "CLOCK_STEP"
DURATION_OUT_OF_RANGE = "DURATION_OUT_OF_RANGE"
OUTCOME_UNSET = "OUTCOME_UNSET"
UNLABELLED_INTERVENTION = "UNLABELLED_INTERVENTION"
DEAD_AIR = "DEAD_AIR"
SCHEMA_MISMATCH = "SCHEMA_MISMATCH"
SERVO_FAULT = "SERVO_FAULT"
OUTCOME_MISMATCH = "OUTCOME_MISMATCH"
CLOCK_DRIFT = "CLOCK_DRIFT"
FOLLOWER_OUTRUN = "FOLLOWER_OUTRUN"
# UNSAFE_NAME: a name read from the bag (camera, stream, task, operator, rig, checkpoint, episode, ...) that
# could be read as a path (`core/names.py`): always a rejection, convert and ingest refuse it whatever their flags.
CODES = (MISSING_STREAM, FRAME_GAP, CLOCK_OFFSET, CLOCK_STEP, CLOCK_DRIFT, DURATION_OUT_OF_RANGE, OUTCOME_UNSET,
         OUTCOME_MISMATCH, UNLABELLED_INTERVENTION, DEAD_AIR, SERVO_FAULT, FOLLOWER_OUTRUN, SCHEMA_MISMATCH, TRUNCATED,
         CORRUPT, UNSAFE_NAME)
CAMERA_LAG_UNKNOWN = "CAMERA_LAG_UNKNOWN"
TRACKING_LAG = "TRACKING_LAG"
START_OUT_OF_REGION = "START_OUT_OF_REGION"
EXPORTED = "EXPORTED"
WARNING_CODES = (CAMERA_LAG_UNKNOWN, TRACKING_LAG, START_OUT_OF_REGION, EXPORTED)


@dataclass
class Reason:
    code: str
    detail: str
    numbers: dict[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        return f"{self.code}({self.detail})"


@dataclass
class ValidateConfig:
    fps: float = 30.0
    max_gap_s: float | None = None
    required_topics: list[str] = field(default_factory=lambda: [
        FOLLOWER_STATE, FOLLOWER_COMMAND, AUTHORITY])
    min_messages: int = 2
    event_topics: list[str] = field(default_factory=lambda: [PEDAL_JOY, INTERVENTION, POLICY_INFERENCE])
    gap_topics_extra: list[str] = field(default_factory=lambda: [LEADER_STATE, LEADER_FEEDBACK])
    min_duration_s: float = 2.0
    max_duration_s: float = 600.0
    min_latency_ms: float = -1.0
    max_camera_latency_ms: float = 25.0
    max_joint_latency_ms: float = 10.0
    max_ptp_offset_ms: float = 1.0
    max_leading_dead_s: float = 2.0
    max_trailing_dead_s: float = 2.0
    max_internal_dead_s: float = 5.0
    camera_lag_max_ms: float = 15.0
    camera_lag_max_stderr_ms: float = 12.0
    camera_lag_pool_min_episodes: int = 2
    camera_lag_search_ms: float = 200.0
    tracking_lag_max_ms: float = 150.0
    tracking_outrun_max_share: float = 0.15
    command_topic: str = FOLLOWER_COMMAND
    cameras: list[str] | None = None
    min_rate_hz: dict[str, float] = field(default_factory=dict)  # topic -> minimum mean rate (MISSING_STREAM)
    trust_operator: bool = False  # OUTCOME_MISMATCH is a warning, not a rejection
    max_ptp_drift_ms: float = 0.5
    session_drift_max_ms: float = 1.0
    session_lag_drift_max_ms: float = 10.0
    session_drift_min_t: float = 4.0
    session_drift_min_episodes: int = 4

    @property
    def gap_bound_s(self) -> float:
        return 2.0 / self.fps if self.max_gap_s is None else float(self.max_gap_s)

    @classmethod
    def load(cls, path: str | Path | None = None) -> ValidateConfig:
        """Defaults, overridden by the YAML file (the shipped one unless `path` is given)."""
        p = Path(path) if path is not None else config_path("validate.yaml")
        if path is None and not p.is_file():
            return cls()
        try:
            data = yaml.safe_load(p.read_text()) or {}
        except OSError as exc:
            raise ConfigError(f"{p}: cannot read the validator thresholds ({exc.strerror or exc})") from exc
        except (yaml.YAMLError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{p}: validator thresholds are not valid YAML ({yaml_problem(exc)})") from exc
        if not isinstance(data, dict):
            raise ConfigError(f"{p}: validator thresholds: expected a mapping")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"{p}: validator thresholds: unknown key(s) {unknown}; known: {sorted(known)}")
        return cls(**data)


@dataclass(frozen=True)
class Supplied:
    """What the user says about bags that carry no episode metadata (a `ros2 bag record` bag from
    another rig): `--task`, `--outcome`. Never applied to a bag that has its own metadata (its
    recorded outcome, even `unset`, stands). Calibrations are supplied to convert by role.
    `task_spec` (`validate --task FILE`) judges every bag recorded without a spec of its own."""

    task: str | None = None
    outcome: str | None = None
    task_spec: TaskSpec | None = None

    def __post_init__(self) -> None:
        if self.outcome not in (None, "success", "failure"):
            raise ValueError(f"--outcome must be success or failure, got {self.outcome!r}")
