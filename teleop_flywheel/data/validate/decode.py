"""The one decode path of an episode, shared by `validate` and `convert` (no ROS import).

Whatever `convert` will decode, `validate` decodes first, with the same functions, so a payload
`convert` would choke on (an image on a joint topic, a JointState with 0x7fffffff names, bytes
that are not a JPEG, a calibration stored as a list) is a verdict, not a crash later:

- declared types: each topic the engine reads must be declared with its type
  (`EXPECTED_TYPES`, cameras `sensor_msgs/msg/CompressedImage`) → SCHEMA_MISMATCH;
- episode metadata: every structured field has its type, each recorded calibration parses →
  SCHEMA_MISMATCH;
- payloads: joint streams, authority and images decoded by `recording.cdr` (bounded reads) →
  CORRUPT; joint names that lack an SO-101 joint, authority without its fields → SCHEMA_MISMATCH;
  every image decodes as a JPEG of the first image's size → CORRUPT;
- order: every stream is sorted by header stamp (stable); how often a stream's stamps went
  backwards is kept for the validator (CLOCK_STEP).

Foreign bags (no episode metadata: `ros2 bag record` on another rig) get a stand-in `EpisodeMeta`
from what the user supplies (`Supplied`: task, outcome) and the bag itself (cameras; interventions
from the `/teleop/intervention` JSON events, with their own times, latest event per id;
corrections from the events whose `kind` is `correction`).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import cv2
import numpy as np

from teleop_flywheel.core.bag_topics import (
    AUTHORITY,
    DIAGNOSTICS,
    FOLLOWER_COMMAND,
    FOLLOWER_FAULT,
    FOLLOWER_STATE,
    INTERVENTION,
    LEADER_COMMAND,
    LEADER_FAULT,
    LEADER_FEEDBACK,
    LEADER_STATE,
    PEDAL_JOY,
    POLICY_COMMAND,
)
from teleop_flywheel.core.calibration import parse_calibration
from teleop_flywheel.core.episode import EpisodeMeta, Intervention
from teleop_flywheel.core.labels import CORRECTION_KIND, INTERVENTION_KIND, span_kind
from teleop_flywheel.core.so101 import JOINT_NAMES
from teleop_flywheel.data.errors import DecodeError
from teleop_flywheel.data.validate.camera_lag import MotionEnergy, small_grey
from teleop_flywheel.data.validate.reasons import (
    CORRUPT,
    MISSING_STREAM,
    SCHEMA_MISMATCH,
    SERVO_FAULT,
    Reason,
    Supplied,
)
from teleop_flywheel.recording.mcap import cdr
from teleop_flywheel.recording.mcap.exceptions import BagReadError, CdrError
from teleop_flywheel.recording.mcap.reader import Bag, ImageStream, Stream

JOINT_STATE = "sensor_msgs/msg/JointState"
COMPRESSED_IMAGE = "sensor_msgs/msg/CompressedImage"
STRING = "std_msgs/msg/String"
EXPECTED_TYPES = {
    FOLLOWER_STATE: JOINT_STATE,
    FOLLOWER_COMMAND: JOINT_STATE,
    LEADER_STATE: JOINT_STATE,
    LEADER_COMMAND: JOINT_STATE,
    LEADER_FEEDBACK: JOINT_STATE,
    POLICY_COMMAND: JOINT_STATE,
    AUTHORITY: JOINT_STATE,
    INTERVENTION: STRING,
    PEDAL_JOY: "sensor_msgs/msg/Joy",
    DIAGNOSTICS: "diagnostic_msgs/msg/DiagnosticArray",
    LEADER_FAULT: "diagnostic_msgs/msg/DiagnosticStatus",
    FOLLOWER_FAULT: "diagnostic_msgs/msg/DiagnosticStatus",
}
AUTHORITY_FIELDS = ["alpha", "intervention_id", "trigger"]
_STRUCTURE = {"calibration": dict, "cameras": list, "topics": list, "interventions": list, "clock_start": dict,
              "clock_end": dict, "clock_samples": list, "drops": dict, "extra": dict, "corrections": list}


def is_camera_topic(topic: str) -> bool:
    parts = [p for p in topic.split("/") if p]
    return len(parts) == 4 and parts[0] == "cameras" and parts[2:] == ["image", "compressed"]


def type_problems(bag: Bag) -> list[Reason]:
    """Topics the engine reads that are declared with another type than the one it decodes."""
    out = []
    for topic, type_name in sorted(bag.topics.items()):
        expected = EXPECTED_TYPES.get(topic) or (COMPRESSED_IMAGE if is_camera_topic(topic) else None)
        if expected is not None and type_name != expected:
            out.append(Reason(SCHEMA_MISMATCH, f"{topic} declared as {type_name or 'no type'}, expected {expected}",
                              {"stream": topic, "type": type_name, "expected": expected}))
    return out


def metadata_problems(ep: EpisodeMeta) -> list[Reason]:
    """Structured episode-metadata fields of the wrong type, and recorded calibrations that do not parse."""
    out = []
    for name, kind in _STRUCTURE.items():
        value = getattr(ep, name)
        if not isinstance(value, kind):
            out.append(Reason(SCHEMA_MISMATCH, f"episode metadata {name} is a {type(value).__name__}, "
                              f"expected a {kind.__name__}", {"field": name}))
    if not all(isinstance(c, str) for c in ep.cameras if isinstance(ep.cameras, list)) or \
            not all(isinstance(t, str) for t in ep.topics if isinstance(ep.topics, list)):
        out.append(Reason(SCHEMA_MISMATCH, "episode metadata cameras/topics are not lists of names"))
    for name in ("clock_start", "clock_end"):
        out += _mapping_problem(name, getattr(ep, name))
    for i, sample in enumerate(ep.clock_samples if isinstance(ep.clock_samples, list) else []):
        out += _mapping_problem(f"clock_samples[{i}]", sample)
    if isinstance(ep.calibration, dict):
        try:
            roles = ep.calibration_by_role()
        except (AttributeError, TypeError) as exc:
            roles = {}
            out.append(Reason(SCHEMA_MISMATCH, f"episode metadata calibration unreadable: {exc}"))
        for role, doc in roles.items():
            try:
                parse_calibration(doc, f"calibration {role}", default_arm_id=role)
            except (ValueError, TypeError, KeyError, AttributeError) as exc:
                out.append(Reason(SCHEMA_MISMATCH, f"episode metadata calibration {role}: {exc}", {"role": role}))
    return out


def _mapping_problem(name: str, value: Any) -> list[Reason]:
    if not value:
        return []
    if not isinstance(value, dict) or not all(isinstance(value.get(k), int) for k in ("mono_ns", "wall_ns",
                                                                                      "uncertainty_ns")):
        return [Reason(SCHEMA_MISMATCH, f"episode metadata {name} is not a clock mapping", {"field": name})]
    return []


def interventions_from_events(bag: Bag) -> tuple[list[Intervention], list[Intervention]]:
    """`/teleop/intervention` JSON events (start, end, label changes) → (interventions, teleop-mode
    corrections: events with `kind: correction`), latest event per kind and id; times are the
    events' own (`start_ns`/`end_ns`), never the MCAP times."""
    if not bag.has(INTERVENTION) or bag.topics.get(INTERVENTION) != STRING:
        return [], []
    latest: dict[str, dict[int, Intervention]] = {INTERVENTION_KIND: {}, CORRECTION_KIND: {}}
    for _log, text in bag.strings(INTERVENTION):
        try:
            event = json.loads(text)
            kind = span_kind(event.get("kind"))
            iv = Intervention(int(event["id"]), int(event["start_ns"]),
                              None if event.get("end_ns") is None else int(event["end_ns"]), event.get("trigger"))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise DecodeError(CORRUPT, f"{INTERVENTION}: event {text[:80]!r} unreadable: {exc}") from None
        latest[kind][iv.id] = iv
    return tuple([spans[k] for k in sorted(spans)] for spans in latest.values())  # type: ignore[return-value]


