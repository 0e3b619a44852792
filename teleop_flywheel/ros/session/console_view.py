"""What the operator console shows and what its keys mean — no ROS, no terminal I/O.

`console.py` feeds this model from topics (`/teleop/authority`, `/teleop/intervention`,
`/recorder/status`, `/diagnostics`) and turns key presses into service calls; keeping the
state and rendering here makes both testable as plain functions.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from teleop_flywheel.core.labels import TRIGGER_LABELS, mode_name, trigger_name

# key -> (action, argument). Digits pick a trigger label in TRIGGER_LABELS order.
KEYS: dict[str, tuple[str, str]] = {
    "s": ("start", ""),
    "e": ("stop", ""),
    "x": ("discard", ""),
    "y": ("outcome", "success"),
    "n": ("outcome", "failure"),
    "p": ("mode", "policy"),
    "t": ("mode", "teleop"),
    "q": ("quit", ""),
    " ": ("pedal", "toggle"),  # terminal fallback for rigs without a foot pedal
    **{str(i + 1): ("trigger", label) for i, label in enumerate(TRIGGER_LABELS)},
}


@dataclass
class ConsoleState:
    session: str = ""
    alpha: float | None = None
    mode: str = "?"
    intervention_id: int = 0
    trigger: str | None = None
    last_intervention: dict[str, Any] = field(default_factory=dict)
    recorder: dict[str, Any] = field(default_factory=dict)
    diagnostics: dict[str, tuple[str, str]] = field(default_factory=dict)  # name -> (level, message)
    clock_offset_ms: float | None = None
    message: str = ""
    updated: float = field(default_factory=time.monotonic)

    # -- updates from topics ---------------------------------------------------------------
    def on_authority(self, names: list[str], values: list[float]) -> None:
        fields = dict(zip(names, values))
        if "alpha" in fields:
            self.alpha = float(fields["alpha"])
        if "mode" in fields:
            self.mode = mode_name(int(round(fields["mode"])))
        if "intervention_id" in fields:
            self.intervention_id = int(round(fields["intervention_id"]))
        if "trigger" in fields:
            self.trigger = trigger_name(int(round(fields["trigger"])))

    def on_intervention(self, text: str) -> None:
        try:
            self.last_intervention = json.loads(text)
        except json.JSONDecodeError:
            self.message = f"unreadable /teleop/intervention event: {text[:60]!r}"

    def on_recorder_status(self, text: str) -> None:
        try:
            self.recorder = json.loads(text)
        except json.JSONDecodeError:
            self.message = f"unreadable recorder status: {text[:60]!r}"

    def on_diagnostic(self, name: str, level: str, message: str, values: dict[str, str]) -> None:
        self.diagnostics[name] = (level, message)
        for key in ("clock_offset_ms", "ptp_offset_ms"):
            if key in values:
                try:
                    self.clock_offset_ms = float(values[key])
                except ValueError:
                    pass

    # -- rendering ----------------------------------------------------------------------------
    def render(self, width: int = 100, keys: bool = True) -> list[str]:
        """The screen; `keys=False` leaves out the key help (an evaluation walk shows its own)."""
        rec = self.recorder
        state = rec.get("state", "no recorder")
        lines = [
            f"teleop_flywheel console — session {self.session or '?'}",
            "",
            f"recording: {state:<10} episode: {rec.get('episode') or '-':<28} elapsed: {rec.get('elapsed_s', 0.0):7.1f} s",
            f"task: {rec.get('task') or '(unset)'}   operator: {rec.get('operator') or '(unset)'}   "
            f"outcome: {rec.get('outcome', 'unset')}",
            f"authority: mode {self.mode:<7} alpha {_fmt(self.alpha)}   intervention "
            f"{self.intervention_id or '-'}   trigger {self.trigger or ('UNLABELLED' if self.intervention_id else '-')}",
        ]
        if self.last_intervention:
            li = self.last_intervention
            lines.append(f"last intervention: #{li.get('id')} trigger={li.get('trigger') or 'UNLABELLED'} "
                         f"{'(running)' if li.get('end_ns') in (None, 0) else '(ended)'}")
        free = rec.get("disk_free_bytes")
        lines.append(f"clock offset: {_fmt(self.clock_offset_ms)} ms   disk free: "
                     f"{'?' if free is None else f'{free / 1e9:.1f} GB'}")
        lines.append("")
        lines.append(f"{'stream':<44}{'rate Hz':>10}{'msgs':>10}{'drops':>8}")
        for name, t in sorted((rec.get("topics") or {}).items()):
            lines.append(f"{name[:43]:<44}{t.get('rate_hz', 0):>10.1f}{t.get('count', 0):>10}{t.get('drops', 0):>8}")
        for name in rec.get("missing_topics") or []:
            lines.append(f"{name[:43]:<44}{'MISSING':>10}")
        bad = [(n, lv, m) for n, (lv, m) in sorted(self.diagnostics.items()) if lv not in ("OK", "0")]
        if bad:
            lines.append("")
            lines += [f"! {n}: {lv} {m}" for n, lv, m in bad[:8]]
        if rec.get("error"):
            lines.append(f"! recorder: {rec['error']}")
        labels = "  ".join(f"{i + 1}={label}" for i, label in enumerate(TRIGGER_LABELS))
        if keys:
            lines.append("")
            lines.append("keys: s start  e stop  x discard  y success  n failure  p policy  t teleop  "
                         "space take over/hand back  q quit")
        lines.append(f"trigger: {labels}")
        if self.message:
            lines.append(f"> {self.message}")
        return [line[:width] for line in lines]


def _fmt(value: float | None) -> str:
    return "?" if value is None else f"{value:.2f}"
