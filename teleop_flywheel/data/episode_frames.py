"""One bag → the frames of one LeRobot episode (picklable; runs in a convert worker).

Validate with the shared checks (`data/checks.py`, decode path `data/decode.py`): only PASSING
episodes are converted unless `--include-failed`. Align on the fps grid (`align.py`: zero-order
hold, staleness bound, frame contract) on header stamps, convert radians to LeRobot units through
the recorded calibration (`data/calibrations.py`), decode the held JPEGs (cv2, in a thread beside
the encoder) and encode each camera to a temporary mp4 in the convert's work directory.

Features: observation.state (follower, at t_k), action (command sent, in effect over
(t_k, t_k+1]), observation.images.<camera> (at t_k), observation.leader_state (at t_k),
complementary_info.human_action (leader, same rule as action), complementary_info.policy_action
(NaN where no policy command exists), complementary_info.blend_weight (α), intervention
(intervention id ≠ 0), complementary_info.trigger (labels.py code: 0 none, 1.. TRIGGER_LABELS).
Episode columns: episode_id (content id v2), episode_id_v1, id_version, operator, outcome,
attempts, policy_checkpoint, session_kind, rig_id, recorded_wall_ns (the grid start on the wall
clock, through the episode's time base), interventions (JSON), source_bag.
"""
from __future__ import annotations

import errno
import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from teleop_flywheel.core.calibration import ArmCalibration
from teleop_flywheel.core.so101 import JOINT_NAMES
from teleop_flywheel.data.align import AlignError, align, make_grid
from teleop_flywheel.data.calibrations import (
    CALIBRATION_MISSING,
    MissingCalibrationError,
    episode_calibrations,
    joint_limits,
)
from teleop_flywheel.data.checks import Inspection, inspect_bag
from teleop_flywheel.data.decode import DecodeError
from teleop_flywheel.data.lerobot import format as lf
from teleop_flywheel.data.lerobot.commit import fault
from teleop_flywheel.data.lerobot.writer import EpisodeData
from teleop_flywheel.data.reasons import Reason, Supplied, ValidateConfig
from teleop_flywheel.data.validate import display
from teleop_flywheel.recording.reader import ID_VERSION, Bag, NotABagError, Stream, open_bag

JOINT_FEATURE_NAMES = [f"{j}.pos" for j in JOINT_NAMES]
VECTOR_FEATURES = ("observation.state", "action", "observation.leader_state", "complementary_info.human_action",
                   "complementary_info.policy_action")
SCALAR_FEATURES = {"complementary_info.blend_weight": "float32", "intervention": "bool",
                   "complementary_info.trigger": "int64"}


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


@dataclass
class Prepared:
    """One bag, converted to arrays + temporary videos (or why not)."""

    bag: str
    name: str
    episode_id: str | None
    status: str  # "ok" | "rejected" | "duplicate" | "error"
    reasons: list[Reason] = field(default_factory=list)
    data: EpisodeData | None = None
    joint_limits: dict[str, list[float]] = field(default_factory=dict)  # the follower's, LeRobot units


def _optional(stream: Stream | None, times: np.ndarray, width: int, fill: float = np.nan) -> np.ndarray:
    """Zero-order hold of a stream that may be missing or start late: `fill` where nothing is known."""
    out = np.full((len(times), width), fill)
    if stream is None or len(stream.stamps_ns) == 0:
        return out
    idx = np.searchsorted(stream.stamps_ns, times, side="right") - 1
    ok = idx >= 0
    out[ok] = stream.values[idx[ok]].reshape(int(ok.sum()), -1)[:, :width]
    return out


def _encode_camera(images: list[bytes], indices: np.ndarray, path: Path, fps: int, codec: str
                   ) -> tuple[int, int, dict[str, np.ndarray]]:
    """Decode the held JPEG of every frame (each distinct image once, in a thread) and encode."""
    first = cv2.imdecode(np.frombuffer(images[int(indices[0])], np.uint8), cv2.IMREAD_COLOR)
    if first is None:
        raise ValueError(f"{path.stem}: image {int(indices[0])} is not a decodable JPEG")
    h, w = first.shape[:2]
    sampled = set(lf.sample_indices(len(indices)).tolist())
    stat_images: list[np.ndarray] = []

    def decode(i: int) -> np.ndarray:
        bgr = cv2.imdecode(np.frombuffer(images[i], np.uint8), cv2.IMREAD_COLOR)
        if bgr is None or bgr.shape[:2] != (h, w):
            raise ValueError(f"{path.stem}: image {i} is not a {w}x{h} JPEG")
        return bgr

    enc = lf.VideoEncoder(path, w, h, fps, codec)
    distinct = np.concatenate(([True], indices[1:] != indices[:-1]))
    with ThreadPoolExecutor(max_workers=2) as pool:
        decoded = pool.map(decode, (int(i) for i in indices[distinct]))
        yuv: np.ndarray = np.empty(0, np.uint8)  # set at k = 0: distinct[0] is True
        bgr = first
        for k in range(len(indices)):
            if distinct[k]:
                bgr = next(decoded)
                yuv = cv2.cvtColor(bgr, cv2.COLOR_BGR2YUV_I420)
            enc.add_i420(yuv)
            if k in sampled:
                stat_images.append(lf.downsample(bgr)[..., ::-1])
    enc.close()
    return h, w, lf.image_stats(stat_images)


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
        return out
    try:
        ins = inspect_bag(bag, job.validate, job.supplied)
        out.reasons = ins.reasons
        if out.reasons and not job.include_failed:
            out.status = "rejected"
            return out
        _fill(bag, ins, job, out)
    except AlignError as exc:
        out.status = "rejected"
        out.reasons.append(Reason(exc.code, str(exc)))
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


