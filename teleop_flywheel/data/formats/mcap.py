"""A LeRobot v3.0 dataset (or a manifest's episodes) → one rosbag2 MCAP bag per episode, as the recorder writes them.

`OUT/episode_<k>/` (metadata.yaml + `episode_<k>_0.mcap`), k = 0..N-1 in the dataset's episode order
(a manifest: its episodes, verified and found by id), written by the recording floor's own
`BagWriter`: profile `ros2`, `ros2msg` schemas with their dependency text, `cdr` messages, zstd
chunks, indexes and summary. Foxglove opens each `.mcap`; `validate` and `convert` read the
directory (docs/formats.md).

Time. The converter's frame grid, put back: frame k is at `t_k = t0 + round(k·1e9/fps)` ns, the
expression `convert/align.py` computes, with `t0` the episode's `recorded_wall_ns` (the grid start
on ROS time, in the episodes table of a dataset we converted) or 0 (the epoch) where the table has
none; the dataset's `timestamp` column must be `frame_index/fps` (within LeRobot's 1e-4 s).
Header stamps, `log_time` and `publish_time` are all `t_k`: a dataset keeps no receive or send
times, so the bag has none either, and `stamp_clock` is `ros`.

Streams (topics of `core/bag_topics.py`, radians through the calibration in the episode metadata):

- `/follower/joint_states` ← observation.state at t_k (effort ← observation.effort where the
  dataset has it); `/cameras/<cam>/image/compressed` ← observation.images.<cam> at t_k, JPEG
  (`sensor_msgs/CompressedImage`, `format: jpeg`, quality `--jpeg`, default 90), decoded one frame
  at a time;
- `/leader/joint_states` ← complementary_info.leader_state at t_k, and the human action of the last
  frame at t_n (the converter reads human_action[k] as the leader at t_{k+1}, i.e.
  leader_state[k+1]: a dataset where they differ cannot be one leader stream, and is refused);
- `/follower/joint_command` ← action at t_{k+1} (the command in effect over (t_k, t_{k+1}]),
  `/policy/joint_command` ← complementary_info.policy_action at t_{k+1} (frame_id: the checkpoint;
  the frames before its first command, NaN in the dataset, are not written; so for the leader),
  `/teleop/authority` ← [blend weight, mode, intervention id, trigger] at t_{k+1} (mode, which the
  dataset does not keep: teleop in a teleop session or one without policy commands, else policy);
- `/teleop/intervention`: the JSON start and end events of each intervention and correction;
- `/leader/feedback` ← complementary_info.feedback at t_k where the dataset has it (position: its six
  goal offsets, effort: its six ceilings; the frames before its first known value, NaN, not written).

The converter needs every stream to outlast the last frame's action time, and a command at t_0: so
the state, the cameras and the command get one more message half a frame after t_n repeating their
last value, and the command one at t_0 repeating action[0].

Interventions: the episodes table's records (`interventions`, `corrections`: ids, ROS times,
final labels) when they give back the dataset's `intervention`, `complementary_info.trigger` and
`complementary_info.correction` columns exactly (`convert/frame_labels.label_columns`, the
converter's own rule); otherwise spans made from those columns, one per run of frames.

Episode metadata (the recorder's record and `custom_data`): task, outcome, attempts, operator,
rig, session kind, policy checkpoint, task spec id and outcome check from the episodes table; the
cameras and topics written; the interventions; the arms' calibrations, through which the converter
gives back the dataset's values exactly: those given with `--calibration ROLE=FILE`, else a nominal
one (arm_id `<role>_nominal_export`: every joint over the full 0..4095 steps, drive_mode 0) — a
dataset keeps none. With drive_mode 0 a body joint's radians are its degrees' radians whatever the
calibration; the gripper's radians need the arm's own (the dataset keeps only its 0..100).
Provenance (`Source.provenance`: the episode's content id, the source dataset and index, a
manifest's path, fingerprint and sha256) is the MCAP metadata record `teleop_flywheel.export`.

Before a bag is written its columns are checked to come back exactly through the converter's
rules (units, leader, labels); a dataset that cannot is refused naming the file. Written with
`formats.common.episode_export`: one bag per job, in `workers` processes (or Ray tasks), each into a
stage renamed to OUT at the end (OUT appears whole or not at all); bag k is episode k whichever
worker wrote it, byte for byte, and the export is recorded in the lineage registry.
"""
from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass, field
from itertools import repeat
from pathlib import Path
from typing import Any