def episode_of(bag: Bag, supplied: Supplied | None = None) -> tuple[EpisodeMeta, bool]:
    """(the episode's metadata, whether it is a stand-in for a bag that has none)."""
    if bag.episode is not None:
        return bag.episode, False
    s = supplied or Supplied()
    interventions, corrections = interventions_from_events(bag)
    stand_in = EpisodeMeta(episode_name=bag.name, task=s.task or "", outcome=s.outcome or "unset", session_kind="",
                           robot_type="", cameras=sorted(bag.camera_topics()), interventions=interventions,
                           corrections=corrections)
    return stand_in, True


@dataclass
class Decoded:
    """The streams `convert` aligns, in radians, sorted by header stamp."""

    follower: Stream
    command: Stream
    leader: Stream | None
    policy: Stream | None
    authority: Stream | None  # values: alpha, intervention_id, trigger
    images: dict[str, ImageStream]
    backwards: dict[str, int] = field(default_factory=dict)  # stream -> times its stamps went back
    # The follower's JointState.effort (load, signed fraction of max torque) at the follower's stamps,
    # when every message carries all six (bags recorded before efforts were recorded: None).
    effort: Stream | None = None
    # What the leader rendered (`/leader/feedback`): values = six goal offsets (rad) then six torque
    # ceilings (fraction of max torque), joint order; bags recorded before it: None.
    feedback: Stream | None = None


