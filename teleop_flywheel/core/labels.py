"""Shared vocabularies: authority modes and intervention trigger labels, with numeric codes.

Codes exist because `/teleop/authority` carries them as plottable numbers (Foxglove plots
numbers, not strings); names are what metadata, datasets and reports show.
"""
from __future__ import annotations

MODES: tuple[str, ...] = ("teleop", "policy")
"""Index = code on `/teleop/authority` (`mode` field)."""

TRIGGER_LABELS: tuple[str, ...] = ("wrong_object", "wrong_grasp", "about_to_collide", "too_slow", "other")
"""Why the operator stepped in. Code = index + 1; code 0 means no label (yet)."""

UNLABELLED = 0

INTERVENTION_KIND, CORRECTION_KIND = "intervention", "correction"
SPAN_KINDS: tuple[str, ...] = (INTERVENTION_KIND, CORRECTION_KIND)
"""What a `/teleop/intervention` event's `kind` says. `intervention`: a takeover from the policy
(policy mode, pedal down; authority ramps to the human). `correction`: the pedal pressed in teleop
mode — authority never changes (the human already has it); the operator marks a stretch where they
reached in to fix something, labelled with the same trigger labels. Events without `kind` (recorded
before corrections existed) are interventions."""


def span_kind(value: object) -> str:
    """The `kind` of an event (None/absent = intervention); ValueError for anything else."""
    if value is None or value == "":
        return INTERVENTION_KIND
    if value not in SPAN_KINDS:
        raise ValueError(f"unknown event kind {value!r}; expected one of {', '.join(SPAN_KINDS)}")
    return str(value)


def mode_code(mode: str) -> int:
    try:
        return MODES.index(mode)
    except ValueError:
        raise ValueError(f"unknown mode {mode!r}; expected one of {', '.join(MODES)}") from None


def mode_name(code: int) -> str:
    if not 0 <= int(code) < len(MODES):
        raise ValueError(f"unknown mode code {code}")
    return MODES[int(code)]


def trigger_code(label: str | None) -> int:
    """0 for None/'' (unlabelled), else 1 + index in TRIGGER_LABELS."""
    if not label:
        return UNLABELLED
    try:
        return TRIGGER_LABELS.index(label) + 1
    except ValueError:
        raise ValueError(
            f"unknown trigger label {label!r}; expected one of {', '.join(TRIGGER_LABELS)}"
        ) from None


def trigger_name(code: int) -> str | None:
    """None for code 0 (unlabelled)."""
    code = int(code)
    if code == UNLABELLED:
        return None
    if not 1 <= code <= len(TRIGGER_LABELS):
        raise ValueError(f"unknown trigger code {code}")
    return TRIGGER_LABELS[code - 1]
