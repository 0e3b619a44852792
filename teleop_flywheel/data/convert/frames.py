"""One bag → the frames of one LeRobot episode (picklable; runs in a convert worker).

Validate with the shared checks (`data/validate/checks.py`, decode path `data/validate/decode.py`): only PASSING
episodes are converted unless `--include-failed`. Align on the fps grid (`align.py`: zero-order
hold, staleness bound, frame contract) on header stamps, convert radians to LeRobot units through
the recorded calibration (`data/convert/calibrations.py`), decode the held JPEGs (cv2, in a thread beside
the encoder) and encode each camera to a temporary mp4 in the convert's work directory — or remux
the segments `ingest` encoded while the episode was recorded, where they hold exactly those frames
(`data/convert/segments.py`).

Features: observation.state (follower, at t_k), action (command sent, in effect over (t_k, t_k+1]),
observation.images.<camera> (at t_k), complementary_info.leader_state (the leader arm at t_k: never
a policy input, `data/lerobot/flywheel_schema.py`), complementary_info.human_action (leader, same
rule as action), complementary_info.policy_action (NaN where no policy command exists),
complementary_info.blend_weight (α), intervention (intervention id ≠ 0), complementary_info.trigger
(the FINAL label of the intervention or correction the frame belongs to: 0 none, 1..
TRIGGER_LABELS), complementary_info.correction (a teleop-mode correction span:
`data/convert/frame_labels.py`), observation.effort (the follower's JointState.effort at t_k: load
as a signed fraction of max torque, −1..1; in episodes that recorded it), complementary_info.feedback
(what the leader rendered at t_k, the leader's rule, by zero-order hold of `/leader/feedback`: six
goal offsets in rad, then six torque ceilings as a fraction of max torque; NaN before its first
message; in episodes that recorded it). Episode columns: `data/validate/episode_columns.py`, and
with efforts how hard the operator pressed (`data/reports/mashing.py` TABLE_COLUMNS).

Before any encoding, an episode whose features the target dataset cannot hold is refused
(`FeatureSetError`: an optional feature — effort, feedback — present/absent against the dataset's;
corrections into a dataset without `complementary_info.correction`). `--trim-dead-air`
(`trim_dead_air`) cuts leading and trailing dead air beyond the validator's bounds from the grid
instead of rejecting the episode.
"""
from __future__ import annotations

import errno
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from teleop_flywheel.core.calibration import ArmCalibration
from teleop_flywheel.core.episode import EpisodeMeta
from teleop_flywheel.core.files import inside
from teleop_flywheel.core.so101 import JOINT_NAMES
from teleop_flywheel.data.convert.align import AlignError, align, make_grid
from teleop_flywheel.data.convert.calibrations import CALIBRATION_MISSING, episode_calibrations, joint_limits
from teleop_flywheel.data.convert.frame_labels import label_columns
from teleop_flywheel.data.convert.segments import encode_camera
from teleop_flywheel.data.curation.curate import integrated_squared_jerk
from teleop_flywheel.data.errors import DecodeError, EncoderStalled, FeatureSetError, MissingCalibrationError
from teleop_flywheel.data.lerobot import v3_layout
from teleop_flywheel.data.lerobot.append import EpisodeData
from teleop_flywheel.data.lerobot.commit import fault
from teleop_flywheel.data.lerobot.encoder_process import ENCODE_STALL_S
from teleop_flywheel.data.lerobot.episode_table import START_STATE
from teleop_flywheel.data.lerobot.flywheel_schema import FEEDBACK, FEEDBACK_NAMES, LEADER_STATE
from teleop_flywheel.data.provenance.reviews import ReviewDecision, apply_decision
from teleop_flywheel.data.reports.mashing import episode_mashing, table_columns
from teleop_flywheel.data.validate.checks import Inspection, dead_runs, inspect_bag
from teleop_flywheel.data.validate.decode import Decoded
from teleop_flywheel.data.validate.episode_columns import episode_columns
from teleop_flywheel.data.validate.reasons import DEAD_AIR, UNSAFE_NAME, Reason, Supplied, ValidateConfig
from teleop_flywheel.data.validate.validator import EpisodeReport, display, report_of
from teleop_flywheel.recording.mcap.exceptions import NotABagError
from teleop_flywheel.recording.mcap.reader import Bag, Stream, open_bag

