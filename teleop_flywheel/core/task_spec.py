"""The task spec (`task.yaml`): what an episode of a task must be, written before recording it.

The seeds: "almost every dataset problem is a specification problem wearing a data costume", so
the spec is one file that the rig, the validator and curation all read. It answers, in fields:
- `instruction`: what the operator is asked to do (the episode's task text);
- `streams`: the recorded streams and cameras an episode needs, with their minimum rates;
- `start_region`: where an episode must start (joint boxes, or poses with a radius);
- `duration_s`: the expected duration range;
- `success`: the predicate on the final state (a joint-space region, the gripper's state, and/or
  a link's position from the URDF's forward kinematics, with tolerances), judged beside the
  operator's flag so "marked success, the mug is on its side" is caught by rule;
- `dead_air`: how long the arm may stand still at the start, at the end and inside;
- `outcome_labellers`: who may label outcomes (operator ids; absent: anyone);
- `clock_probe`: an optional short, known follower motion at each episode's reset (one joint out
  by `amplitude_rad` and back in `duration_s`, within the arm's speed limit) that the camera sees:
  one sharp timing event per episode for the content clock check on tasks whose motion is slow.

Every position is in radians in the project's joint order (`core/so101.py`), the gripper
included, as the follower's `/joint_states` carries it. An episode recorded under a spec carries
the spec's canonical content and its content id (`EpisodeMeta.task_spec`, `task_spec_id`), so
the validator judges it by the spec it was recorded against (`parse_task_spec(meta.task_spec)`
gives it back, with the same id). A bad file is one `TaskSpecError`
line naming the file and the field (exit 2). The format and each field: docs/task_spec.md.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from teleop_flywheel.core.content_id import canonical, canonical_hash
from teleop_flywheel.core.errors import TaskSpecError, yaml_problem
from teleop_flywheel.core.kinematics import so101
from teleop_flywheel.core.so101 import GRIPPER, JOINT_NAMES

FORMAT = "teleop_flywheel.task/1"
GRIPPER_STATES = ("open", "closed")
_TOP = ("format", "name", "instruction", "streams", "start_region", "duration_s", "success", "dead_air",
        "outcome_labellers", "clock_probe")
PROBE_MAX_SPEED_RAD_S = 2.0  # the arm driver's default max_speed_rad_s: a faster probe would be rate-limited
PROBE_MAX_AMPLITUDE_RAD = 0.3  # a probe is a twitch the camera sees, not a move that disturbs the scene
PEAK_SPEED_PER_LEG = 1.875  # a minimum-jerk move's peak speed over its mean speed
PROBE_AT_S = 0.5  # the probe starts this long after the reset (the episode is recording by then)


@dataclass(frozen=True)
class JointBox:
    """Per-joint [low, high] bounds in radians; joints not named are unconstrained."""

    bounds: Mapping[str, tuple[float, float]]

    def misses(self, pose: Sequence[float]) -> list[str]:
        """One phrase per joint outside its bounds (empty: inside)."""
        out = []
        for name, (lo, hi) in self.bounds.items():
            q = pose[JOINT_NAMES.index(name)]
            if not lo <= q <= hi:
                out.append(f"{name} {q:+.3f} outside [{lo:+.3f}, {hi:+.3f}]")
        return out


@dataclass(frozen=True)
class StartRegion:
    """Either joint boxes, or a list of poses and a radius (the largest joint difference to the
    nearest pose, radians)."""

    box: JointBox | None
    poses: tuple[tuple[float, ...], ...]
    radius_rad: float

    def judge(self, pose: Sequence[float]) -> tuple[bool, str]:
        """(inside, plain reason) for the episode's first follower pose."""
        if self.box is not None:
            misses = self.box.misses(pose)
            return not misses, "; ".join(misses) or "inside the start boxes"
        dist = min(max(abs(a - b) for a, b in zip(pose, p, strict=True)) for p in self.poses)
        inside = dist <= self.radius_rad
        return inside, (f"{dist:.3f} rad from the nearest start pose "
                        f"({'within' if inside else 'beyond'} {self.radius_rad:g})")


@dataclass(frozen=True)
class LinkTarget:
    """A link's origin within `tolerance_m` of `xyz` (metres, the URDF's base frame)."""

    link: str
    xyz: tuple[float, float, float]
    tolerance_m: float

    def distance(self, pose: Sequence[float]) -> float:
        frames = so101().link_poses(dict(zip(JOINT_NAMES, pose, strict=True)))
        return float(np.linalg.norm(frames[self.link][:3, 3] - np.asarray(self.xyz)))