def _sorted(stream: Stream, backwards: dict[str, int]) -> Stream:
    d = np.diff(stream.stamps_ns)
    if len(d) and d.min() < 0:
        backwards[stream.name] = int(np.count_nonzero(d < 0))
        order = np.argsort(stream.stamps_ns, kind="stable")
        return Stream(stream.name, stream.stamps_ns[order], stream.values[order])
    return stream


def _joints(bag: Bag, topic: str, columns: list[str]) -> Stream:
    return _joint_state(bag, topic, columns)[0]


def _joint_state(bag: Bag, topic: str, columns: list[str]) -> tuple[Stream, Stream | None]:
    """(positions, efforts or None) of a JointState topic, columns in `columns` order."""
    try:
        js = bag.joint_state(topic)
        positions = js.stream(columns)
    except BagReadError as exc:
        if "not in names" in str(exc):
            raise DecodeError(SCHEMA_MISMATCH, str(exc)) from None
        raise _silent_servos(bag, topic) or DecodeError(CORRUPT, f"{topic}: undecodable JointState payload: {exc}"
                                                        ) from None
    except (CdrError, ValueError, IndexError) as exc:
        raise DecodeError(CORRUPT, f"{topic}: undecodable JointState payload: {exc}") from None
    effort = None
    if js.effort.shape == js.position.shape and len(js.effort) and np.isfinite(js.effort).all():
        effort = Stream(f"{topic} effort", js.stamps_ns, js.effort[:, [js.names.index(c) for c in columns]])
    return positions, effort


def _silent_servos(bag: Bag, topic: str) -> DecodeError | None:
    """SERVO_FAULT when an arm's joint states lose joints part-way: the arm driver leaves a servo
    that stopped answering out of its message (the others go on) and holds the arm. The bag is
    intact; what it recorded is an arm that froze. None: the names changed some other way."""
    if topic not in (FOLLOWER_STATE, LEADER_STATE):
        return None
    data = bag.raw(topic).data
    try:
        t0, _, first, _ = cdr.joint_state_layout(data[0])
        for i, message in enumerate(data):
            stamp, _, names, _ = cdr.joint_state_layout(message)
            left_out = [n for n in first if n not in names]
            if left_out and set(names) < set(first):
                return DecodeError(SERVO_FAULT, f"{topic}: servo(s) {', '.join(left_out)} left out from message {i} "
                                   f"(t={(stamp - t0) / 1e9:.2f}s): they stopped answering and the arm held")
    except CdrError:
        return None
    return None


