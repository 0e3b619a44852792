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

Features: observation.state (follower, at t_k), action (command sent, in effect over
(t_k, t_k+1]), observation.images.<camera> (at t_k), observation.leader_state (at t_k),
complementary_info.human_action (leader, same rule as action), complementary_info.policy_action
(NaN where no policy command exists), complementary_info.blend_weight (α), intervention
(intervention id ≠ 0), complementary_info.trigger (labels.py code: 0 none, 1.. TRIGGER_LABELS).
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from teleop_flywheel.core.calibration import ArmCalibration, load_calibration, parse_calibration, sim_calibration_file
from teleop_flywheel.core.labels import TRIGGER_LABELS
from teleop_flywheel.core.so101 import JOINT_NAMES
from teleop_flywheel.core.topics import AUTHORITY, FOLLOWER_COMMAND, FOLLOWER_STATE, LEADER_STATE, POLICY_COMMAND
from teleop_flywheel.data.align import AlignError, align, make_grid
from teleop_flywheel.data.lerobot import format as lf
from teleop_flywheel.data.parallel import add_arguments_to, parallel_map
from teleop_flywheel.data.validate import Reason, ValidateConfig, check_bag, load_inputs
from teleop_flywheel.recording.reader import Bag, BagReadError, Stream, open_bag

JOINT_FEATURE_NAMES = [f"{j}.pos" for j in JOINT_NAMES]
VECTOR_FEATURES = ("observation.state", "action", "observation.leader_state", "complementary_info.human_action",
                   "complementary_info.policy_action")
SCALAR_FEATURES = {"complementary_info.blend_weight": "float32", "intervention": "bool",
                   "complementary_info.trigger": "int64"}
EPISODE_COLUMNS = ("episode_id", "operator", "outcome", "attempts", "policy_checkpoint", "session_kind", "rig_id",
                   "recorded_wall_ns", "interventions", "source_bag")


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


@dataclass
class Prepared:
    """One bag, converted to arrays + temporary videos (or why not)."""

    bag: str
    name: str
    episode_id: str | None
    status: str  # "ok" | "rejected" | "duplicate" | "error"
    reasons: list[Reason] = field(default_factory=list)
    task: str = ""
    length: int = 0
    columns: dict[str, np.ndarray] = field(default_factory=dict)
    stats: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    videos: dict[str, tuple[str, int, int]] = field(default_factory=dict)  # camera -> (mp4, h, w)
    episode: dict[str, Any] = field(default_factory=dict)

    @property
    def schema(self) -> tuple[tuple[str, int, int], ...]:
        return tuple(sorted((cam, h, w) for cam, (_, h, w) in self.videos.items()))


def _calibration(bag: Bag, role: str) -> ArmCalibration:
    """The recorded calibration of `role` (leader|follower); the shipped sim file if none was recorded."""
    cal = bag.episode.calibration if bag.episode else {}
    for key, doc in (cal or {}).items():
        if role in key:
            return parse_calibration(doc, f"{bag.mcap_path}: calibration {key}", default_arm_id=key)
    return load_calibration(sim_calibration_file(role))


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
        yuv = None
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
    except Exception as exc:  # undecodable content: report this bag, the batch goes on
        out.status = "error"
        out.reasons.append(Reason("CORRUPT", f"{Path(job.bag).name}: {type(exc).__name__}: {exc}"))
    return out


def _fill(bag: Bag, job: ConvertJob, out: Prepared) -> None:
    fps = job.fps
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
    fcal, lcal = _calibration(bag, "follower"), _calibration(bag, "leader")
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
    out.length = n
    out.columns = cols
    out.stats = {k: lf.feature_stats(v) for k, v in cols.items()}
    tmp = Path(job.tmp_dir) / (bag.episode_id or bag.name)
    for cam, im in images.items():
        path = tmp / f"{cam}.mp4"
        h, w, st = _encode_camera(im.data, aligned.indices[f"camera:{cam}"], path, fps, job.codec)
        out.videos[cam] = (str(path), h, w)
        out.stats[f"observation.images.{cam}"] = st
    ep = bag.episode
    out.task = job.task if job.task is not None else (ep.task if ep else "")
    wall = None
    if ep and ep.clock_start:
        wall = int(ep.clock_start["wall_ns"]) - int(ep.clock_start["mono_ns"]) + int(grid.t0_ns)
    out.episode = {
        "episode_id": bag.episode_id, "operator": ep.operator if ep else "", "outcome": ep.outcome if ep else "unset",
        "attempts": ep.attempts if ep else None, "policy_checkpoint": ep.policy_checkpoint if ep else "",
        "session_kind": ep.session_kind if ep else "", "rig_id": ep.rig_id if ep else "", "recorded_wall_ns": wall,
        "interventions": json.dumps([i.__dict__ for i in ep.interventions] if ep else []),
        "source_bag": bag.name,
    }