JOINT_FEATURE_NAMES = [f"{j}.pos" for j in JOINT_NAMES]
VECTOR_FEATURES = ("observation.state", "action", LEADER_STATE, "complementary_info.human_action",
                   "complementary_info.policy_action")
CORRECTION = "complementary_info.correction"
SCALAR_FEATURES = {"complementary_info.blend_weight": "float32", "intervention": "bool",
                   "complementary_info.trigger": "int64", CORRECTION: "bool"}
EFFORT = "observation.effort"
EFFORT_NAMES = [f"{j}.effort" for j in JOINT_NAMES]
# Features an episode has only where its bag recorded their stream (names; what a bag without it is).
# A dataset either has one for every episode or for none: a column of NaN for the episodes that lack
# it would read as "nothing happened" to a loader that fills or drops NaN, so a mix is refused.
OPTIONAL_FEATURES: dict[str, list[str]] = {EFFORT: EFFORT_NAMES, FEEDBACK: FEEDBACK_NAMES}
RECORDED_BEFORE = {EFFORT: "recorded before efforts were",
                   FEEDBACK: "recorded before the leader's rendered feedback (/leader/feedback) was"}


FEATURE_SET = "FEATURE_SET"  # a Prepared status reason: refused before encoding


@dataclass
class ConvertJob:
    bag: str
    fps: int
    codec: str
    tmp_dir: str
    task: str | None
    include_failed: bool
    staleness_s: float | None
    validate: ValidateConfig
    known_ids: frozenset[str] = frozenset()
    calibrations: dict[str, ArmCalibration] = field(default_factory=dict)  # --calibration ROLE=FILE
    supplied: Supplied | None = None  # --outcome/--task for bags without episode metadata
    trim_dead_air: bool = False  # cut leading/trailing dead air instead of rejecting it
    # What the target dataset holds (None: a new dataset, anything goes): checked before encoding.
    optional_features: frozenset[str] | None = None  # which of OPTIONAL_FEATURES the dataset has
    correction_feature: bool = True
    recorded_ids: frozenset[str] = frozenset()  # episodes whose verdict the dataset's validation record holds
    segments: str | None = None  # this bag's pre-encoded video segments (`data/convert/segments.py`), if any
    reviews: dict[str, ReviewDecision] = field(default_factory=dict)  # episode_id -> its latest review
    admit_reviewed: bool = False  # act on them (`provenance.reviews.apply_decision`), not only record them
    encode_stall_s: float = ENCODE_STALL_S  # an encode making no progress this long stops the run


@dataclass
class Prepared:
    """One bag, converted to arrays + temporary videos (or why not)."""

    bag: str
    name: str
    episode_id: str | None
    status: str  # "ok" | "rejected" | "duplicate" | "refused" (feature set) | "error"
    reasons: list[Reason] = field(default_factory=list)
    data: EpisodeData | None = None
    joint_limits: dict[str, list[float]] = field(default_factory=dict)  # the follower's, LeRobot units
    report: EpisodeReport | None = None  # the validator's verdict (warnings, camera lag, ...), as validate gives it
    reused_frames: int = 0  # camera frames taken from pre-encoded segments, not encoded here


def _optional(stream: Stream | None, times: np.ndarray, width: int, fill: float = np.nan) -> np.ndarray:
    """Zero-order hold of a stream that may be missing or start late: `fill` where nothing is known."""
    out = np.full((len(times), width), fill)
    if stream is None or len(stream.stamps_ns) == 0:
        return out
    idx = np.searchsorted(stream.stamps_ns, times, side="right") - 1
    ok = idx >= 0
    out[ok] = stream.values[idx[ok]].reshape(int(ok.sum()), -1)[:, :width]
    return out