@dataclass(frozen=True)
class SuccessPredicate:
    """The task's success, judged on the episode's final follower pose; every part given must hold."""

    box: JointBox | None
    gripper: str | None  # "open" | "closed"
    gripper_closed_below_rad: float
    target: LinkTarget | None

    def judge(self, pose: Sequence[float] | None) -> tuple[bool, str]:
        """(holds, plain reason naming each part that failed, or what held)."""
        if pose is None:
            return False, "no follower state recorded"
        failed, held = [], []
        if self.box is not None:
            misses = self.box.misses(pose)
            failed.extend(misses)
            if not misses:
                held.append("joints in region")
        if self.gripper is not None:
            q = pose[JOINT_NAMES.index(GRIPPER)]
            state = "closed" if q < self.gripper_closed_below_rad else "open"
            phrase = f"gripper {state} ({q:+.3f} rad, closed below {self.gripper_closed_below_rad:+.3f})"
            (held if state == self.gripper else failed).append(phrase)
        if self.target is not None:
            d = self.target.distance(pose)
            phrase = f"{self.target.link} {d * 1000:.0f} mm from target (tolerance {self.target.tolerance_m * 1000:g})"
            (held if d <= self.target.tolerance_m else failed).append(phrase)
        return not failed, "; ".join(failed or held)


@dataclass(frozen=True)
class DeadAir:
    leading_s: float | None
    trailing_s: float | None
    internal_s: float | None


@dataclass(frozen=True)
class ClockProbe:
    """At each reset (`PROBE_AT_S` after it): `joint` out by `amplitude_rad` and back, two minimum-jerk
    legs of `duration_s` / 2. The scripted policy plays it; in teleop mode the teleop node adds it to
    the leader's command when an episode starts recording."""

    joint: str
    amplitude_rad: float
    duration_s: float

    @property
    def peak_speed_rad_s(self) -> float:
        return PEAK_SPEED_PER_LEG * abs(self.amplitude_rad) / (self.duration_s / 2)

    def offset(self, t_s: float) -> float:
        """The probe's displacement of its joint `t_s` after it began (0 before and after)."""
        if not 0.0 < t_s < self.duration_s:
            return 0.0
        half = self.duration_s / 2
        s = t_s / half if t_s < half else 2.0 - t_s / half
        return self.amplitude_rad * s * s * s * (10 - 15 * s + 6 * s * s)


@dataclass(frozen=True)
class TaskSpec:
    path: str
    name: str
    instruction: str
    topics: Mapping[str, float]  # bag topic name -> minimum mean rate (Hz; 0 = present)
    cameras: Mapping[str, float]  # camera name -> minimum fps
    start_region: StartRegion | None
    duration_s: tuple[float, float] | None
    success: SuccessPredicate | None
    dead_air: DeadAir
    outcome_labellers: tuple[str, ...]  # empty: anyone may label
    content: Mapping[str, Any]  # the canonical content (what an episode's metadata carries)
    id: str
    clock_probe: ClockProbe | None = None

    def may_label(self, operator: str) -> bool:
        return not self.outcome_labellers or operator in self.outcome_labellers


def _where(path: str, field: str) -> str:
    return f"{path}: field {field!r}"