# -- writing a dataset ---------------------------------------------------------------------------

def features_for(videos: dict[str, tuple[int, int]]) -> dict[str, Any]:
    feats: dict[str, Any] = {}
    for key in VECTOR_FEATURES:
        feats[key] = lf.vector_feature(JOINT_FEATURE_NAMES)
    for cam, (h, w) in sorted(videos.items()):
        feats[f"observation.images.{cam}"] = lf.video_feature(h, w)
    for key, dtype in SCALAR_FEATURES.items():
        feats[key] = lf.scalar_feature(dtype)
    return feats


def _existing(root: Path) -> tuple[dict[str, Any] | None, pa.Table | None, list[str]]:
    info_path = root / lf.INFO_PATH
    if not info_path.exists():
        return None, None, []
    info = json.loads(info_path.read_text())
    ep_path = root / lf.EPISODES_PATH.format(chunk_index=0, file_index=0)
    episodes = pq.read_table(ep_path) if ep_path.exists() else None
    tasks: list[str] = []
    if (root / lf.TASKS_PATH).exists():
        df = pd.read_parquet(root / lf.TASKS_PATH)
        tasks = [str(t) for t in df.sort_values("task_index").index]
    return info, episodes, tasks


def existing_ids(root: Path) -> set[str]:
    _, episodes, _ = _existing(root)
    if episodes is None or "episode_id" not in episodes.column_names:
        return set()
    return {x for x in episodes.column("episode_id").to_pylist() if x}


def _count_files(root: Path, pattern: str) -> int:
    return len(list(root.glob(pattern)))