import numpy as np

from teleop_flywheel import __version__
from teleop_flywheel.core import bag_topics as bt
from teleop_flywheel.core.calibration import ArmCalibration, JointCalibration
from teleop_flywheel.core.episode import CALIBRATION_ROLES, EXPORT_RECORD, OUTCOMES, EpisodeMeta, Intervention
from teleop_flywheel.core.errors import FlywheelError, UsageError
from teleop_flywheel.core.labels import CORRECTION_KIND, INTERVENTION_KIND, mode_code, trigger_name
from teleop_flywheel.core.so101 import JOINT_IDS, JOINT_NAMES, MAX_RAW
from teleop_flywheel.core.topics import AUTHORITY_FIELDS
from teleop_flywheel.data.convert.calibrations import load_supplied, role_files
from teleop_flywheel.data.convert.frame_labels import label_columns
from teleop_flywheel.data.convert.frames import CORRECTION
from teleop_flywheel.data.errors import ExportError
from teleop_flywheel.data.formats import ExportRequest
from teleop_flywheel.data.formats.common.episode_export import EpisodeJob, Exported, export_episodes
from teleop_flywheel.data.formats.common.export_source import (
    EFFORT_FEATURE,
    IMAGE_PREFIX,
    Source,
    episode_columns,
    episode_images,
    open_source,
    rgb_jpeg,
    so101_joints,
    task_of,
)
from teleop_flywheel.data.formats.common.format_options import jpeg_quality
from teleop_flywheel.data.formats.common.staged_output import refuse_existing
from teleop_flywheel.data.lerobot.dataset import ACTION, STATE, LeRobotDataset
from teleop_flywheel.data.lerobot.flywheel_schema import FEEDBACK, LEADER_STATE
from teleop_flywheel.data.provenance.manifest_hash import video_keys
from teleop_flywheel.recording.mcap.cdr import compressed_image_cdr, joint_state_cdr, string_cdr
from teleop_flywheel.recording.mcap.writer import BagWriter

FORMAT = "mcap"
EPISODE_BAG = "episode_{index}"
DEFAULT_JPEG = 90
TIMESTAMP_TOLERANCE_S = 1e-4  # LeRobot's own tolerance on timestamps
HUMAN_ACTION = "complementary_info.human_action"
POLICY_ACTION = "complementary_info.policy_action"
BLEND = "complementary_info.blend_weight"
TRIGGER = "complementary_info.trigger"
INTERVENTION_COLUMN = "intervention"
JOINT_STATE = "sensor_msgs/msg/JointState"
COMPRESSED_IMAGE = "sensor_msgs/msg/CompressedImage"
STRING = "std_msgs/msg/String"
JOINTS = list(JOINT_NAMES)


def nominal_calibration(role: str) -> ArmCalibration:
    """A calibration for an arm the dataset does not describe: every joint over the full range, drive_mode 0."""
    return ArmCalibration(f"{role}_nominal_export", tuple(
        JointCalibration(name, JOINT_IDS[name], 0, 0, 0, MAX_RAW) for name in JOINT_NAMES))


Calibrations = dict[str, ArmCalibration]  # role -> the calibration the bags' radians go through


def calibrations(supplied: Calibrations | None = None) -> Calibrations:
    """The supplied calibration of each role (`--calibration ROLE=FILE`), else the nominal one."""
    return {role: (supplied or {}).get(role) or nominal_calibration(role) for role in CALIBRATION_ROLES}


def _value(row: dict[str, Any], key: str) -> Any:
    """An episodes-table cell, None where it is absent or NaN."""
    v = row.get(key)
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    return v.item() if isinstance(v, np.generic) else v


def _text(row: dict[str, Any], key: str) -> str:
    v = _value(row, key)
    return "" if v is None else str(v)


def _spans(row: dict[str, Any], key: str) -> list[Intervention] | None:
    """The episodes table's intervention or correction records; None where there are none that parse
    (a dataset another writer made: the spans are then made from the columns)."""
    text = _value(row, key)
    try:
        return [Intervention(**s) for s in json.loads(text)] if text else None
    except (TypeError, ValueError, AttributeError):
        return None