def _number(value: Any, path: str, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise TaskSpecError(f"{_where(path, field)} must be a number, got {value!r}")
    return float(value)


def _mapping(value: Any, path: str, field: str, known: Sequence[str] | None = None) -> dict[str, Any]:
    if not isinstance(value, dict) or not value:
        raise TaskSpecError(f"{_where(path, field)} must be a non-empty mapping, got {value!r}")
    if known is not None:
        unknown = sorted(str(k) for k in value if k not in known)
        if unknown:
            raise TaskSpecError(f"{_where(path, field)} has unknown field(s) {unknown} (known: {list(known)})")
    return value


def _range(value: Any, path: str, field: str) -> tuple[float, float]:
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise TaskSpecError(f"{_where(path, field)} must be [low, high], got {value!r}")
    lo, hi = _number(value[0], path, field), _number(value[1], path, field)
    if lo > hi:
        raise TaskSpecError(f"{_where(path, field)} is empty: low {lo:g} > high {hi:g}")
    return lo, hi


def _joint(name: Any, path: str, field: str) -> str:
    if name not in JOINT_NAMES:
        raise TaskSpecError(f"{_where(path, field)} names joint {name!r}, which the SO-101 does not have "
                            f"(joints: {', '.join(JOINT_NAMES)})")
    return str(name)


def _box(value: Any, path: str, field: str) -> JointBox:
    raw = _mapping(value, path, field)
    return JointBox({_joint(k, path, f"{field}.{k}"): _range(v, path, f"{field}.{k}") for k, v in raw.items()})


def _pose(value: Any, path: str, field: str) -> tuple[float, ...]:
    if not isinstance(value, (list, tuple)) or len(value) != len(JOINT_NAMES):
        raise TaskSpecError(f"{_where(path, field)} must be {len(JOINT_NAMES)} joint positions in radians "
                            f"({', '.join(JOINT_NAMES)}), got {value!r}")
    return tuple(_number(v, path, field) for v in value)


def _positive(value: Any, path: str, field: str, allow_zero: bool = False) -> float:
    x = _number(value, path, field)
    if x < 0 or (x == 0 and not allow_zero):
        raise TaskSpecError(f"{_where(path, field)} must be {'>= 0' if allow_zero else '> 0'}, got {x:g}")
    return x


def _start_region(value: Any, path: str) -> StartRegion:
    raw = _mapping(value, path, "start_region", ("joints", "poses", "radius_rad"))
    if ("joints" in raw) == ("poses" in raw):
        raise TaskSpecError(f"{_where(path, 'start_region')} must give either 'joints' (boxes) or 'poses' "
                            "with 'radius_rad'")
    if "joints" in raw:
        if "radius_rad" in raw:
            raise TaskSpecError(f"{_where(path, 'start_region.radius_rad')} goes with 'poses', not 'joints'")
        return StartRegion(_box(raw["joints"], path, "start_region.joints"), (), 0.0)
    poses = raw["poses"]
    if not isinstance(poses, list) or not poses:
        raise TaskSpecError(f"{_where(path, 'start_region.poses')} must be a non-empty list of poses")
    if "radius_rad" not in raw:
        raise TaskSpecError(f"{_where(path, 'start_region.radius_rad')} is missing (the poses need a radius)")
    return StartRegion(None, tuple(_pose(p, path, f"start_region.poses[{i}]") for i, p in enumerate(poses)),
                       _positive(raw["radius_rad"], path, "start_region.radius_rad"))


def _success(value: Any, path: str) -> SuccessPredicate:
    raw = _mapping(value, path, "success", ("joints", "gripper", "gripper_closed_below_rad", "link", "xyz",
                                            "tolerance_m"))
    box = _box(raw["joints"], path, "success.joints") if "joints" in raw else None
    gripper = raw.get("gripper")
    if gripper is not None and gripper not in GRIPPER_STATES:
        raise TaskSpecError(f"{_where(path, 'success.gripper')} must be open or closed, got {gripper!r}")
    if gripper is not None and "gripper_closed_below_rad" not in raw:
        raise TaskSpecError(f"{_where(path, 'success.gripper_closed_below_rad')} is missing (which gripper "
                            "position, in radians, counts as closed)")
    below = _number(raw.get("gripper_closed_below_rad", 0.0), path, "success.gripper_closed_below_rad")
    target = None
    if {"link", "xyz", "tolerance_m"} & set(raw):
        missing = [k for k in ("link", "xyz", "tolerance_m") if k not in raw]
        if missing:
            raise TaskSpecError(f"{_where(path, 'success.' + missing[0])} is missing (a link target needs link, "
                                "xyz and tolerance_m)")
        links = set(so101().link_poses({}))
        if raw["link"] not in links:
            raise TaskSpecError(f"{_where(path, 'success.link')} names link {raw['link']!r}, which the URDF does "
                                f"not have (links: {', '.join(sorted(links))})")
        xyz = raw["xyz"]
        if not isinstance(xyz, list) or len(xyz) != 3:
            raise TaskSpecError(f"{_where(path, 'success.xyz')} must be [x, y, z] in metres, got {xyz!r}")
        target = LinkTarget(str(raw["link"]), tuple(_number(v, path, "success.xyz") for v in xyz),  # type: ignore[arg-type]
                            _positive(raw["tolerance_m"], path, "success.tolerance_m"))
    if box is None and gripper is None and target is None:
        raise TaskSpecError(f"{_where(path, 'success')} states nothing to check: give joints, gripper or a link "
                            "target")
    return SuccessPredicate(box, gripper, below, target)


def clock_probe_of(value: Any, path: str) -> ClockProbe:
    """A `clock_probe` mapping checked (a task spec's field; the scripted policy's file carries it too)."""
    raw = _mapping(value, path, "clock_probe", ("joint", "amplitude_rad", "duration_s"))
    for key in ("joint", "amplitude_rad", "duration_s"):
        if key not in raw:
            raise TaskSpecError(f"{_where(path, 'clock_probe.' + key)} is missing")
    probe = ClockProbe(_joint(raw["joint"], path, "clock_probe.joint"),
                       _positive(raw["amplitude_rad"], path, "clock_probe.amplitude_rad"),
                       _positive(raw["duration_s"], path, "clock_probe.duration_s"))
    if probe.amplitude_rad > PROBE_MAX_AMPLITUDE_RAD:
        raise TaskSpecError(f"{_where(path, 'clock_probe.amplitude_rad')} must be at most "
                            f"{PROBE_MAX_AMPLITUDE_RAD:g} rad, got {probe.amplitude_rad:g}")
    if probe.peak_speed_rad_s > PROBE_MAX_SPEED_RAD_S:
        raise TaskSpecError(f"{_where(path, 'clock_probe')} peaks at {probe.peak_speed_rad_s:.2f} rad/s, above the "
                            f"arm's speed limit {PROBE_MAX_SPEED_RAD_S:g} rad/s: lengthen duration_s or lower "
                            "amplitude_rad")
    return probe


def _rates(value: Any, path: str, field: str) -> dict[str, float]:
    raw = _mapping(value, path, field)
    return {str(k): _positive(v, path, f"{field}.{k}", allow_zero=True) for k, v in raw.items()}


def parse_task_spec(data: Any, path: str = "<task spec>") -> TaskSpec:
    """Check a loaded YAML document field by field; the first problem raises, naming path and field."""
    if not isinstance(data, dict):
        raise TaskSpecError(f"{path}: a task spec is a mapping, got {type(data).__name__}")
    unknown = sorted(str(k) for k in data if k not in _TOP)
    if unknown:
        raise TaskSpecError(f"{path}: unknown field(s) {unknown} (known: {list(_TOP)})")
    if data.get("format", FORMAT) != FORMAT:
        raise TaskSpecError(f"{_where(path, 'format')} must be {FORMAT!r}, got {data['format']!r}")
    instruction = data.get("instruction")
    if not isinstance(instruction, str) or not instruction.strip():
        raise TaskSpecError(f"{_where(path, 'instruction')} must be the task's instruction text")
    streams = _mapping(data["streams"], path, "streams", ("topics", "cameras")) if "streams" in data else {}
    topics = _rates(streams["topics"], path, "streams.topics") if "topics" in streams else {}
    bad = [t for t in topics if not t.startswith("/")]
    if bad:
        raise TaskSpecError(f"{_where(path, 'streams.topics.' + bad[0])} must be a topic name starting with '/'")
    cameras = _rates(streams["cameras"], path, "streams.cameras") if "cameras" in streams else {}
    duration = None
    if "duration_s" in data:
        duration = _range(data["duration_s"], path, "duration_s")
        if duration[0] < 0:
            raise TaskSpecError(f"{_where(path, 'duration_s')} must not be negative, got {duration[0]:g}")
    dead: dict[str, Any] = {}
    if "dead_air" in data:
        dead = _mapping(data["dead_air"], path, "dead_air", ("leading_s", "trailing_s", "internal_s"))
    labellers = data.get("outcome_labellers", [])
    if not isinstance(labellers, list) or not all(isinstance(x, str) and x for x in labellers):
        raise TaskSpecError(f"{_where(path, 'outcome_labellers')} must be a list of operator ids")
    name = data.get("name", Path(path).stem)
    if not isinstance(name, str) or not name:
        raise TaskSpecError(f"{_where(path, 'name')} must be a non-empty string")
    content = canonical({**data, "format": FORMAT, "name": name})
    return TaskSpec(
        path=path, name=name, instruction=instruction.strip(), topics=topics, cameras=cameras,
        start_region=_start_region(data["start_region"], path) if "start_region" in data else None,
        duration_s=duration,
        success=_success(data["success"], path) if "success" in data else None,
        dead_air=DeadAir(*(None if k not in dead else _positive(dead[k], path, f"dead_air.{k}", allow_zero=True)
                           for k in ("leading_s", "trailing_s", "internal_s"))),
        outcome_labellers=tuple(labellers), content=content, id=canonical_hash(content),
        clock_probe=clock_probe_of(data["clock_probe"], path) if "clock_probe" in data else None,
    )


def load_task_spec(path: str | Path) -> TaskSpec:
    """Read and check `path`: one TaskSpecError line on any problem."""
    p = Path(path)
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise TaskSpecError(f"{p}: cannot read task spec ({exc.strerror or exc})") from None
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise TaskSpecError(f"{p}: task spec is not valid YAML ({yaml_problem(exc)})") from None
    return parse_task_spec(data, str(p))