def write_episodes(root: Path, eps: list[Prepared], fps: int, robot_type: str) -> list[int]:
    """Append prepared episodes (one schema) to the dataset at root; returns their episode indices."""
    info, old_eps, tasks = _existing(root)
    shapes = {cam: (h, w) for cam, (_, h, w) in eps[0].videos.items()}
    feats = features_for(shapes)
    if info is None:
        info = lf.new_info(fps, robot_type, feats)
    elif info["fps"] != fps:
        raise ValueError(f"{root}: dataset is at {info['fps']} fps, not {fps}")
    ep0, frame0 = int(info["total_episodes"]), int(info["total_frames"])
    task_index = {t: i for i, t in enumerate(tasks)}
    for e in eps:
        task_index.setdefault(e.task, len(task_index))
    chunks = int(info["chunks_size"])
    data_file = _count_files(root, "data/chunk-*/file-*.parquet")
    rows: list[dict[str, Any]] = []
    tables = []
    cursor = frame0
    data_ci, data_fi = lf.chunk_file(data_file, chunks)
    for k, e in enumerate(eps):
        n = e.length
        c = dict(e.columns)
        c["episode_index"] = np.full(n, ep0 + k, np.int64)
        c["index"] = np.arange(cursor, cursor + n, dtype=np.int64)
        c["task_index"] = np.full(n, task_index[e.task], np.int64)
        for key in ("episode_index", "index", "task_index"):
            e.stats[key] = lf.feature_stats(c[key])
        order = [f for f in info["features"] if info["features"][f]["dtype"] != "video"]
        tables.append(pa.table({f: lf.arrow_column(c[f], info["features"][f]["dtype"]) for f in order}))
        row: dict[str, Any] = {"episode_index": ep0 + k, "tasks": [e.task], "length": n,
                               "data/chunk_index": data_ci, "data/file_index": data_fi,
                               "dataset_from_index": cursor, "dataset_to_index": cursor + n}
        rows.append(row)
        cursor += n
    data_path = root / lf.DATA_PATH.format(chunk_index=data_ci, file_index=data_fi)
    data_path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.concat_tables(tables), data_path)
    limit = int(info["video_files_size_in_mb"]) * 1024 * 1024
    for cam in sorted(shapes):
        key = f"observation.images.{cam}"
        file_no = _count_files(root, f"videos/{key}/chunk-*/file-*.mp4")
        group: list[int] = []
        size = 0
        groups: list[list[int]] = []
        for k, e in enumerate(eps):
            part = Path(e.videos[cam][0]).stat().st_size
            if group and size + part > limit:
                groups.append(group)
                group, size = [], 0
            group.append(k)
            size += part
        groups.append(group)
        for g in groups:
            ci, fi = lf.chunk_file(file_no, chunks)
            path = root / lf.VIDEO_PATH.format(video_key=key, chunk_index=ci, file_index=fi)
            lf.concat_videos([Path(eps[k].videos[cam][0]) for k in g], path)
            t = 0.0
            for k in g:
                rows[k][f"videos/{key}/chunk_index"] = ci
                rows[k][f"videos/{key}/file_index"] = fi
                rows[k][f"videos/{key}/from_timestamp"] = t
                t += eps[k].length / fps
                rows[k][f"videos/{key}/to_timestamp"] = t
            file_no += 1
            if "info" not in info["features"][key]:
                info["features"][key]["info"] = lf.video_info(path)
    for k, e in enumerate(eps):
        rows[k]["meta/episodes/chunk_index"] = 0
        rows[k]["meta/episodes/file_index"] = 0
        for feat, st in e.stats.items():
            for s in lf.STAT_NAMES:
                rows[k][f"stats/{feat}/{s}"] = np.asarray(st[s]).tolist()
        rows[k].update(e.episode)
    new = pa.Table.from_pylist(rows)
    table = new if old_eps is None else pa.concat_tables([old_eps, new], promote_options="permissive")
    ep_path = root / lf.EPISODES_PATH.format(chunk_index=0, file_index=0)
    ep_path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, ep_path)
    ordered = sorted(task_index, key=task_index.get)
    pd.DataFrame({"task_index": [task_index[t] for t in ordered]},
                 index=pd.Index(ordered, name="task")).to_parquet(root / lf.TASKS_PATH)
    keys = [f for f in info["features"]]
    all_stats = [lf.stats_from_episode_row(r, keys) for r in table.to_pylist()]
    lf.write_json(root / lf.STATS_PATH, lf.stats_to_json(lf.aggregate_stats(all_stats)))
    total = ep0 + len(eps)
    info.update(total_episodes=total, total_frames=cursor, total_tasks=len(task_index), splits={"train": f"0:{total}"})
    info["trigger_labels"] = {str(i + 1): name for i, name in enumerate(TRIGGER_LABELS)}
    fcal = load_calibration(sim_calibration_file("follower"))
    info.setdefault("joint_limits", {f"{j.name}.pos": sorted(float(x) for x in j.rad_to_lerobot(np.array(j.rad_range())))
                                     for j in fcal.joints})
    lf.write_json(root / lf.INFO_PATH, info)
    return list(range(ep0, total))


def schema_root(out: Path, schema: tuple[tuple[str, int, int], ...]) -> Path:
    tag = "+".join(f"{cam}{w}x{h}" for cam, h, w in schema) or "nocamera"
    return out.with_name(f"{out.name}__{tag}")


def _schema_of(root: Path) -> tuple[tuple[str, int, int], ...] | None:
    info, _, _ = _existing(root)
    if info is None:
        return None
    pre = "observation.images."
    return tuple(sorted((k[len(pre):], f["shape"][0], f["shape"][1]) for k, f in info["features"].items()
                        if k.startswith(pre)))


@dataclass
class ConvertResult:
    episodes_in: int
    converted: dict[str, list[str]]  # dataset root -> episode ids
    duplicates: list[str]
    rejected: dict[str, list[str]]  # code -> bag names
    errors: list[str]