def prepare_episode(job: ConvertJob) -> Prepared:
    """One bag → arrays + temporary mp4s (picklable; runs in a worker). Never raises for a bad bag."""
    try:
        bag = open_bag(job.bag)
    except NotABagError as exc:
        return Prepared(job.bag, Path(job.bag).name, None, "error", [Reason("NOT_A_BAG", str(exc))])
    except Exception as exc:  # noqa: BLE001 - unreadable: a verdict for this bag, the batch goes on
        return Prepared(job.bag, Path(job.bag).name, None, "error", [Reason("CORRUPT", f"unreadable: {exc}")])
    out = Prepared(job.bag, bag.name, bag.episode_id, "ok")
    if bag.episode_id in job.known_ids or bag.episode_id_v1 in job.known_ids:
        out.status = "duplicate"
        if bag.episode_id not in job.recorded_ids:  # in the dataset, its verdict not (a crash after the commit)
            out.report = report_of(job.bag, bag.name, bag.episode_id, bag.episode_id_v1, sorted(bag.camera_topics()),
                                   inspect_bag(bag, job.validate, job.supplied))
        return out
    try:
        ins = inspect_bag(bag, job.validate, job.supplied)
        if job.trim_dead_air:  # leading/trailing dead air is cut below, not a rejection
            ins.reasons = [r for r in ins.reasons if not (r.code == DEAD_AIR and r.numbers.get("kind") in
                                                            ("leading", "trailing"))]
        out.report = report_of(job.bag, bag.name, bag.episode_id, bag.episode_id_v1, sorted(bag.camera_topics()), ins)
        _review(out.report, job)
        out.reasons = out.report.reasons
        if out.reasons and (not job.include_failed or any(r.code == UNSAFE_NAME for r in out.reasons)):
            out.status = "rejected"
            return out
        _fill(bag, ins, job, out)
    except EncoderStalled:
        raise  # the encoder library, not this bag: the whole run stops and says so
    except AlignError as exc:
        out.status = "rejected"
        out.reasons.append(Reason(exc.code, str(exc)))
    except FeatureSetError as exc:
        out.status = "refused"
        out.reasons.append(Reason(FEATURE_SET, str(exc)))
    except MissingCalibrationError as exc:
        out.status = "error"
        out.reasons.append(Reason(CALIBRATION_MISSING, str(exc)))
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise  # the disk, not this bag: the whole run stops and says so
        out.status = "error"
        out.reasons.append(Reason("CORRUPT", f"{display(Path(job.bag).name)}: {type(exc).__name__}: {exc}"))
    except Exception as exc:  # noqa: BLE001 - undecodable content: report this bag, the batch goes on
        out.status = "error"
        out.reasons.append(Reason("CORRUPT", f"{display(Path(job.bag).name)}: {type(exc).__name__}: {exc}"))
    return out


def _review(report: EpisodeReport, job: ConvertJob) -> None:
    """Record the episode's latest review on its report; with --admit-reviewed, act on it."""
    decision = job.reviews.get(report.episode_id or "")
    if decision is None:
        return
    report.review = decision.to_dict()
    if job.admit_reviewed:
        reviewed = apply_decision(report.reasons, report.warnings, decision)
        report.reasons, report.warnings, report.overruled = reviewed.reasons, reviewed.warnings, reviewed.overruled


