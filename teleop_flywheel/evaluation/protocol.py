"""Evaluation protocols: what is tested, under which conditions, how many times, judged how.

Why a file: a results table is only evidence if its conditions were written down before the
trials ran. The protocol's canonical hash goes into every trial's bag
(`EpisodeMeta.protocol_hash`), so `teleop-flywheel eval` can refuse to mix trials of two
protocols. The `ProtocolWalker` is pure bookkeeping shared by the operator console and the
unattended simulator driver: which (checkpoint, condition) is next, the reset prompt, outcome
entry with a failure label, and whether interventions are allowed.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from teleop_flywheel.core.content_id import canonical_hash
from teleop_flywheel.core.errors import yaml_problem
from teleop_flywheel.core.labels import TRIGGER_LABELS
from teleop_flywheel.evaluation.errors import ProtocolError

FORMAT = "teleop_flywheel.eval_protocol/1"
# Failure labels every protocol accepts, whatever its own list says: the walker itself ends a
# trial with them (the time limit ran out; an operator took over where the protocol forbids it).
RESERVED_FAILURES = ("timeout", "intervened")


@dataclass(frozen=True)
class Takeover:
    """A scripted operator's takeover in every trial of a condition (`sim: takeover:`): the
    simulator's foot pedal goes down `at_s` into the trial, the trigger `label` is pressed, and the
    pedal comes up `hold_s` later; the simulated leader's "human" drives meanwhile and the policy
    resumes after. So an unattended rollout records intervention segments (blend weight, label)
    as an operator's would."""

    at_s: float
    hold_s: float
    label: str

    @property
    def end_s(self) -> float:
        return self.at_s + self.hold_s


@dataclass(frozen=True)
class SimWorld:
    """What the simulator varies for one condition (`sim:` in a condition), applied before each of
    its trials by `run sim --unattended`: the follower is driven to `start_pose` (radians,
    JOINT_NAMES order; None: from wherever the last trial left it), the synthetic cameras deliver
    `camera_latency_ms` after capture, the simulated follower's encoders read with Gaussian
    noise of `joint_noise_rad` (standard deviation), and a scripted operator takes over
    (`takeover`; None: nobody does)."""

    start_pose: tuple[float, ...] | None = None
    camera_latency_ms: float = 0.0
    joint_noise_rad: float = 0.0
    takeover: Takeover | None = None


SIM_FIELDS = ("start_pose", "camera_latency_ms", "joint_noise_rad", "takeover")
TAKEOVER_FIELDS = ("at_s", "hold_s", "label")
MAX_CAMERA_LATENCY_MS = 10_000.0  # the camera node's own bound on latency_ms
MAX_JOINT_NOISE_RAD = 0.5


@dataclass(frozen=True)
class Condition:
    name: str
    description: str = ""
    tags: dict[str, str] = field(default_factory=dict)  # start region, object placement, lighting, ...
    # Statistics demo only (`eval --simulate`): P(failure) drawn per synthetic trial, no arm involved.
    sim_failure_rate: float | None = None
    sim: SimWorld = field(default_factory=SimWorld)  # what the simulator varies (`run sim --unattended`)


@dataclass(frozen=True)
class CheckpointSpec:
    """A checkpoint under test: any policy the policy node can load (`policy`, `policy_args`; empty =
    the session's own policy node), tagged with this id. `sim_failure_scale` multiplies the
    conditions' failure rates in the statistics demo (`eval --simulate`) only."""

    id: str
    policy: str = ""
    policy_args: str = ""
    sim_failure_scale: float = 1.0


@dataclass(frozen=True)
class MachineCheck:
    """An automatic success check: the follower ends within `tolerance_rad` (every joint) of
    `final_pose` (radians, JOINT_NAMES order). Judges unattended trials; on attended ones it is
    recorded beside the operator's outcome so disagreements show up in the table."""

    final_pose: tuple[float, ...]
    tolerance_rad: float
    failure_label: str

    def judge(self, pose: list[float] | None) -> tuple[bool, str]:
        """(passed, plain reason)."""
        if pose is None:
            return False, "no follower state received"
        err = max(abs(a - b) for a, b in zip(pose, self.final_pose, strict=True))
        verdict = "within" if err <= self.tolerance_rad else "outside"
        return (
            err <= self.tolerance_rad,
            f"follower ends {err:.3f} rad from final_pose ({verdict} {self.tolerance_rad:g})",
        )


