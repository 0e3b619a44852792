"""What the reviews say about the thresholds: per reason code, how many rejections a person looked at,
confirmed and overruled, and — for the codes that measure a value against a setting of
`config/validate.yaml` — the setting that would have kept every overruled episode, and which
confirmed or not yet reviewed rejections that setting would also have let through.

The value of a reason is the number the check recorded in its evidence (`Reason.numbers`):
FRAME_GAP's `gap_s` against `max_gap_s`; DEAD_AIR's `seconds` against `max_leading_dead_s`,
`max_trailing_dead_s` or `max_internal_dead_s` by its `kind`; CLOCK_OFFSET's `median_latency_ms`
against `max_camera_latency_ms` or `max_joint_latency_ms` by its stream. A check rejects a value
above its bound, so the bound that keeps the overruled ones is their largest value.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from teleop_flywheel.core.topics import camera_name
from teleop_flywheel.data.validate.reasons import CLOCK_OFFSET, CODES, DEAD_AIR, FRAME_GAP, ValidateConfig

_DEAD_AIR_SETTINGS = {"leading": "max_leading_dead_s", "trailing": "max_trailing_dead_s",
                      "internal": "max_internal_dead_s"}


def measured(reason: dict[str, Any]) -> tuple[str, float] | None:
    """(the setting, the value it was compared with) of a reason, or None where it has none."""
    n = reason.get("numbers") or {}
    code = reason.get("code")
    if code == FRAME_GAP and isinstance(n.get("gap_s"), (int, float)):
        return "max_gap_s", float(n["gap_s"])
    if code == DEAD_AIR and n.get("kind") in _DEAD_AIR_SETTINGS and isinstance(n.get("seconds"), (int, float)):
        return _DEAD_AIR_SETTINGS[n["kind"]], float(n["seconds"])
    if code == CLOCK_OFFSET and isinstance(n.get("median_latency_ms"), (int, float)) and n["median_latency_ms"] > 0:
        camera = camera_name(str(n.get("stream", ""))) is not None
        return ("max_camera_latency_ms" if camera else "max_joint_latency_ms"), float(n["median_latency_ms"])
    return None


@dataclass
class CodeTally:
    code: str
    rejected: int = 0
    reviewed: int = 0
    confirmed: int = 0
    overruled: int = 0

    @property
    def confirm_rate(self) -> float | None:
        return self.confirmed / self.reviewed if self.reviewed else None


@dataclass
class Suggestion:
    code: str
    setting: str
    current: float
    suggested: float  # the largest overruled value: a bound this high keeps them all
    kept: list[str] = field(default_factory=list)  # the overruled episodes (paths)
    confirmed_let_through: list[str] = field(default_factory=list)
    unreviewed_let_through: list[str] = field(default_factory=list)


def _current(cfg: ValidateConfig, setting: str) -> float:
    return cfg.gap_bound_s if setting == "max_gap_s" else float(getattr(cfg, setting))


def summarise_reviews(rows: list[dict[str, Any]], cfg: ValidateConfig) -> tuple[list[CodeTally], list[Suggestion]]:
    """`rows`: the review server's episode rows (with `review`: confirm, overrule or None)."""
    tallies: dict[str, CodeTally] = {}
    values: dict[tuple[str, str], list[tuple[float, str, str | None]]] = {}  # (code, setting) -> (value, path, review)
    for row in rows:
        if row["status"] != "FAIL":
            continue
        for code in row["codes"]:
            t = tallies.setdefault(code, CodeTally(code))
            t.rejected += 1
            if row.get("review") in ("confirm", "overrule"):
                t.reviewed += 1
                t.confirmed += row["review"] == "confirm"
                t.overruled += row["review"] == "overrule"
        worst: dict[tuple[str, str], float] = {}
        for reason in row["reasons"]:
            m = measured(reason)
            if m is not None:
                k = (reason["code"], m[0])
                worst[k] = max(worst.get(k, m[1]), m[1])
        for k, v in worst.items():
            values.setdefault(k, []).append((v, row["path"], row.get("review")))
    suggestions = []
    for (code, setting), vs in sorted(values.items()):
        overruled = [(v, p) for v, p, r in vs if r == "overrule"]
        if not overruled:
            continue
        bound = max(v for v, _ in overruled)
        suggestions.append(Suggestion(
            code, setting, _current(cfg, setting), bound, sorted(p for _, p in overruled),
            sorted(p for v, p, r in vs if r == "confirm" and v <= bound),
            sorted(p for v, p, r in vs if r is None and v <= bound)))
    order = {c: i for i, c in enumerate(CODES)}
    return sorted(tallies.values(), key=lambda t: order.get(t.code, len(order))), suggestions


def report_text(tallies: list[CodeTally], suggestions: list[Suggestion]) -> str:
    reviewed = sum(t.reviewed for t in tallies)
    lines = [f"{reviewed} rejection verdict(s) reviewed by eye, {sum(t.confirmed for t in tallies)} confirmed, "
             f"{sum(t.overruled for t in tallies)} overruled (counted per reason code)"]
    for t in tallies:
        rate = f"{t.confirm_rate:.0%} confirmed" if t.confirm_rate is not None else "none reviewed"
        lines.append(f"  {t.code}: {t.rejected} rejected, {t.reviewed} reviewed, {t.confirmed} confirmed, "
                     f"{t.overruled} overruled ({rate})")
    for s in suggestions:
        also = (f"; it would also let through {len(s.confirmed_let_through)} confirmed rejection(s)"
                f"{': ' + ', '.join(s.confirmed_let_through) if s.confirmed_let_through else ''}"
                f" and {len(s.unreviewed_let_through)} not yet reviewed")
        lines.append(f"suggestion: {s.code}: {s.setting}: {s.suggested:.4g} (now {s.current:.4g}) would have kept "
                     f"the {len(s.kept)} overruled episode(s){also}")
    if not suggestions:
        lines.append("no threshold suggestion: no overruled rejection carries a measured value")
    return "\n".join(lines)


def report_json(tallies: list[CodeTally], suggestions: list[Suggestion]) -> dict[str, Any]:
    return {"codes": [asdict(t) | {"confirm_rate": t.confirm_rate} for t in tallies],
            "suggestions": [asdict(s) for s in suggestions]}
