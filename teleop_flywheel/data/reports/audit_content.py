"""The audit's rows on what the episodes' content says about clocks and force, from numeric
columns only (no bag, no video):

- **camera lag**: each episode's estimated lag of each camera behind the follower's joints
  (episodes-table `camera_lag_ms/<camera>`, `camera_lag_stderr_ms/<camera>`, written by `convert`
  from the validator's content check; unknown for datasets converted before);
- **tracking lag**: the follower's lag behind the command per joint (`tracking_lag_ms`), median and
  worst over episodes — the seed's "leader accelerations the follower cannot achieve";
- **effort**: the range of `observation.effort` per joint (min, 1st and 99th percentile, max; load
  as a signed fraction of max torque) and the share of frames above half of it — a dataset that
  knows when the gripper squeezed;
- **dead air trimmed** by `convert --trim-dead-air` (`dead_air_trimmed_leading_s`/`_trailing_s`).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from teleop_flywheel.data.lerobot.reader import LeRobotDataset
from teleop_flywheel.data.validate.episode_columns import camera_lag_columns, finite_or_none

EFFORT = "observation.effort"
HIGH_EFFORT = 0.5


@dataclass
class EffortRange:
    joint: str
    min: float
    q01: float
    q99: float
    max: float
    high_share: float  # frames with |effort| > HIGH_EFFORT


@dataclass
class ContentAudit:
    camera_lag_ms: dict[str, list[float | None]] = field(default_factory=dict)  # camera -> per episode
    camera_lag_stderr_ms: dict[str, list[float | None]] = field(default_factory=dict)
    tracking_joints: list[str] = field(default_factory=list)
    tracking_lag_ms: list[list[float | None]] = field(default_factory=list)  # per episode, per joint
    effort: list[EffortRange] = field(default_factory=list)
    trimmed_leading_s: list[float] = field(default_factory=list)
    trimmed_trailing_s: list[float] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def content_audit(ds: LeRobotDataset, episode_index: list[int], joints: list[str]) -> ContentAudit:
    """Per episode in `episode_index` order (the audit's)."""
    table = ds.episodes.set_index("episode_index", drop=False)
    rows = table.reindex(episode_index)
    out = ContentAudit()
    for cam in camera_lag_columns(list(table.columns)):
        out.camera_lag_ms[cam] = [finite_or_none(v) for v in rows[f"camera_lag_ms/{cam}"]]
        if f"camera_lag_stderr_ms/{cam}" in rows:
            out.camera_lag_stderr_ms[cam] = [finite_or_none(v) for v in rows[f"camera_lag_stderr_ms/{cam}"]]
    if "tracking_lag_ms" in rows:
        out.tracking_joints = [j.removesuffix(".pos") for j in joints]
        for v in rows["tracking_lag_ms"]:
            values = list(v) if isinstance(v, (list, tuple, np.ndarray)) else []
            out.tracking_lag_ms.append([finite_or_none(x) for x in values] or [None] * len(joints))
    for side in ("leading", "trailing"):
        col = f"dead_air_trimmed_{side}_s"
        if col in rows:
            getattr(out, f"trimmed_{side}_s").extend(float(finite_or_none(v) or 0.0) for v in rows[col])
    if EFFORT in ds.features and ds.has_column(EFFORT):
        effort = np.asarray(ds.column(EFFORT), dtype=np.float64)
        effort = effort.reshape(len(effort), -1)
        names = ds.joint_names(EFFORT)
        for j, name in enumerate(names):
            v = effort[:, j][np.isfinite(effort[:, j])]
            if len(v):
                q01, q99 = np.quantile(v, [0.01, 0.99])
                out.effort.append(EffortRange(name.removesuffix(".effort"), float(v.min()), float(q01), float(q99),
                                              float(v.max()), float(np.mean(np.abs(v) > HIGH_EFFORT))))
    return out


def _stat(values: list[float | None]) -> str:
    known = [v for v in values if v is not None]
    if not known:
        return "unknown"
    a = np.asarray(known)
    worst = float(a[np.argmax(np.abs(a))])
    return f"median {np.median(a):+.1f} ms, worst {worst:+.1f} ms ({len(known)}/{len(values)} episodes measured)"


def format_lines(c: ContentAudit, episode_index: list[int]) -> list[str]:
    lines: list[str] = []
    for cam, lags in sorted(c.camera_lag_ms.items()):
        lines.append(f"camera lag {cam:<9}{_stat(lags)} (behind the joints, from the images)")
        per = ", ".join(f"{e}: {'?' if v is None else f'{v:+.1f}'}" for e, v in zip(episode_index, lags, strict=True))
        lines.append(f"  per episode (ms)  {per}")
    if c.tracking_lag_ms:
        lines.append("tracking lag        the follower behind the command, per joint (median / worst over episodes):")
        cols = list(zip(*c.tracking_lag_ms, strict=True)) if c.tracking_lag_ms else []
        for name, col in zip(c.tracking_joints, cols, strict=True):
            known = [v for v in col if v is not None]
            lines.append(f"  {name:<18}" + (f"{np.median(known):6.1f} / {max(known):6.1f} ms" if known else "unknown"))
    if c.effort:
        lines.append(
            f"effort              per joint: min / q01 / q99 / max (fraction of max torque), share > {HIGH_EFFORT:g}:"
        )
        lines += [
            f"  {e.joint:<18}{e.min:+.2f} / {e.q01:+.2f} / {e.q99:+.2f} / {e.max:+.2f}   {100 * e.high_share:.1f} %"
            for e in c.effort
        ]
    trimmed = [
        (e, a, b) for e, a, b in zip(episode_index, c.trimmed_leading_s, c.trimmed_trailing_s, strict=False) if a or b
    ]
    if trimmed:
        lines.append(f"dead air trimmed    {len(trimmed)} episodes: " + ", ".join(
            f"{e} (-{a:.1f} s lead, -{b:.1f} s tail)" for e, a, b in trimmed))
    return lines


def card_lines(c: ContentAudit, episode_index: list[int]) -> list[str]:
    """The data card's paragraph on the content checks (what convert measured and trimmed)."""
    lines: list[str] = []
    trimmed = [(a, b) for a, b in zip(c.trimmed_leading_s, c.trimmed_trailing_s, strict=True) if a or b]
    if trimmed:
        lines.append(f"Dead air trimmed (`convert --trim-dead-air`, a judgement call): {len(trimmed)} episodes lost "
                     f"{sum(a for a, _ in trimmed):.1f} s of leading and {sum(b for _, b in trimmed):.1f} s of "
                     "trailing bit-identical commands.")
    for cam, lags in sorted(c.camera_lag_ms.items()):
        lines.append(f"Camera `{cam}` lag behind the joints, found in the images: {_stat(lags)}.")
    if c.tracking_lag_ms:
        known = [v for row in c.tracking_lag_ms for v in row if v is not None]
        if known:
            lines.append(f"The follower lags the command by {np.median(known):.0f} ms (median over joints and "
                         f"episodes; worst {max(known):.0f} ms).")
    if c.effort:
        lines.append("Effort (`observation.effort`: load as a signed fraction of max torque) recorded; "
                     + ", ".join(f"{e.joint} {e.min:+.2f}…{e.max:+.2f}" for e in c.effort) + ".")
    return ["", *lines] if lines else []