@dataclass(frozen=True)
class Protocol:
    path: str
    name: str
    task: str
    checkpoints: tuple[str, ...]
    conditions: tuple[Condition, ...]
    trials_per_condition: int
    success_criterion: str
    time_limit_s: float
    interventions_allowed: bool
    failure_labels: tuple[str, ...]
    machine_check: MachineCheck | None
    checkpoint_specs: tuple[CheckpointSpec, ...]
    hash: str

    def checkpoint(self, ck: str) -> CheckpointSpec:
        return next(c for c in self.checkpoint_specs if c.id == ck)

    def condition(self, name: str) -> Condition:
        for c in self.conditions:
            if c.name == name:
                return c
        raise ProtocolError(f"{self.path}: no condition {name!r} (has {', '.join(c.name for c in self.conditions)})")


def _need(data: dict[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if key not in data:
        raise ProtocolError(f"{where}: missing field {key!r}")
    value = data[key]
    if not isinstance(value, kind) or isinstance(value, bool) and kind in (int, float, (int, float)):
        raise ProtocolError(f"{where}: field {key!r} must be {getattr(kind, '__name__', kind)}, got {value!r}")
    return value


def parse_protocol(data: Any, path: str = "<protocol>") -> Protocol:
    """Validate a loaded YAML mapping; every error names `path` and the field."""
    if not isinstance(data, dict):
        raise ProtocolError(f"{path}: a protocol is a mapping, got {type(data).__name__}")
    if data.get("format", FORMAT) != FORMAT:
        raise ProtocolError(f"{path}: field 'format' must be {FORMAT!r}, got {data['format']!r}")
    known = {"format", "name", "task", "checkpoints", "conditions", "trials_per_condition", "success",
             "time_limit_s", "interventions_allowed", "failure_labels"}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ProtocolError(f"{path}: unknown field(s) {unknown} (known: {sorted(known)})")
    task = _need(data, "task", str, path)
    specs = _checkpoints(_need(data, "checkpoints", list, path), path)
    trials = _need(data, "trials_per_condition", int, path)
    if trials < 1:
        raise ProtocolError(f"{path}: field 'trials_per_condition' must be >= 1, got {trials}")
    limit = float(_need(data, "time_limit_s", (int, float), path))
    if limit <= 0:
        raise ProtocolError(f"{path}: field 'time_limit_s' must be > 0, got {limit}")
    allowed = data.get("interventions_allowed", True)
    if not isinstance(allowed, bool):
        raise ProtocolError(f"{path}: field 'interventions_allowed' must be true or false, got {allowed!r}")
    success = _need(data, "success", dict, path)
    criterion = _need(success, "criterion", str, f"{path}: success")
    labels = data.get("failure_labels", ["timeout", "dropped_object", "missed_grasp", "collision", "other"])
    if not isinstance(labels, list) or not all(isinstance(x, str) and x for x in labels):
        raise ProtocolError(f"{path}: field 'failure_labels' must be a list of strings")
    labels = list(dict.fromkeys([*labels, *RESERVED_FAILURES]))
    check = _machine_check(success.get("machine_check"), labels, path)
    raw_conditions = _need(data, "conditions", list, path)
    if not raw_conditions:
        raise ProtocolError(f"{path}: field 'conditions' must not be empty")
    conditions: list[Condition] = []
    for i, c in enumerate(raw_conditions):
        where = f"{path}: conditions[{i}]"
        if not isinstance(c, dict):
            raise ProtocolError(f"{where}: must be a mapping with a 'name'")
        name = _need(c, "name", str, where)
        tags = c.get("tags") or {}
        if not isinstance(tags, dict):
            raise ProtocolError(f"{where}: field 'tags' must be a mapping")
        unknown = sorted(set(c) - {"name", "description", "tags", "sim_failure_rate", "sim"})
        if unknown:
            raise ProtocolError(f"{where}: unknown field(s) {unknown}")
        rate = c.get("sim_failure_rate")
        if rate is not None and (isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0 <= rate <= 1):
            raise ProtocolError(f"{where}: field 'sim_failure_rate' must be a number in [0, 1], got {rate!r}")
        conditions.append(Condition(name, str(c.get("description", "")), {str(k): str(v) for k, v in tags.items()},
                                    None if rate is None else float(rate), _sim_world(c.get("sim"), where)))
    names = [c.name for c in conditions]
    if len(set(names)) != len(names):
        raise ProtocolError(f"{path}: condition names must be distinct, got {names}")
    for i, c in enumerate(conditions):
        takeover = c.sim.takeover
        if takeover is not None and not allowed:
            raise ProtocolError(f"{path}: conditions[{i}]: sim: takeover in a protocol with interventions_allowed "
                                "false: every such trial would be an 'intervened' failure")
        if takeover is not None and takeover.end_s >= limit:
            raise ProtocolError(f"{path}: conditions[{i}]: sim: takeover ends {takeover.end_s:g} s into a trial, "
                                f"not before time_limit_s {limit:g}: the policy would never drive again")
    # The hash covers what defines the experiment; the simulator's settings are part of it too
    # (a different simulated world is a different protocol).
    return Protocol(path, str(data.get("name", Path(path).stem)), task, tuple(c.id for c in specs),
                    tuple(conditions), trials, criterion, limit, allowed, tuple(labels), check, specs,
                    canonical_hash(data))


def _number(raw: dict[str, Any], key: str, where: str, lo: float, hi: float, unit: str) -> float:
    value = raw.get(key, 0.0)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not lo <= value <= hi:
        raise ProtocolError(f"{where}: field {key!r} must be a number of {unit} in [{lo:g}, {hi:g}], got {value!r}")
    return float(value)


def _known_fields(raw: Any, where: str, known: tuple[str, ...]) -> dict[str, Any]:
    """`raw` if it is a mapping of only `known` fields; else the one-line error naming `where`."""
    if not isinstance(raw, dict):
        raise ProtocolError(f"{where}: must be a mapping with any of {', '.join(known)}")
    unknown = sorted(set(raw) - set(known))
    if unknown:
        raise ProtocolError(f"{where}: unknown field(s) {unknown} (known: {list(known)})")
    return raw


def _sim_world(raw: Any, where: str) -> SimWorld:
    """A condition's `sim:` mapping (absent: the simulator as it boots, nothing varied)."""
    if raw is None:
        return SimWorld()
    where = f"{where}: sim"
    raw = _known_fields(raw, where, SIM_FIELDS)
    pose = raw.get("start_pose")
    if pose is not None and (not isinstance(pose, list) or len(pose) != 6 or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and abs(v) <= 3.2 for v in pose)):
        raise ProtocolError(f"{where}: field 'start_pose' must be 6 joint positions in radians (|q| <= 3.2), "
                            f"got {pose!r}")
    return SimWorld(None if pose is None else tuple(float(v) for v in pose),
                    _number(raw, "camera_latency_ms", where, 0.0, MAX_CAMERA_LATENCY_MS, "milliseconds"),
                    _number(raw, "joint_noise_rad", where, 0.0, MAX_JOINT_NOISE_RAD, "radians"),
                    _takeover(raw.get("takeover"), where))


def _takeover(raw: Any, where: str) -> Takeover | None:
    """`sim: takeover: {at_s, hold_s, label}` (absent: no takeover)."""
    if raw is None:
        return None
    where = f"{where}: takeover"
    raw = _known_fields(raw, where, TAKEOVER_FIELDS)
    label = raw.get("label")
    if label not in TRIGGER_LABELS:
        raise ProtocolError(f"{where}: field 'label' must be a trigger label ({', '.join(TRIGGER_LABELS)}), "
                            f"got {label!r}")
    return Takeover(_number(raw, "at_s", where, 0.0, 3600.0, "seconds"),
                    _number(raw, "hold_s", where, 0.1, 3600.0, "seconds"), str(label))


def _checkpoints(raw: list[Any], path: str) -> tuple[CheckpointSpec, ...]:
    """Entries are ids, or mappings {id, policy, policy_args, sim_failure_scale}."""
    specs: list[CheckpointSpec] = []
    for i, entry in enumerate(raw):
        where = f"{path}: checkpoints[{i}]"
        if isinstance(entry, str) and entry:
            specs.append(CheckpointSpec(entry))
            continue
        if not isinstance(entry, dict):
            raise ProtocolError(f"{where}: must be a checkpoint id or a mapping with an 'id'")
        unknown = sorted(set(entry) - {"id", "policy", "policy_args", "sim_failure_scale"})
        if unknown:
            raise ProtocolError(f"{where}: unknown field(s) {unknown}")
        scale = entry.get("sim_failure_scale", 1.0)
        if isinstance(scale, bool) or not isinstance(scale, (int, float)) or scale < 0:
            raise ProtocolError(f"{where}: field 'sim_failure_scale' must be a number >= 0, got {scale!r}")
        specs.append(CheckpointSpec(_need(entry, "id", str, where), str(entry.get("policy", "")),
                                    str(entry.get("policy_args", "")), float(scale)))
    ids = [c.id for c in specs]
    if not ids or not all(ids) or len(set(ids)) != len(ids):
        raise ProtocolError(f"{path}: field 'checkpoints' must be a non-empty list of distinct ids, got {ids}")
    return tuple(specs)


def _machine_check(raw: Any, labels: list[str], path: str) -> MachineCheck | None:
    if raw is None:
        return None
    where = f"{path}: success.machine_check"
    if not isinstance(raw, dict):
        raise ProtocolError(f"{where}: must be a mapping with final_pose and tolerance_rad")
    unknown = sorted(set(raw) - {"final_pose", "tolerance_rad", "failure_label"})
    if unknown:
        raise ProtocolError(f"{where}: unknown field(s) {unknown}")
    pose = _need(raw, "final_pose", list, where)
    if len(pose) != 6 or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in pose):
        raise ProtocolError(f"{where}: field 'final_pose' must be 6 joint positions in radians, got {pose!r}")
    tol = float(_need(raw, "tolerance_rad", (int, float), where))
    if tol <= 0:
        raise ProtocolError(f"{where}: field 'tolerance_rad' must be > 0, got {tol}")
    label = str(raw.get("failure_label", "other" if "other" in labels else labels[0]))
    if label not in labels:
        raise ProtocolError(f"{where}: field 'failure_label' {label!r} is not in failure_labels {labels}")
    return MachineCheck(tuple(float(v) for v in pose), tol, label)