def convert(paths: list[Path], out: Path, fps: int = 30, codec: str = "libsvtav1", task: str | None = None,
            include_failed: bool = False, robot_type: str = "so101_follower", workers: int | None = None,
            executor: str = "local", validate: ValidateConfig | None = None, progress: bool = True) -> ConvertResult:
    cfg = validate or ValidateConfig.load()
    cfg.fps = fps
    known = existing_ids(out)
    for sibling in out.parent.glob(f"{out.name}__*"):
        known |= existing_ids(sibling)
    tmp = Path(tempfile.mkdtemp(prefix=".convert-", dir=out.parent if out.parent.exists() else None))
    try:
        jobs = [ConvertJob(str(p), fps, codec, str(tmp), task, include_failed, None, cfg, frozenset(known))
                for p in paths]
        prepared = parallel_map(prepare_episode, jobs, workers=workers, executor=executor,
                                desc="convert" if progress else None)
        result = ConvertResult(len(paths), {}, [], {}, [])
        seen: set[str] = set()
        ok: list[Prepared] = []
        for p in prepared:
            if p.status == "duplicate" or (p.status == "ok" and p.episode_id in seen):
                result.duplicates.append(p.name)
            elif p.status == "ok":
                seen.add(p.episode_id or "")
                ok.append(p)
            elif p.status == "rejected":
                for code in sorted({r.code for r in p.reasons}):
                    result.rejected.setdefault(code, []).append(p.name)
            else:
                result.errors.append(f"{p.name}: " + "; ".join(map(str, p.reasons)))
        groups: dict[tuple[tuple[str, int, int], ...], list[Prepared]] = {}
        for p in ok:
            groups.setdefault(p.schema, []).append(p)
        primary = _schema_of(out)
        if primary is None and groups:
            counts = Counter({s: len(g) for s, g in groups.items()})
            primary = max(groups, key=lambda s: counts[s])
        for schema, eps in groups.items():
            root = out if schema == primary else schema_root(out, schema)
            root.mkdir(parents=True, exist_ok=True)
            write_episodes(root, eps, fps, robot_type)
            result.converted[str(root)] = [e.episode_id or "" for e in eps]
        return result
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", metavar="BAG_OR_DIR")
    parser.add_argument("--out", required=True, metavar="DATASET", help="dataset root (created or appended to)")
    parser.add_argument("--fps", type=int, default=30)
    parser.add_argument("--repo-id", default=None, help="recorded in info.json (LeRobot loads by repo_id + root)")
    parser.add_argument("--codec", choices=lf.CODECS, default="libsvtav1")
    parser.add_argument("--task", default=None, help="task text for every episode (default: the recorded task)")
    parser.add_argument("--include-failed", action="store_true", help="also convert episodes that fail validation")
    parser.add_argument("--robot-type", default="so101_follower")
    parser.add_argument("--config", metavar="FILE", help="validator thresholds YAML")
    add_arguments_to(parser)


def run(args: argparse.Namespace) -> int:
    inputs = load_inputs(args, "convert")
    if inputs is None:
        return 2
    cfg, paths = inputs
    out = Path(args.out)
    try:
        res = convert(paths, out, args.fps, args.codec, args.task, args.include_failed, args.robot_type,
                      args.workers, args.executor, cfg)
    except (ValueError, OSError) as exc:
        print(f"convert: {exc}", file=sys.stderr)
        return 1
    n_conv = sum(len(v) for v in res.converted.values())
    print(f"episodes in: {res.episodes_in}; converted: {n_conv}; already in the dataset: {len(res.duplicates)}; "
          f"rejected: {sum(len(v) for v in res.rejected.values())}; errors: {len(res.errors)}")
    for root, ids in res.converted.items():
        note = "" if Path(root) == out else "  (different camera set: a dataset of its own schema)"
        print(f"  {root}: +{len(ids)} episodes{note}; load with "
              f"LeRobotDataset({(args.repo_id or 'local/' + Path(root).name)!r}, root={root!r}, video_backend='pyav')")
    for code, names in res.rejected.items():
        print(f"  rejected {code}: {len(names)} ({', '.join(names)})")
    for err in res.errors:
        print(f"  error {err}")
    return 0