def _fill(bag: Bag, ins: Inspection, job: ConvertJob, out: Prepared) -> None:
    fps = job.fps
    ep, dec = ins.episode, ins.decoded
    if dec is None:
        raise DecodeError("CORRUPT", "; ".join(str(r) for r in ins.reasons) or "undecodable")
    cals = episode_calibrations(bag, job.calibrations)
    fcal, lcal = cals["follower"], cals["leader"]
    follower, command = dec.follower, dec.command
    images = dec.images
    cam_streams = [Stream(f"camera:{cam}", im.stamps_ns, np.arange(len(im.data))) for cam, im in images.items()]
    staleness = float("inf") if job.include_failed else job.staleness_s
    grid = make_grid([follower, command] + cam_streams, fps)
    aligned = align([follower] + cam_streams, [command], fps, staleness, grid)
    t_obs, t_act = grid.times(0), grid.times(1)
    auth = _optional(dec.authority, t_act, 3)
    cols: dict[str, np.ndarray] = {
        "observation.state": fcal.rad_to_lerobot(aligned.values[follower.name]).astype(np.float32),
        "action": fcal.rad_to_lerobot(aligned.values[command.name]).astype(np.float32),
        "observation.leader_state": lcal.rad_to_lerobot(_optional(dec.leader, t_obs, 6)).astype(np.float32),
        "complementary_info.human_action": lcal.rad_to_lerobot(_optional(dec.leader, t_act, 6)).astype(np.float32),
        "complementary_info.policy_action": fcal.rad_to_lerobot(_optional(dec.policy, t_act, 6)).astype(np.float32),
        "complementary_info.blend_weight": auth[:, 0].astype(np.float32),
        "intervention": np.nan_to_num(auth[:, 1]) != 0,
        "complementary_info.trigger": np.nan_to_num(auth[:, 2]).astype(np.int64),
    }
    n = grid.n
    cols["frame_index"] = np.arange(n, dtype=np.int64)
    cols["timestamp"] = (np.arange(n) / fps).astype(np.float32)
    task = job.task if job.task is not None else (ep.task if ep else "")
    data = EpisodeData(task, n, cols, {k: lf.feature_stats(v) for k, v in cols.items()})
    tmp = Path(job.tmp_dir) / (bag.episode_id or "episode")
    for cam, im in images.items():
        path = tmp / f"{cam}.mp4"
        h, w, st = _encode_camera(im.data, aligned.indices[f"camera:{cam}"], path, fps, job.codec)
        data.videos[cam] = (str(path), h, w)
        data.stats[f"observation.images.{cam}"] = st
        fault(f"work {path.parent.name[:12]}/{path.name}")
    tb = ins.time_base
    wall = int(tb.to_wall(np.array([grid.t0_ns]))[0]) if tb is not None and tb.verifiable else None
    data.extra = {
        "episode_id": bag.episode_id, "episode_id_v1": bag.episode_id_v1, "id_version": ID_VERSION,
        "operator": ep.operator if ep else "", "outcome": ep.outcome if ep else "unset",
        "attempts": ep.attempts if ep else None, "policy_checkpoint": ep.policy_checkpoint if ep else "",
        "session_kind": ep.session_kind if ep else "", "rig_id": ep.rig_id if ep else "", "recorded_wall_ns": wall,
        "interventions": json.dumps([i.__dict__ for i in ep.interventions] if ep else []),
        "source_bag": display(bag.name),
    }
    out.data = data
    out.joint_limits = joint_limits(fcal)


def features_for(videos: dict[str, tuple[int, int]]) -> dict[str, Any]:
    feats: dict[str, Any] = {}
    for key in VECTOR_FEATURES:
        feats[key] = lf.vector_feature(JOINT_FEATURE_NAMES)
    for cam, (h, w) in sorted(videos.items()):
        feats[f"observation.images.{cam}"] = lf.video_feature(h, w)
    for key, dtype in SCALAR_FEATURES.items():
        feats[key] = lf.scalar_feature(dtype)
    return feats