def _trim_bounds(command: Stream, fps: int, cfg: ValidateConfig) -> tuple[int | None, int | None]:
    """(grid start, grid end) that cut leading/trailing dead air beyond the validator's bounds
    (`--trim-dead-air`): action[0] is then the first command that changed, the last action the
    command the operator ended on; None where nothing is cut."""
    if len(command.stamps_ns) < 2:
        return None, None
    starts, _ends, dur = dead_runs(command.stamps_ns, command.values)
    period = int(round(1e9 / fps))
    start = int(command.stamps_ns[starts[1]]) - period if len(dur) > 1 and dur[0] > cfg.max_leading_dead_s else None
    end = int(command.stamps_ns[starts[-1]]) + period if len(dur) > 1 and dur[-1] > cfg.max_trailing_dead_s else None
    return start, end


def _fill(bag: Bag, ins: Inspection, job: ConvertJob, out: Prepared) -> None:
    fps = job.fps
    ep, dec = ins.episode, ins.decoded
    if dec is None:
        raise DecodeError("CORRUPT", "; ".join(str(r) for r in ins.reasons) or "undecodable")
    _refuse_feature_change(dec, ep, job)
    cals = episode_calibrations(bag, job.calibrations)
    fcal, lcal = cals["follower"], cals["leader"]
    follower, command = dec.follower, dec.command
    images = dec.images
    cam_streams = [Stream(f"camera:{cam}", im.stamps_ns, np.arange(len(im.data))) for cam, im in images.items()]
    # An episode converted despite its verdict (asked for, or a person overruled it) keeps its gaps.
    admitted = job.include_failed or bool(out.report is not None and out.report.overruled)
    staleness = float("inf") if admitted else job.staleness_s
    full = make_grid([follower, command] + cam_streams, fps)
    lo, hi = _trim_bounds(command, fps, job.validate) if job.trim_dead_air else (None, None)
    grid = make_grid([follower, command] + cam_streams, fps, lo, hi)
    trimmed = ((grid.t0_ns - full.t0_ns) / 1e9 if lo is not None else 0.0,
               (full.times(0)[-1] - grid.times(0)[-1]) / 1e9 if hi is not None and full.n and grid.n else 0.0)
    if (lo is not None or hi is not None) and grid.n / fps < job.validate.min_duration_s:
        raise AlignError(f"{grid.n / fps:.1f}s left after trimming dead air < {job.validate.min_duration_s:g}s",
                         code="DURATION_OUT_OF_RANGE")
    aligned = align([follower] + cam_streams, [command], fps, staleness, grid)
    t_obs, t_act = grid.times(0), grid.times(1)
    auth = _optional(dec.authority, t_act, 3)
    cols: dict[str, np.ndarray] = {
        "observation.state": fcal.rad_to_lerobot(aligned.values[follower.name]).astype(np.float32),
        "action": fcal.rad_to_lerobot(aligned.values[command.name]).astype(np.float32),
        LEADER_STATE: lcal.rad_to_lerobot(_optional(dec.leader, t_obs, 6)).astype(np.float32),
        "complementary_info.human_action": lcal.rad_to_lerobot(_optional(dec.leader, t_act, 6)).astype(np.float32),
        "complementary_info.policy_action": fcal.rad_to_lerobot(_optional(dec.policy, t_act, 6)).astype(np.float32),
        "complementary_info.blend_weight": auth[:, 0].astype(np.float32),
    }
    labels = label_columns(auth[:, 1], auth[:, 2], t_act, ep.interventions if ep else [],
                           ep.corrections if ep else [])
    if not job.correction_feature:
        del labels["complementary_info.correction"]
    cols.update(labels)
    if dec.effort is not None:
        cols[EFFORT] = _optional(dec.effort, t_obs, 6).astype(np.float32)
    if dec.feedback is not None:
        cols[FEEDBACK] = _optional(dec.feedback, t_obs, len(FEEDBACK_NAMES)).astype(np.float32)
    n = grid.n
    cols["frame_index"] = np.arange(n, dtype=np.int64)
    cols["timestamp"] = (np.arange(n) / fps).astype(np.float32)
    task = job.task if job.task is not None else (ep.task if ep else "")
    data = EpisodeData(task, n, cols, {k: v3_layout.feature_stats(v) for k, v in cols.items()})
    tmp = inside(job.tmp_dir, bag.episode_id or "episode")
    for cam, im in images.items():
        # The camera name is a checked identifier (reader); the paths built from it are proven inside too.
        path = inside(tmp, f"{cam}.mp4")
        try:
            video = encode_camera(im.data, aligned.indices[f"camera:{cam}"], path, fps, job.codec,
                                  inside(job.segments, cam) if job.segments else None, job.encode_stall_s)
        except EncoderStalled as exc:
            raise EncoderStalled(f"{display(bag.name)} (episode {bag.episode_id}) camera {cam}: {exc}; nothing "
                                 "was converted") from None
        data.videos[cam] = (str(path), video.height, video.width)
        data.stats[f"observation.images.{cam}"] = video.stats
        out.reused_frames += video.reused
        fault(f"work {path.parent.name[:12]}/{path.name}")
    tb = ins.time_base
    wall = int(grid.t0_ns) if tb is not None and tb.verifiable else None  # ROS time is the wall clock
    review = out.report.review if out.report is not None else None
    data.extra = episode_columns(bag, ep, ins, wall, trimmed, review["verdict"] if review else None)
    # The episode's own curation columns; the dataset-relative ones are computed at commit (`with_scores`).
    data.extra["jerk"] = float(integrated_squared_jerk(cols["action"], np.array([0]), np.array([n]), fps)[0])
    data.extra[START_STATE] = cols["observation.state"][0].astype(np.float64).tolist()
    if EFFORT in cols:  # how hard the operator pressed, for `manifest create --filter`
        data.extra.update(table_columns(episode_mashing(0, cols[EFFORT], EFFORT_NAMES, fps, cols.get(FEEDBACK),
                                                         cols["observation.state"])))
    out.data = data
    out.joint_limits = joint_limits(fcal)