def decode_streams(bag: Bag) -> Decoded:
    """Every stream `convert` uses, decoded and sorted; DecodeError with its reason code otherwise."""
    for topic in (FOLLOWER_STATE, FOLLOWER_COMMAND):
        if not bag.has(topic):
            raise DecodeError(MISSING_STREAM, f"{topic} has no messages")
    for r in type_problems(bag):
        raise DecodeError(r.code, r.detail)
    backwards: dict[str, int] = {}
    joints = list(JOINT_NAMES)
    follower_positions, effort = _joint_state(bag, FOLLOWER_STATE, joints)
    follower = _sorted(follower_positions, backwards)
    effort = _sorted(effort, {}) if effort is not None else None
    command = _sorted(_joints(bag, FOLLOWER_COMMAND, joints), backwards)
    leader = _sorted(_joints(bag, LEADER_STATE, joints), backwards) if bag.has(LEADER_STATE) else None
    policy = _sorted(_joints(bag, POLICY_COMMAND, joints), backwards) if bag.has(POLICY_COMMAND) else None
    authority = _sorted(_joints(bag, AUTHORITY, AUTHORITY_FIELDS), backwards) if bag.has(AUTHORITY) else None
    images = {}
    for cam, topic in bag.camera_topics().items():
        try:
            im = bag.images(topic)
        except (CdrError, ValueError, IndexError) as exc:
            raise DecodeError(CORRUPT, f"{topic}: undecodable CompressedImage payload: {exc}") from None
        d = np.diff(im.stamps_ns)
        if len(d) and d.min() < 0:
            backwards[topic] = int(np.count_nonzero(d < 0))
            order = np.argsort(im.stamps_ns, kind="stable")
            im = ImageStream(im.name, im.stamps_ns[order], im.log_ns[order], [im.formats[i] for i in order],
                             [im.data[i] for i in order])
        images[cam] = im
    feedback = _sorted(_feedback(bag), backwards) if bag.has(LEADER_FEEDBACK) else None
    return Decoded(follower, command, leader, policy, authority, images, backwards, effort, feedback)


def _feedback(bag: Bag) -> Stream:
    """`/leader/feedback` as (offsets, ceilings) per message; the contract's effort (the ceilings) is
    required in every message: without it the stream does not say what the hand felt."""
    offsets, ceilings = _joint_state(bag, LEADER_FEEDBACK, list(JOINT_NAMES))
    if ceilings is None:
        raise DecodeError(SCHEMA_MISMATCH, f"{LEADER_FEEDBACK}: a message lacks the six torque ceilings (effort)")
    return Stream(LEADER_FEEDBACK, offsets.stamps_ns, np.concatenate([offsets.values, ceilings.values], axis=1))


def decode_jpeg(data: bytes, reduced: bool = False) -> np.ndarray | None:
    """BGR image (or a 1/8-scale grey one, `reduced`: the same entropy decode, a fraction of the
    work) from JPEG bytes; None if they do not decode."""
    if reduced:
        return small_grey(data)
    buf = np.frombuffer(data, np.uint8)
    if buf.size == 0:
        return None
    return cv2.imdecode(buf, cv2.IMREAD_COLOR)


def image_problems(images: dict[str, ImageStream], energies: dict[str, np.ndarray] | None = None) -> list[Reason]:
    """Every image decodes as a JPEG of its camera's first image's size (what `convert` requires).
    The same 1/8-scale decode gives each camera's motion energy (`recording.camera_lag`), put in
    `energies` when given."""
    out = []
    for cam, im in sorted(images.items()):
        if not im.data:
            continue
        first = decode_jpeg(im.data[0])
        if first is None:
            out.append(Reason(CORRUPT, f"camera {cam}: image 0 is not a decodable JPEG", {"camera": cam, "image": 0}))
            continue
        h, w = first.shape[:2]
        small = (-(-h // 8), -(-w // 8))
        motion = MotionEnergy()
        for i in range(len(im.data)):
            img = decode_jpeg(im.data[i], reduced=True)
            if img is None or img.shape[:2] != small:
                what = "is not a decodable JPEG" if img is None else f"is not {w}x{h} like image 0"
                out.append(Reason(CORRUPT, f"camera {cam}: image {i} {what}", {"camera": cam, "image": i}))
                break
            motion.add(img)
        else:
            if energies is not None:
                energies[cam] = motion.energy()
    return out