def load_protocol(path: str | Path) -> Protocol:
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ProtocolError(f"{path}: cannot read protocol: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ProtocolError(f"{path}: not valid YAML ({yaml_problem(exc)})") from None
    return parse_protocol(data, str(path))


@dataclass(frozen=True)
class Slot:
    """One planned trial: checkpoint × condition × index (1-based)."""

    checkpoint: str
    condition: str
    index: int


@dataclass
class TrialRecord:
    slot: Slot
    outcome: str  # "success" | "failure"
    failure_label: str = ""
    interventions: int = 0


@dataclass
class ProtocolWalker:
    """The protocol as a queue of slots, interleaved — trial index outermost, then condition, then
    checkpoint — so that drift during the afternoon hits every checkpoint and condition alike."""

    protocol: Protocol
    done: list[TrialRecord] = field(default_factory=list)

    def plan(self) -> list[Slot]:
        p = self.protocol
        return [Slot(ck, c.name, i) for i in range(1, p.trials_per_condition + 1)
                for c in p.conditions for ck in p.checkpoints]

    def next_slot(self) -> Slot | None:
        taken = {r.slot for r in self.done}
        return next((s for s in self.plan() if s not in taken), None)

    @property
    def finished(self) -> bool:
        return self.next_slot() is None

    def progress(self) -> tuple[int, int]:
        return len(self.done), len(self.plan())

    def reset_prompt(self, slot: Slot) -> str:
        p = self.protocol
        c = p.condition(slot.condition)
        tags = ", ".join(f"{k}={v}" for k, v in sorted(c.tags.items()))
        n, total = self.progress()
        return (f"[{n + 1}/{total}] reset for condition '{c.name}'"
                + (f" ({c.description})" if c.description else "") + (f" [{tags}]" if tags else "")
                + f"; checkpoint {slot.checkpoint}, trial {slot.index}/{p.trials_per_condition}; "
                f"limit {p.time_limit_s:g} s; interventions {'allowed' if p.interventions_allowed else 'NOT allowed'}. "
                f"Success: {p.success_criterion}")

    def intervention_allowed(self) -> bool:
        return self.protocol.interventions_allowed

    def record(self, slot: Slot, outcome: str, failure_label: str = "", interventions: int = 0) -> TrialRecord:
        """Enter the outcome of `slot` (must be the next one); failures need a label from the protocol."""
        p = self.protocol
        expected = self.next_slot()
        if slot != expected:
            raise ProtocolError(f"{p.path}: trial {slot} entered, but the next planned trial is {expected}")
        if outcome not in ("success", "failure"):
            raise ProtocolError(f"{p.path}: outcome must be 'success' or 'failure', got {outcome!r}")
        if outcome == "failure" and failure_label not in p.failure_labels:
            raise ProtocolError(f"{p.path}: failure needs a label from failure_labels {list(p.failure_labels)}, "
                                f"got {failure_label!r}")
        if outcome == "success" and failure_label:
            raise ProtocolError(f"{p.path}: a success has no failure label (got {failure_label!r})")
        if interventions and not p.interventions_allowed and (outcome, failure_label) != ("failure", "intervened"):
            raise ProtocolError(f"{p.path}: interventions are not allowed by this protocol: a trial with one is a "
                                "failure labelled 'intervened'")
        rec = TrialRecord(slot, outcome, failure_label, interventions)
        self.done.append(rec)
        return rec

    def trial_metadata(self, slot: Slot) -> dict[str, str]:
        """The fields a trial's bag carries (EpisodeMeta fields)."""
        return {"protocol_hash": self.protocol.hash, "condition": slot.condition, "policy_checkpoint": slot.checkpoint,
                "task": self.protocol.task, "session_kind": "evaluation"}


__all__ = [
    "Protocol",
    "Condition",
    "SimWorld",
    "Takeover",
    "CheckpointSpec",
    "MachineCheck",
    "RESERVED_FAILURES",
    "ProtocolWalker",
    "Slot",
    "TrialRecord",
    "load_protocol",
    "parse_protocol",
    "canonical_hash",
]