def _refuse_feature_change(dec: Decoded, ep: EpisodeMeta | None, job: ConvertJob) -> None:
    """Before any encoding: an episode whose features the dataset cannot hold is refused (a
    feature-set change is a new dataset)."""
    has = optional_present(dec)
    for name in OPTIONAL_FEATURES if job.optional_features is not None else ():
        if (name in has) != (name in (job.optional_features or ())):
            before = RECORDED_BEFORE[name]
            what = (f"episode has no {name} ({before}) but the dataset has it" if name not in has
                    else f"episode carries {name} but the dataset has none (converted from bags {before})")
            raise FeatureSetError(f"{what}: a feature-set change is a new dataset (convert it into another --dataset)")
    if not job.correction_feature and ep is not None and ep.corrections:
        raise FeatureSetError(
            "episode has teleop-mode corrections but the dataset has no complementary_info.correction "
            "(converted before corrections): a feature-set change is a new dataset (convert it into "
            "another --dataset)"
        )


def optional_present(dec: Decoded) -> set[str]:
    """Which of OPTIONAL_FEATURES an episode's decoded streams give."""
    return {name for name, stream in ((EFFORT, dec.effort), (FEEDBACK, dec.feedback)) if stream is not None}


def features_for(videos: dict[str, tuple[int, int]], optional: frozenset[str] | set[str] = frozenset(),
                 correction: bool = True) -> dict[str, Any]:
    """info.json's features: `optional`, the OPTIONAL_FEATURES the episodes have."""
    feats: dict[str, Any] = {}
    for key in VECTOR_FEATURES:
        feats[key] = v3_layout.vector_feature(JOINT_FEATURE_NAMES)
    for name, names in OPTIONAL_FEATURES.items():
        if name in optional:
            feats[name] = v3_layout.vector_feature(names)
    for cam, (h, w) in sorted(videos.items()):
        feats[f"observation.images.{cam}"] = v3_layout.video_feature(h, w)
    for key, dtype in SCALAR_FEATURES.items():
        if key != CORRECTION or correction:
            feats[key] = v3_layout.scalar_feature(dtype)
    return feats