def _same(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per row: every value equal (NaN equal to NaN)."""
    a, b = np.asarray(a), np.asarray(b)
    eq = (a == b) | (np.isnan(a) & np.isnan(b)) if a.dtype.kind == "f" else a == b
    return eq.reshape(len(a), -1).all(axis=1)


def _known_from(values: np.ndarray) -> int:
    """The first row that is not all NaN (len(values) when none is): what comes before it was never recorded."""
    known = ~np.isnan(values).all(axis=1)
    return int(np.argmax(known)) if known.any() else len(values)


def _runs(mask: np.ndarray, codes: np.ndarray) -> list[tuple[int, int]]:
    """(first, last) frame of each run of `mask` frames sharing one code."""
    out: list[tuple[int, int]] = []
    for k in np.flatnonzero(mask):
        if out and out[-1][1] == k - 1 and codes[k] == codes[k - 1]:
            out[-1] = (out[-1][0], int(k))
        else:
            out.append((int(k), int(k)))
    return out


@dataclass
class _Labels:
    """The authority's intervention ids and shown labels per frame, and the records that go with them."""

    ids: np.ndarray
    shown: np.ndarray
    interventions: list[Intervention]
    corrections: list[Intervention]
    from_table: bool


def _labels(cols: dict[str, np.ndarray], row: dict[str, Any], t_act: np.ndarray, where: str) -> _Labels:
    n = len(t_act)
    inside = np.asarray(cols.get(INTERVENTION_COLUMN, np.zeros(n, bool)), bool)
    codes = np.asarray(cols.get(TRIGGER, np.zeros(n, np.int64)), np.int64)
    correction = cols.get(CORRECTION)
    shown = np.where(inside, codes, 0)

    def gives_back(labels: _Labels) -> bool:
        got = label_columns(labels.ids, labels.shown, t_act, labels.interventions, labels.corrections)
        return bool((got["intervention"] == inside).all() and (got[TRIGGER] == codes).all()
                    and (correction is None or (got[CORRECTION] == np.asarray(correction, bool)).all()))

    recorded, recorded_corr = _spans(row, "interventions"), _spans(row, "corrections")
    if recorded is not None:
        ids = np.zeros(n, np.int64)
        for iv in recorded:
            end = np.iinfo(np.int64).max if iv.end_ns is None else iv.end_ns
            ids[inside & (t_act >= iv.start_ns) & (t_act <= end)] = iv.id
        table = _Labels(ids, shown, recorded, recorded_corr or [], True)
        if (ids[inside] > 0).all() and gives_back(table):
            return table
    runs = _runs(inside, codes)
    ids = np.zeros(n, np.int64)
    for j, (a, b) in enumerate(runs, start=1):
        ids[a:b + 1] = j
    ivs = [Intervention(j, int(t_act[a]), int(t_act[b]), trigger_name(codes[a])) for j, (a, b) in enumerate(runs, 1)]
    corrs = []
    if correction is not None:
        marked = np.asarray(correction, bool)
        for j, (a, b) in enumerate(_runs(marked, np.where(inside, -1, codes)), start=1):
            outside = ~inside[a:b + 1]
            code = int(codes[a:b + 1][outside][0]) if outside.any() else 0
            corrs.append(Intervention(j, int(t_act[a]), int(t_act[b]), trigger_name(code)))
    made = _Labels(ids, shown, ivs, corrs, False)
    if not gives_back(made):
        raise ExportError(f"{where}: its intervention, trigger and correction columns do not follow the "
                          "converter's rules (one final label per intervention); nothing was written")
    return made


def _events(labels: _Labels) -> list[tuple[int, bytes]]:
    """`/teleop/intervention` JSON events (start, then end with the final label), by time."""
    out = []
    for kind, spans in ((INTERVENTION_KIND, labels.interventions), (CORRECTION_KIND, labels.corrections)):
        for s in spans:
            base = {"id": s.id, "start_ns": s.start_ns, "kind": kind}
            out.append((s.start_ns, string_cdr(json.dumps({**base, "end_ns": None, "trigger": None}))))
            if s.end_ns is not None:
                out.append((s.end_ns, string_cdr(json.dumps({**base, "end_ns": s.end_ns, "trigger": s.trigger}))))
    return sorted(out, key=lambda e: e[0])


@dataclass
class _Episode:
    """One episode's streams, in radians, checked to convert back to the dataset's columns exactly."""

    n: int
    times: np.ndarray  # t_0 .. t_n
    tail: int  # half a frame after t_n
    state: np.ndarray
    action: np.ndarray
    effort: np.ndarray | None
    leader: np.ndarray | None  # n + 1 rows: leader_state[0..n-1], human_action[n-1]
    leader_from: int
    policy: np.ndarray | None
    policy_from: int
    authority: np.ndarray | None  # n rows: alpha, mode, id, trigger at t_1..t_n
    feedback: np.ndarray | None  # n rows at t_0..t_{n-1}: six goal offsets (rad), six ceilings
    feedback_from: int
    labels: _Labels
    meta: EpisodeMeta
    topics: dict[str, str] = field(default_factory=dict)


def _radians(values: np.ndarray, cal: ArmCalibration, what: str, where: str) -> np.ndarray:
    """LeRobot units → radians through the episode's calibration; refused unless they come back exactly."""
    rad = cal.lerobot_to_rad(values)
    back = cal.rad_to_lerobot(rad).astype(values.dtype)
    bad = ~_same(back, values)
    if bad.any():
        k = int(np.argmax(bad))
        raise ExportError(f"{where}: {what} frame {k} ({values[k].tolist()}) does not come back exactly from "
                          "radians; nothing was written")
    return np.asarray(rad, np.float64)


def _episode(ds: LeRobotDataset, row: dict[str, Any], name: str, cameras: list[str], cals: Calibrations) -> _Episode:
    where = f"{ds.root} episode {int(row['episode_index'])}"
    cols = episode_columns(ds, row)
    state_key, action_key = (so101_joints(ds, f, "a bag") for f in (STATE, ACTION))
    state, action = cols[state_key], cols[action_key]
    n, fps = len(state), float(ds.fps)
    if n == 0:
        raise ExportError(f"{where}: no frames; nothing was written")
    expected = (np.arange(n) / fps).astype(np.float32)
    ts = cols.get("timestamp")
    if ts is not None and np.abs(np.asarray(ts, np.float64) - expected).max() > TIMESTAMP_TOLERANCE_S:
        raise ExportError(f"{ds.root / 'meta/info.json'}: episode {int(row['episode_index'])}'s timestamps are "
                          f"not frame_index/fps ({fps:g}); a bag's frames are the converter's fps grid")
    t0 = int(_value(row, "recorded_wall_ns") or 0)
    k = np.arange(n + 1, dtype=np.int64)
    times = t0 + np.round(k * (1e9 / fps)).astype(np.int64)  # `convert/align.Grid.times`
    tail = t0 + int(round((n + 0.5) * 1e9 / fps))
    leader = policy = authority = None
    leader_from = policy_from = n + 1
    if LEADER_STATE in cols and HUMAN_ACTION in cols:
        ls, ha = cols[LEADER_STATE], cols[HUMAN_ACTION]
        differs = ~_same(ha[:-1], ls[1:])
        if differs.any():
            k0 = int(np.argmax(differs))
            raise ExportError(f"{where}: {HUMAN_ACTION} frame {k0} is not {LEADER_STATE} frame {k0 + 1} (the converter "
                              "reads both from one leader stream); nothing was written")
        values = np.concatenate([ls, ha[-1:]])
        leader_from = _known_from(values)
        if leader_from <= n:
            leader = values.astype(np.float64)
            known = leader_from + np.flatnonzero(~np.isnan(leader[leader_from:]).all(axis=1))
            leader[known] = _radians(values[known], cals["leader"], "the leader", where)
    if POLICY_ACTION in cols:
        policy_from = _known_from(cols[POLICY_ACTION])
        if policy_from < n:
            policy = cols[POLICY_ACTION].astype(np.float64)
            known = policy_from + np.flatnonzero(~np.isnan(policy[policy_from:]).all(axis=1))
            policy[known] = _radians(cols[POLICY_ACTION][known], cals["follower"], POLICY_ACTION, where)
    labels = _labels(cols, row, times[1:], where)
    session_kind = _text(row, "session_kind")
    if BLEND in cols:
        mode = mode_code("teleop" if session_kind == "teleop" or policy is None else "policy")
        authority = np.stack([cols[BLEND].astype(np.float64), np.full(n, float(mode)), labels.ids.astype(np.float64),
                              labels.shown.astype(np.float64)], axis=1)
    effort_key = ds.feature_name(EFFORT_FEATURE)
    outcome = _text(row, "outcome")
    attempts = _value(row, "attempts")
    outcome_check = _value(row, "outcome_check")
    meta = EpisodeMeta(
        episode_name=name, task=task_of(ds, cols), operator=_text(row, "operator"), rig_id=_text(row, "rig_id"),
        robot_type=ds.robot_type, session_kind=session_kind, software_version=__version__,
        policy_checkpoint=_text(row, "policy_checkpoint"),
        calibration={role: cal.to_dict() for role, cal in cals.items()},
        cameras=[c.removeprefix(IMAGE_PREFIX) for c in cameras], outcome=outcome if outcome in OUTCOMES else "unset",
        attempts=None if attempts is None else int(attempts), interventions=labels.interventions,
        corrections=labels.corrections, started_ros_ns=int(times[0]), stopped_ros_ns=tail,
        task_spec_id=_text(row, "task_spec_id"), outcome_check=json.loads(outcome_check) if outcome_check else {},
    )
    effort = None if effort_key is None else cols[effort_key].astype(np.float64)
    feedback = cols[FEEDBACK].astype(np.float64) if FEEDBACK in cols else None
    ep = _Episode(n, times, tail, _radians(state, cals["follower"], STATE, where),
                  _radians(action, cals["follower"], ACTION, where), effort, leader, leader_from, policy,
                  policy_from, authority, feedback, n if feedback is None else _known_from(feedback), labels, meta)
    ep.topics = {bt.FOLLOWER_STATE: JOINT_STATE, bt.FOLLOWER_COMMAND: JOINT_STATE}
    for topic, present in ((bt.LEADER_STATE, leader is not None), (bt.POLICY_COMMAND, policy is not None),
                           (bt.AUTHORITY, authority is not None), (bt.LEADER_FEEDBACK, ep.feedback_from < n),
                           (bt.INTERVENTION, bool(labels.interventions or labels.corrections))):
        if present:
            ep.topics[topic] = STRING if topic == bt.INTERVENTION else JOINT_STATE
    for key in cameras:
        ep.topics[bt.camera_image(key.removeprefix(IMAGE_PREFIX))] = COMPRESSED_IMAGE
    meta.topics = list(ep.topics)
    return ep


class _Bag:
    """A BagWriter whose messages are stamped, logged and published at one time, with per-topic sequences."""

    def __init__(self, writer: BagWriter) -> None:
        self.writer = writer
        self.sequence: dict[str, int] = {}

    def write(self, topic: str, t: int, data: bytes) -> None:
        self.sequence[topic] = self.sequence.get(topic, 0) + 1
        self.writer.write(topic, data, log_time_ns=t, publish_time_ns=t, sequence=self.sequence[topic])


def _write_episode(ds: LeRobotDataset, job: EpisodeJob, cameras: list[str], quality: int, cals: Calibrations) -> int:
    """One episode's bag (in a worker process: everything it needs is in `job`)."""
    bag_dir, row = Path(job.path), job.row
    ep = _episode(ds, row, bag_dir.name, cameras, cals)
    names = [bt.camera_image(key.removeprefix(IMAGE_PREFIX)) for key in cameras]
    frame_ids = [key.removeprefix(IMAGE_PREFIX) for key in cameras]
    checkpoint = ep.meta.policy_checkpoint
    events = _events(ep.labels)
    with BagWriter(bag_dir, episode=ep.meta, fsync=False, max_chunk_age_s=1e6) as writer:
        writer.add_metadata(EXPORT_RECORD, {k: str(v) for k, v in {**job.provenance, "format": FORMAT}.items()})
        for topic, type_name in ep.topics.items():
            writer.add_topic(topic, type_name)
        bag = _Bag(writer)
        last: list[bytes] = []
        frames = episode_images(ds, row, cameras, ep.n) if cameras else repeat([])

        def state(t: int, k: int) -> None:
            bag.write(bt.FOLLOWER_STATE, t, joint_state_cdr(t, JOINTS, ep.state[k],
                                                            effort=None if ep.effort is None else ep.effort[k]))

        for k in range(ep.n + 1):
            t = int(ep.times[k])
            while events and events[0][0] <= t:
                bag.write(bt.INTERVENTION, *events.pop(0))
            if k < ep.n:
                state(t, k)
                last = [rgb_jpeg(rgb, quality, f"{ds.root} episode {int(row['episode_index'])} {key} frame {k}")
                        for key, rgb in zip(cameras, next(frames), strict=True)]
                for topic, frame_id, data in zip(names, frame_ids, last, strict=True):
                    bag.write(topic, t, compressed_image_cdr(t, data, frame_id))
            if ep.leader is not None and k >= ep.leader_from:
                bag.write(bt.LEADER_STATE, t, joint_state_cdr(t, JOINTS, ep.leader[k]))
            if ep.feedback is not None and ep.feedback_from <= k < ep.n:
                bag.write(bt.LEADER_FEEDBACK, t, joint_state_cdr(t, JOINTS, ep.feedback[k, :6],
                                                                 effort=ep.feedback[k, 6:]))
            a = max(k - 1, 0)  # the command in effect up to t_k (and at t_0, the first one)
            bag.write(bt.FOLLOWER_COMMAND, t, joint_state_cdr(t, JOINTS, ep.action[a]))
            if k == 0:
                continue
            if ep.policy is not None and a >= ep.policy_from:
                bag.write(bt.POLICY_COMMAND, t, joint_state_cdr(t, JOINTS, ep.policy[a], checkpoint))
            if ep.authority is not None:
                bag.write(bt.AUTHORITY, t, joint_state_cdr(t, list(AUTHORITY_FIELDS), ep.authority[a]))
        next(frames, None)  # the frame count check at the end of the videos
        state(ep.tail, ep.n - 1)
        for topic, frame_id, data in zip(names, frame_ids, last, strict=True):
            bag.write(topic, ep.tail, compressed_image_cdr(ep.tail, data, frame_id))
        bag.write(bt.FOLLOWER_COMMAND, ep.tail, joint_state_cdr(ep.tail, JOINTS, ep.action[-1]))
        for t, data in events:
            bag.write(bt.INTERVENTION, t, data)
    return ep.n


def export(src: Source, out: Path, jpeg_quality: int = DEFAULT_JPEG, show_progress: bool = True,
           supplied: Calibrations | None = None, registry: Path | None = None, workers: int | None = None,
           executor: str = "local") -> Exported:
    """Write `src`'s episodes as `out/episode_<k>/` bags (out must not exist), atomically, `workers`
    at a time; `supplied`: the arms' calibrations by role (else nominal ones)."""
    for feature in (STATE, ACTION):
        so101_joints(src.ds, feature, "a bag")  # another arm is refused before anything is written
    write = functools.partial(_write_episode, cameras=sorted(video_keys(src.ds)), quality=jpeg_quality,
                              cals=calibrations(supplied))
    return export_episodes(src, out, FORMAT, write, EPISODE_BAG, workers=workers, executor=executor,
                           registry=registry, options={"jpeg": jpeg_quality}, show_progress=show_progress)


def run_export(req: ExportRequest) -> int:
    """The `export --to mcap` verb's work: one line saying what was written and how to read it back."""
    quality = jpeg_quality(req.jpeg, DEFAULT_JPEG, f"give 1..100 (default {DEFAULT_JPEG})")
    refuse_existing(req.out)
    try:
        supplied = load_supplied(role_files(list(req.calibration)))
    except ValueError as exc:
        if isinstance(exc, FlywheelError):
            raise
        raise UsageError(str(exc), where="--calibration") from exc
    src = open_source(req.source, req.dataset)
    made = export(src, req.out, quality, supplied=supplied, registry=req.registry, workers=req.workers,
                  executor=req.executor)
    print(f"wrote {made.out}: {made.episodes} bags (episode_0..{made.episodes - 1}), {made.frames} frames; open "
          f"episode_<k>/episode_<k>_0.mcap in Foxglove, or `teleop-flywheel validate {made.out}`, "
          f"`teleop-flywheel convert {made.out} --fps {src.ds.fps:g} --dataset NEW`; lineage export {made.export_id}")
    return 0
