"""What the operator console shows and what its keys mean — no ROS, no terminal I/O.

`console.py` feeds this model from topics (`/teleop/authority`, `/teleop/intervention`,
`/recorder/status`, `/diagnostics`) and turns key presses into service calls; keeping the
state and rendering here makes both testable as plain functions.

Under a task spec (the session's `task` argument) the recorder's status carries its checks: the
screen shows the instruction; before recording, whether the follower is inside the start region
(live); while recording, the success predicate on the follower's pose beside the outcome flag;
after a stop, the predicate on the episode's final pose beside the flag it was stopped with. A
stop (`e`) while the flag and the predicate disagree is asked about first — "the spec says …, you
marked success: [k]eep success / mark [f]ailure" — and the answer goes into the episode
(`outcome_answer`; a changed flag as its outcome) before the stop is sent.
"""
from __future__ import annotations

import contextlib
import json
import time
from dataclasses import dataclass, field
from typing import Any

from teleop_flywheel.core.labels import TRIGGER_LABELS, mode_name, trigger_name
from teleop_flywheel.recording.recorder.spec_checks import outcome_disagrees

# key -> (action, argument). Digits pick a trigger label in TRIGGER_LABELS order; `a` then a digit
# sets the attempts of the episode being recorded (ConsoleState.key reads the pair).
KEYS: dict[str, tuple[str, str]] = {
    "s": ("start", ""),
    "e": ("stop", ""),
    "x": ("discard", ""),  # the episode being recorded, else the last one stopped: moved to discarded/
    "k": ("keep", ""),  # the last episode stopped: kept (verdict.json says so; ingest takes it)
    "a": ("attempts", ""),  # followed by a digit 0-9 (0 = not given)
    "y": ("outcome", "success"),
    "n": ("outcome", "failure"),
    "p": ("mode", "policy"),
    "t": ("mode", "teleop"),
    "q": ("quit", ""),
    " ": ("pedal", "toggle"),  # terminal fallback for rigs without a foot pedal
    # E-stop: Esc (an arrow key's escape sequence starts with it too: it stops rather than nothing),
    # and r resets it, the arms' latched faults included.
    "\x1b": ("estop", ""),
    "r": ("reset", ""),
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
    awaiting_attempts: bool = False  # `a` was pressed: the next digit is the number of attempts
    asking: str = ""  # `e` was pressed on a flag the spec's predicate disagrees with: that flag, until answered
    updated: float = field(default_factory=time.monotonic)

    # -- keys -----------------------------------------------------------------------------------
    def key(self, ch: str) -> tuple[str, str] | None:
        """The action a key press asks for (None: nothing to send). `a` then a digit is the number of
        attempts; any other key after `a` cancels it and does what it always does."""
        if self.asking:
            return self._answer(ch)
        if self.awaiting_attempts:
            self.awaiting_attempts = False
            if ch.isdigit() and len(ch) == 1:
                return ("attempts", ch)
            self.message = "attempts: cancelled"
        if ch not in KEYS:
            return None
        action, arg = KEYS[ch]
        if action == "stop" and self.disagreement():
            self.asking = str(self.recorder.get("outcome"))
            return None
        if action == "attempts":
            self.awaiting_attempts = True
            self.message = "attempts: press a digit 0-9 (0 = not given)"
            return None
        return action, arg

    def disagreement(self) -> str:
        """While recording under a spec: why its success predicate on the follower's pose now disagrees
        with the outcome flag (empty: they agree, or nothing to compare)."""
        rec = self.recorder
        check = (rec.get("task_spec") or {}).get("success")
        if rec.get("state") != "recording" or not check or not outcome_disagrees(rec.get("outcome", ""),
                                                                                   check["passed"]):
            return ""
        return f"the spec says {'success' if check['passed'] else 'NOT success'} ({check['detail']})"

    def _answer(self, ch: str) -> tuple[str, str] | None:
        """The answer to the question a stop asked: keep the flag, or change it; then stop."""
        flag, self.asking = self.asking, ""
        if self.recorder.get("state") != "recording":  # stopped meanwhile: an answer would label the next one
            self.message = "stop: the episode was already stopped; nothing sent"
            return None
        other = "failure" if flag == "success" else "success"
        if ch == "k":
            return ("answer", "kept")
        if ch in (("f", "n") if other == "failure" else ("y",)):
            return ("answer", other)
        self.message = "stop: cancelled, still recording"
        return None

    def prompt(self) -> list[str]:
        """The question a stop on a disagreeing flag asks (empty: none asked)."""
        if not self.asking:
            return []
        change = "mark [f]ailure" if self.asking == "success" else "mark success [y]"
        return [f"? {self.disagreement() or 'the spec disagrees'}",
                f"? you marked {self.asking}: [k]eep {self.asking} / {change}   (other key: back to recording)"]

    # -- updates from topics ---------------------------------------------------------------
    def on_authority(self, names: list[str], values: list[float]) -> None:
        fields = dict(zip(names, values, strict=False))
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
                with contextlib.suppress(ValueError):
                    self.clock_offset_ms = float(values[key])

    # -- rendering ----------------------------------------------------------------------------
    def render(self, width: int = 100, keys: bool = True) -> list[str]:
        """The screen; `keys=False` leaves out the key help (an evaluation walk shows its own)."""
        rec = self.recorder
        state = rec.get("state", "no recorder")
        lines = [
            f"teleop_flywheel console — session {self.session or '?'}",
            "",
            f"recording: {state:<10} episode: {rec.get('episode') or '-':<28} "
            f"elapsed: {rec.get('elapsed_s', 0.0):7.1f} s",
            f"task: {rec.get('task') or '(unset)'}   operator: {rec.get('operator') or '(unset)'}   "
            f"outcome: {rec.get('outcome', 'unset')}   attempts: {rec.get('attempts') or '-'}",
            f"authority: mode {self.mode:<7} alpha {_fmt(self.alpha)}   intervention "
            f"{self.intervention_id or '-'}   "
            f"trigger {self.trigger or ('UNLABELLED' if self.intervention_id else '-')}",
        ]
        if self.last_intervention:
            li = self.last_intervention
            lines.append(
                f"last {li.get('kind') or 'intervention'}: #{li.get('id')} trigger={li.get('trigger') or 'UNLABELLED'} "
                f"{'(running)' if li.get('end_ns') in (None, 0) else '(ended)'}"
            )
        free = rec.get("disk_free_bytes")
        lines.append(f"clock offset: {self._clock(rec)}   disk free: {'?' if free is None else f'{free / 1e9:.1f} GB'}")
        lines += _spec_lines(rec.get("task_spec") or {}, state, rec.get("outcome", "unset"))
        lines += _verdict_lines(rec.get("verdict") or {}, hint=keys and state != "recording")
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
            lines.append("keys: ESC E-STOP  r reset  s start  e stop  x discard  k keep  y success  n failure")
            lines.append("      a+digit attempts  p policy  t teleop  space take over/hand back  q quit")
        lines.append(f"trigger: {labels}")
        if self.message:
            lines.append(f"> {self.message}")
        lines += self.prompt()
        return [line[:width] for line in lines]


    def _clock(self, rec: dict[str, Any]) -> str:
        """Per camera: the content-based lag of the last verdict — pooled over the camera instance's
        episodes this session when there is a pool (`camera front lag +2 ± 3 ms (12 episodes)`), else
        the episode's own estimate — and the receive − capture latency the recorder sees; the PTP offset
        when measured; an offset a node reports on /diagnostics."""
        clock = rec.get("clock") or {}
        parts = []
        for name, c in sorted((clock.get("cameras") or {}).items()):
            lag, err = _lag_ms(c.get("lag"))
            pooled, pooled_err = _lag_ms(c.get("pool"))
            n = (c.get("pool") or {}).get("episodes")
            if pooled is not None and pooled_err is not None and isinstance(n, int) and n > 1:
                text = f"camera {name} lag {pooled:+.0f} ± {pooled_err:.0f} ms ({n} episodes)"
            else:
                text = f"{name} ?" if lag is None else f"{name} lag {lag:+.1f}" + (f"±{err:.1f}" if err else "") + " ms"
            if c.get("latency_ms") is not None:
                text += f" (recv {c['latency_ms']:.1f} ms)"
            parts.append(text)
        if clock.get("ptp_offset_ns") is not None:
            parts.append(f"PTP {clock['ptp_offset_ns'] / 1e6:+.3f} ms")
        if self.clock_offset_ms is not None:
            parts.append(f"{self.clock_offset_ms:.2f} ms")
        return ", ".join(parts) or "?"


def _lag_ms(lag: Any) -> tuple[float | None, float | None]:
    """(lag, standard error) in ms of an estimate as the validator reports it (`LagEstimate.to_dict()`:
    `lag_ms`, `stderr_ms`; or a bare number)."""
    err = lag.get("stderr_ms") if isinstance(lag, dict) else None
    if isinstance(lag, dict):
        lag = lag.get("lag_ms")
    return (float(lag) if isinstance(lag, (int, float)) else None,
            float(err) if isinstance(err, (int, float)) else None)


def _spec_lines(spec: dict[str, Any], state: str, outcome: str) -> list[str]:
    """The task spec: before recording, the follower against the start region; while recording, the
    success predicate now beside the flag; after a stop, the predicate on the final pose beside it.
    Each check's detail on a line of its own (lines are cut at the screen's width)."""
    if not spec:
        return []
    out = [f"spec {spec.get('name')} ({spec.get('id')}): {spec.get('instruction')}"]
    if state == "recording":
        check = spec.get("success")
        if check:
            disagree = ": DISAGREE" if outcome_disagrees(outcome, check["passed"]) else ""
            out += [f"  success now: {'met' if check['passed'] else 'NOT met'}, you marked {outcome}{disagree}",
                    f"    {check['detail']}"]
        return out
    start = spec.get("start")
    if start:
        out.append(f"  start: {'inside' if start['inside'] else 'OUTSIDE'} the start region ({start['detail']})")
    last = spec.get("last") or {}
    if last:
        answer = last.get("operator_answer", "")
        asked = f", {answer} when asked" if answer else ""
        out += [f"  at stop {last.get('episode')}: success {'met' if last['passed'] else 'NOT met'}, marked "
                f"{last.get('outcome')}{asked}" + (": DISAGREE (OUTCOME_MISMATCH)" if last.get("disagrees") else ""),
                f"    {last['detail']}"]
    return out


def _verdict_lines(v: dict[str, Any], hint: bool) -> list[str]:
    """The last episode's verdict (pending while the validator works), its reasons, what to do."""
    if not v:
        return []
    verdict = v.get("verdict")
    head = {"pending": "… validating", None: f"NOT VALIDATED ({v.get('error') or 'no verdict'})"}.get(verdict, verdict)
    out = [f"verdict {v.get('episode')}: {head}" + (f" {' '.join(v.get('codes') or [])}" if v.get("codes") else "")]
    out += [f"  {r['code']}: {r['detail']}" for r in (v.get("reasons") or [])[:4]]
    out += [f"  warning {w['code']}: {w['detail']}" for w in (v.get("warnings") or [])[:3] if isinstance(w, dict)]
    decision = v.get("decision")
    if decision:
        out.append(f"  {'kept' if decision == 'keep' else 'discarded (moved to discarded/)'}")
    elif hint:
        out.append("  x discard and re-record   k keep")
    return out


def _fmt(value: float | None) -> str:
    return "?" if value is None else f"{value:.2f}"
