"""Evaluation protocols: what is tested, under which conditions, how many times, judged how.

Why a file: a results table is only evidence if its conditions were written down before the
trials ran. The protocol's canonical hash goes into every trial's bag
(`EpisodeMeta.protocol_hash`), so `teleop-flywheel eval` can refuse to mix trials of two
protocols. The `ProtocolWalker` is pure bookkeeping shared by the operator console and the
unattended simulator driver: which (checkpoint, condition) is next, the reset prompt, outcome
entry with a failure label, and whether interventions are allowed.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

FORMAT = "teleop_flywheel.eval_protocol/1"


class ProtocolError(ValueError):
    """A protocol file that cannot be used; the message names the file and the field."""


@dataclass(frozen=True)
class Condition:
    name: str
    description: str = ""
    tags: dict[str, str] = field(default_factory=dict)  # start region, object placement, lighting, ...
    sim_failure_rate: float | None = None  # unattended simulator only: P(failure) of the scripted policy


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
    machine_check: dict[str, Any]
    hash: str

    def condition(self, name: str) -> Condition:
        for c in self.conditions:
            if c.name == name:
                return c
        raise ProtocolError(f"{self.path}: no condition {name!r} (has {', '.join(c.name for c in self.conditions)})")


def canonical_hash(data: dict[str, Any]) -> str:
    """sha256 of the protocol's content as sorted-key compact JSON: key order and YAML layout do not matter."""
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


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
    ckpts = _need(data, "checkpoints", list, path)
    if not ckpts or not all(isinstance(c, str) and c for c in ckpts) or len(set(ckpts)) != len(ckpts):
        raise ProtocolError(f"{path}: field 'checkpoints' must be a non-empty list of distinct ids")
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
    check = success.get("machine_check") or {}
    if not isinstance(check, dict):
        raise ProtocolError(f"{path}: field 'success.machine_check' must be a mapping")
    labels = data.get("failure_labels", ["timeout", "dropped_object", "missed_grasp", "collision", "other"])
    if not isinstance(labels, list) or not all(isinstance(x, str) and x for x in labels):
        raise ProtocolError(f"{path}: field 'failure_labels' must be a list of strings")
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
        rate = c.get("sim_failure_rate")
        if rate is not None and (isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0 <= rate <= 1):
            raise ProtocolError(f"{where}: field 'sim_failure_rate' must be a number in [0, 1], got {rate!r}")
        conditions.append(Condition(name, str(c.get("description", "")), {str(k): str(v) for k, v in tags.items()},
                                    None if rate is None else float(rate)))
    names = [c.name for c in conditions]
    if len(set(names)) != len(names):
        raise ProtocolError(f"{path}: condition names must be distinct, got {names}")
    # The hash covers what defines the experiment; sim-only failure rates are part of it too
    # (a different simulated world is a different protocol).
    return Protocol(path, str(data.get("name", Path(path).stem)), task, tuple(ckpts), tuple(conditions), trials,
                    criterion, limit, allowed, tuple(labels), dict(check), canonical_hash(data))


def load_protocol(path: str | Path) -> Protocol:
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ProtocolError(f"{path}: cannot read protocol: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ProtocolError(f"{path}: not valid YAML: {exc}") from None
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
    """The protocol as a queue of slots, interleaved (condition-major, checkpoints alternating)
    so that drift during the afternoon hits every checkpoint alike."""

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
        if interventions and not p.interventions_allowed:
            raise ProtocolError(f"{p.path}: interventions are not allowed by this protocol")
        rec = TrialRecord(slot, outcome, failure_label, interventions)
        self.done.append(rec)
        return rec

    def trial_metadata(self, slot: Slot) -> dict[str, str]:
        """The fields a trial's bag carries (EpisodeMeta fields)."""
        return {"protocol_hash": self.protocol.hash, "condition": slot.condition, "policy_checkpoint": slot.checkpoint,
                "task": self.protocol.task}


__all__ = ["Protocol", "Condition", "ProtocolError", "ProtocolWalker", "Slot", "TrialRecord", "load_protocol",
           "parse_protocol", "canonical_hash"]
