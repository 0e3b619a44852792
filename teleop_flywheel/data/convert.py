"""`teleop-flywheel convert BAG_OR_DIR... --out DATASET`: episode bags → a LeRobot v3.0 dataset.

Per bag (in parallel, `--workers/--executor`): validate (only PASSING episodes are converted
unless `--include-failed`), align on the fps grid (`align.py`: zero-order hold, staleness bound,
frame contract), convert radians to LeRobot units through the recorded calibration, decode the
JPEGs (cv2, in a thread beside the encoder) and encode each camera to a temporary mp4. Then in
this process: skip episodes whose content id is already in the dataset (idempotent), remux the
temporary videos back to back into `videos/<key>/chunk-XXX/file-XXX.mp4` (new files per run,
rolled over at `video_files_size_in_mb`), write one new data parquet per run, rewrite the
episodes table, tasks, stats and info. Episodes with a different camera set than the dataset
(schema drift) go to a dataset of their own schema beside it, `<DATASET>__<cameras>`, and are
reported — never dropped, never a crash.

Calibration (radians → LeRobot units) is the episode's own, by role (`EpisodeMeta.calibration`,
`{"leader": ..., "follower": ...}`; bags recorded before: the role read from the file stem).
An episode without one of the two is not converted: the error names the role and
`--calibration ROLE=FILE`, which supplies it for every episode that lacks it (a recorded one is
never replaced). info.json `joint_limits` are the follower calibrations' ranges (the union over
the episodes converted into the dataset); `--repo-id` is stored as info.json `repo_id`, where the
card and the manifest read it (LeRobot keeps unknown info keys; a camera-schema sibling gets
`<repo_id>__<cameras>`).

Features: observation.state (follower, at t_k), action (command sent, in effect over
(t_k, t_k+1]), observation.images.<camera> (at t_k), observation.leader_state (at t_k),
complementary_info.human_action (leader, same rule as action), complementary_info.policy_action
(NaN where no policy command exists), complementary_info.blend_weight (α), intervention
(intervention id ≠ 0), complementary_info.trigger (labels.py code: 0 none, 1.. TRIGGER_LABELS).
The dataset files are written by `data/lerobot/writer.py`.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from collections import Counter
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from teleop_flywheel.core.calibration import ArmCalibration
from teleop_flywheel.core.labels import TRIGGER_LABELS
from teleop_flywheel.core.so101 import JOINT_NAMES
from teleop_flywheel.core.topics import AUTHORITY, FOLLOWER_COMMAND, FOLLOWER_STATE, LEADER_STATE, POLICY_COMMAND
from teleop_flywheel.data.align import AlignError, align, make_grid
from teleop_flywheel.data.calibrations import (
    CALIBRATION_MISSING,
    MissingCalibrationError,
    episode_calibrations,
    joint_limits,
    load_supplied,
    role_files,
    union_limits,
)
from teleop_flywheel.data.lerobot import format as lf
from teleop_flywheel.data.lerobot.writer import EpisodeData, Schema, existing_ids, read_info, schema_of, write_episodes
from teleop_flywheel.data.parallel import add_arguments_to, parallel_map
from teleop_flywheel.data.validate import Reason, ValidateConfig, check_bag, load_inputs
from teleop_flywheel.recording.reader import Bag, BagReadError, Stream, open_bag

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
    except (BagReadError, OSError) as exc:
        return Prepared(job.bag, Path(job.bag).name, None, "error", [Reason("CORRUPT", f"unreadable: {exc}")])
    out = Prepared(job.bag, bag.name, bag.episode_id, "ok")
    if bag.episode_id in job.known_ids:
        out.status = "duplicate"
        return out
    try:
        out.reasons = check_bag(bag, job.validate)
        if out.reasons and not job.include_failed:
            out.status = "rejected"
            return out
        _fill(bag, job, out)
    except AlignError as exc:
        out.status = "rejected"
        out.reasons.append(Reason(exc.code, str(exc)))
    except MissingCalibrationError as exc:
        out.status = "error"
        out.reasons.append(Reason(CALIBRATION_MISSING, str(exc)))
    except Exception as exc:  # undecodable content: report this bag, the batch goes on
        out.status = "error"
        out.reasons.append(Reason("CORRUPT", f"{Path(job.bag).name}: {type(exc).__name__}: {exc}"))
    return out


def _fill(bag: Bag, job: ConvertJob, out: Prepared) -> None:
    fps = job.fps
    cals = episode_calibrations(bag, job.calibrations)
    fcal, lcal = cals["follower"], cals["leader"]
    follower = bag.joint_state(FOLLOWER_STATE).stream(list(JOINT_NAMES))
    command = bag.joint_state(FOLLOWER_COMMAND).stream(list(JOINT_NAMES))
    cams = bag.camera_topics()
    images = {cam: bag.images(topic) for cam, topic in cams.items()}
    cam_streams = [Stream(f"camera:{cam}", im.stamps_ns, np.arange(len(im.data))) for cam, im in images.items()]
    staleness = float("inf") if job.include_failed else job.staleness_s
    grid = make_grid([follower, command] + cam_streams, fps)
    aligned = align([follower] + cam_streams, [command], fps, staleness, grid)
    t_obs, t_act = grid.times(0), grid.times(1)
    leader = bag.joint_state(LEADER_STATE).stream(list(JOINT_NAMES)) if bag.has(LEADER_STATE) else None
    policy = bag.joint_state(POLICY_COMMAND).stream(list(JOINT_NAMES)) if bag.has(POLICY_COMMAND) else None
    authority = None
    if bag.has(AUTHORITY):
        a = bag.authority()
        authority = Stream(AUTHORITY, a.stamps_ns, a.stream(["alpha", "intervention_id", "trigger"]).values)
    auth = _optional(authority, t_act, 3)
    cols: dict[str, np.ndarray] = {
        "observation.state": fcal.rad_to_lerobot(aligned.values[follower.name]).astype(np.float32),
        "action": fcal.rad_to_lerobot(aligned.values[command.name]).astype(np.float32),
        "observation.leader_state": lcal.rad_to_lerobot(_optional(leader, t_obs, 6)).astype(np.float32),
        "complementary_info.human_action": lcal.rad_to_lerobot(_optional(leader, t_act, 6)).astype(np.float32),
        "complementary_info.policy_action": fcal.rad_to_lerobot(_optional(policy, t_act, 6)).astype(np.float32),
        "complementary_info.blend_weight": auth[:, 0].astype(np.float32),
        "intervention": np.nan_to_num(auth[:, 1]) != 0,
        "complementary_info.trigger": np.nan_to_num(auth[:, 2]).astype(np.int64),
    }
    n = grid.n
    cols["frame_index"] = np.arange(n, dtype=np.int64)
    cols["timestamp"] = (np.arange(n) / fps).astype(np.float32)
    ep = bag.episode
    data = EpisodeData(job.task if job.task is not None else (ep.task if ep else ""), n, cols,
                       {k: lf.feature_stats(v) for k, v in cols.items()})
    tmp = Path(job.tmp_dir) / (bag.episode_id or bag.name)
    for cam, im in images.items():
        path = tmp / f"{cam}.mp4"
        h, w, st = _encode_camera(im.data, aligned.indices[f"camera:{cam}"], path, fps, job.codec)
        data.videos[cam] = (str(path), h, w)
        data.stats[f"observation.images.{cam}"] = st
    wall = None
    if ep and ep.clock_start:
        wall = int(ep.clock_start["wall_ns"]) - int(ep.clock_start["mono_ns"]) + int(grid.t0_ns)
    data.extra = {
        "episode_id": bag.episode_id, "operator": ep.operator if ep else "", "outcome": ep.outcome if ep else "unset",
        "attempts": ep.attempts if ep else None, "policy_checkpoint": ep.policy_checkpoint if ep else "",
        "session_kind": ep.session_kind if ep else "", "rig_id": ep.rig_id if ep else "", "recorded_wall_ns": wall,
        "interventions": json.dumps([i.__dict__ for i in ep.interventions] if ep else []),
        "source_bag": bag.name,
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


def schema_root(out: Path, schema: Schema) -> Path:
    """Where episodes of another camera set go: `<DATASET>__<camera><w>x<h>+...` beside it."""
    tag = "+".join(f"{cam}{w}x{h}" for cam, h, w in schema) or "nocamera"
    return out.with_name(f"{out.name}__{tag}")


def _write(root: Path, eps: list[Prepared], fps: int, robot_type: str, repo_id: str | None) -> None:
    """Write one schema group; dataset-level info keys: trigger labels, joint limits, repo_id."""
    info = read_info(root) or {}
    limits: dict[str, list[float]] = dict(info.get("joint_limits") or {})
    for e in eps:
        limits = union_limits(limits, e.joint_limits)
    keys: dict[str, Any] = {"trigger_labels": {str(i + 1): name for i, name in enumerate(TRIGGER_LABELS)},
                            "joint_limits": limits}
    if repo_id:
        keys["repo_id"] = repo_id
    data = [e.data for e in eps if e.data is not None]
    shapes = {cam: (h, w) for cam, (_, h, w) in data[0].videos.items()}
    write_episodes(root, data, fps, robot_type, features_for(shapes), keys)


def _repo_ids(out: Path, repo_id: str | None, roots: list[Path]) -> dict[Path, str | None]:
    """The repo id each dataset root gets; refuses to change one a dataset already has."""
    wanted: dict[Path, str | None] = {}
    for root in roots:
        rid = repo_id if root == out or repo_id is None else f"{repo_id}__{root.name.removeprefix(out.name + '__')}"
        old = (read_info(root) or {}).get("repo_id")
        if rid and old and old != rid:
            raise ValueError(f"{root}: dataset has repo_id {old!r}; refusing to change it to {rid!r}")
        wanted[root] = rid
    return wanted


@dataclass
class ConvertResult:
    episodes_in: int
    converted: dict[str, list[str]]  # dataset root -> episode ids
    duplicates: list[str]
    rejected: dict[str, list[str]]  # code -> bag names
    errors: list[str]


def convert(paths: list[Path], out: Path, fps: int = 30, codec: str = "libsvtav1", task: str | None = None,
            include_failed: bool = False, robot_type: str = "so101_follower", workers: int | None = None,
            executor: str = "local", validate: ValidateConfig | None = None, progress: bool = True,
            repo_id: str | None = None, calibrations: Mapping[str, str | Path] | None = None) -> ConvertResult:
    """`calibrations`: {role: calibration file} for the episodes that recorded none for that role."""
    cfg = validate or ValidateConfig.load()
    cfg.fps = fps
    supplied = load_supplied(calibrations or {})
    siblings = sorted(out.parent.glob(f"{out.name}__*"))
    _repo_ids(out, repo_id, [out, *siblings])  # refuse before any work
    known = set().union(existing_ids(out), *(existing_ids(s) for s in siblings))
    tmp = Path(tempfile.mkdtemp(prefix=".convert-", dir=out.parent if out.parent.exists() else None))
    try:
        jobs = [ConvertJob(str(p), fps, codec, str(tmp), task, include_failed, None, cfg, frozenset(known), supplied)
                for p in paths]
        prepared = parallel_map(prepare_episode, jobs, workers=workers, executor=executor,
                                desc="convert" if progress else None)
        result = ConvertResult(len(paths), {}, [], {}, [])
        seen: set[str] = set()
        groups: dict[Schema, list[Prepared]] = {}
        for p in prepared:
            if p.status == "duplicate" or (p.status == "ok" and p.episode_id in seen):
                result.duplicates.append(p.name)
            elif p.status == "ok" and p.data is not None:
                seen.add(p.episode_id or "")
                groups.setdefault(p.data.schema, []).append(p)
            elif p.status == "rejected":
                for code in sorted({r.code for r in p.reasons}):
                    result.rejected.setdefault(code, []).append(p.name)
            else:
                result.errors.append(f"{p.name}: " + "; ".join(map(str, p.reasons)))
        primary = schema_of(out)
        if primary is None and groups:
            counts = Counter({s: len(g) for s, g in groups.items()})
            primary = max(groups, key=lambda s: counts[s])
        roots = {schema: out if schema == primary else schema_root(out, schema) for schema in groups}
        repo_ids = _repo_ids(out, repo_id, list(roots.values()))
        for schema, eps in groups.items():
            root = roots[schema]
            root.mkdir(parents=True, exist_ok=True)
            _write(root, eps, fps, robot_type, repo_ids[root])
            result.converted[str(root)] = [e.episode_id or "" for e in eps]
        return result
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", metavar="BAG_OR_DIR")
    parser.add_argument("--out", required=True, metavar="DATASET", help="dataset root (created or appended to)")
    parser.add_argument("--fps", type=int, default=30)
    parser.add_argument("--repo-id", default=None,
                        help="stored as info.json repo_id (card, manifest; LeRobot loads by repo_id + root)")
    parser.add_argument("--codec", choices=lf.CODECS, default="libsvtav1")
    parser.add_argument("--task", default=None, help="task text for every episode (default: the recorded task)")
    parser.add_argument("--include-failed", action="store_true", help="also convert episodes that fail validation")
    parser.add_argument("--robot-type", default="so101_follower")
    parser.add_argument("--config", metavar="FILE", help="validator thresholds YAML")
    parser.add_argument("--calibration", action="append", default=[], metavar="ROLE=FILE",
                        help="calibration YAML of the leader or follower arm for the episodes that recorded none "
                             "for that role (repeatable; a recorded calibration is never replaced)")
    add_arguments_to(parser)


def run(args: argparse.Namespace) -> int:
    inputs = load_inputs(args, "convert")
    if inputs is None:
        return 2
    cfg, paths = inputs
    out = Path(args.out)
    try:
        res = convert(paths, out, args.fps, args.codec, args.task, args.include_failed, args.robot_type,
                      args.workers, args.executor, cfg, repo_id=args.repo_id, calibrations=role_files(args.calibration))
    except (ValueError, OSError) as exc:
        print(f"convert: {exc}", file=sys.stderr)
        return 1
    n_conv = sum(len(v) for v in res.converted.values())
    print(f"episodes in: {res.episodes_in}; converted: {n_conv}; already in the dataset: {len(res.duplicates)}; "
          f"rejected: {sum(len(v) for v in res.rejected.values())}; errors: {len(res.errors)}")
    for root, ids in res.converted.items():
        note = "" if Path(root) == out else "  (different camera set: a dataset of its own schema)"
        repo = (read_info(Path(root)) or {}).get("repo_id") or f"local/{Path(root).name}"
        print(f"  {root}: +{len(ids)} episodes{note}; load with "
              f"LeRobotDataset({repo!r}, root={root!r}, video_backend='pyav')")
    for code, names in res.rejected.items():
        print(f"  rejected {code}: {len(names)} ({', '.join(names)})")
    for err in res.errors:
        print(f"  error {err}")
    return 1 if res.errors else 0
