"""`teleop-flywheel info BAG [--json]`: what `ros2 bag info` prints, plus our episode metadata.

Reads `metadata.yaml` (as `ros2 bag info` does), checks it against the MCAP summary (a bag whose
two disagree, or whose MCAP has no summary, is reported, not hidden), and adds the episode
metadata record and the per-topic drop counts the recorder measured from publication
sequence numbers, and each camera's lag behind the follower's joints found in its images
(`data/validate/camera_lag.py`): the verdict's estimate when the bag has a verdict.json, else
estimated here (reading the images: a few seconds for a minute of video; `--no-lag` skips it).
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from teleop_flywheel.core.bag_topics import FOLLOWER_STATE
from teleop_flywheel.core.episode import METADATA_RECORD, EpisodeMeta
from teleop_flywheel.core.errors import UnsafeNameError
from teleop_flywheel.data.validate.camera_lag import MotionEnergy, estimate_lag, small_grey
from teleop_flywheel.recording.mcap.exceptions import BagReadError, UnindexedBagError
from teleop_flywheel.recording.mcap.metadata import find_mcap, read_metadata_yaml
from teleop_flywheel.recording.mcap.reader import IndexedBag, open_bag
from teleop_flywheel.recording.recorder.verdict import read_verdict


@dataclass
class TopicInfo:
    name: str
    type: str
    count: int
    serialization_format: str
    drops: int | None


@dataclass
class BagInfo:
    path: str
    files: list[str]
    size_bytes: int
    storage_identifier: str
    ros_distro: str
    duration_ns: int
    start_ns: int
    end_ns: int
    message_count: int
    topics: list[TopicInfo]
    episode: dict[str, Any] | None
    warnings: list[str] = field(default_factory=list)
    camera_lag: dict[str, dict[str, Any]] = field(default_factory=dict)  # camera -> LagEstimate as a dict
    camera_lag_source: str = ""


def _mcap_check(path: Path, info: BagInfo) -> dict[str, str] | None:
    """Compare with the MCAP summary; return the episode metadata record if present."""
    try:
        indexed = IndexedBag(path)
        if indexed.message_count != info.message_count:
            info.warnings.append(f"metadata.yaml says {info.message_count} messages, {path.name} holds "
                                 f"{indexed.message_count}")
        if not indexed.chunk_indexed:
            info.warnings.append(f"{path.name}: not chunk-indexed (Foxglove cannot seek in it)")
        return indexed.metadata().get(METADATA_RECORD)
    except UnindexedBagError:
        info.warnings.append(f"{path.name}: no MCAP summary (crashed recording? run `teleop-flywheel recover`)")
    except (BagReadError, OSError, ValueError) as exc:
        info.warnings.append(f"{path.name}: unreadable MCAP ({exc})")
    return None


def bag_info(bag: Path) -> BagInfo:
    bag_dir, mcap_path = find_mcap(Path(bag))
    meta = read_metadata_yaml(bag_dir)
    files = [str(p) for p in meta.get("relative_file_paths", [])]
    size = sum((bag_dir / p).stat().st_size for p in files if (bag_dir / p).exists())
    start = int(meta["starting_time"]["nanoseconds_since_epoch"])
    duration = int(meta["duration"]["nanoseconds"])
    custom = meta.get("custom_data") or {}
    info = BagInfo(
        path=str(bag_dir), files=files, size_bytes=size, storage_identifier=str(meta["storage_identifier"]),
        ros_distro=str(meta.get("ros_distro", "")), duration_ns=duration, start_ns=start, end_ns=start + duration,
        message_count=int(meta["message_count"]), topics=[], episode=None)
    record = _mcap_check(mcap_path, info)
    strings = record or ({k: str(v) for k, v in custom.items()} if custom else None)
    try:
        episode = EpisodeMeta.from_strings(strings) if strings and "episode_name" in strings else None
    except UnsafeNameError as exc:  # shown as what it is, never used
        episode = None
        info.warnings.append(f"episode metadata refused: {exc} (validate rejects the bag: UNSAFE_NAME)")
    if record and custom and dict(record) != {k: str(v) for k, v in custom.items()}:
        info.warnings.append("episode metadata differs between the MCAP record and metadata.yaml custom_data")
    drops = episode.drops if episode else {}
    for t in meta.get("topics_with_message_count", []):
        tm = t["topic_metadata"]
        info.topics.append(TopicInfo(tm["name"], tm["type"], int(t["message_count"]), tm["serialization_format"],
                                     drops.get(tm["name"]) if episode else None))
    if episode is not None:
        info.episode = asdict(episode)
        if episode.outcome == "unset":
            info.warnings.append("outcome is unset (nobody labelled this episode)")
        if episode.unlabelled_interventions:
            info.warnings.append(f"{len(episode.unlabelled_interventions)} intervention(s) without a trigger label")
    return info


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} GiB"


def _stamp(ns: int) -> str:
    sec, nsec = divmod(ns, 1_000_000_000)
    return f"{time.strftime('%b %e %Y %H:%M:%S', time.localtime(sec))}.{nsec:09d} ({sec}.{nsec:09d})"


def format_info(info: BagInfo) -> str:
    label = 19
    lines = [
        f"{'Files:':<{label}}" + ("\n" + " " * label).join(info.files),
        f"{'Bag size:':<{label}}{_size(info.size_bytes)}",
        f"{'Storage id:':<{label}}{info.storage_identifier}",
        f"{'ROS Distro:':<{label}}{info.ros_distro}",
        f"{'Duration:':<{label}}{info.duration_ns / 1e9:.9f}s",
        f"{'Start:':<{label}}{_stamp(info.start_ns)}",
        f"{'End:':<{label}}{_stamp(info.end_ns)}",
        f"{'Messages:':<{label}}{info.message_count}",
    ]
    topic_lines = [
        f"Topic: {t.name} | Type: {t.type} | Count: {t.count} | Serialization Format: {t.serialization_format}"
        + (f" | Drops: {t.drops}" if t.drops is not None else "")
        for t in info.topics
    ]
    lines.append(f"{'Topic information:':<{label}}" + ("\n" + " " * label).join(topic_lines))
    lines += [f"{'Service:':<{label}}0", f"{'Service information:':<{label}}"]
    if info.episode:
        e = info.episode
        lines.append("Episode:")
        keys = ("episode_name", "task", "operator", "rig_id", "robot_type", "session_kind", "outcome",
                "attempts", "failure_label", "policy_checkpoint", "cameras", "ptp_offset_ns", "software_version")
        w = max(len(k) for k in keys) + 2
        for key in keys:
            lines.append(f"  {key + ':':<{w}}{e.get(key)}")
        lines.append(f"  {'interventions:':<{w}}" + (", ".join(
            f"#{i['id']} {i.get('trigger') or 'UNLABELLED'}" for i in e["interventions"]) or "none"))
        lines.append(f"  {'drops:':<{w}}" + (", ".join(f"{k}={v}" for k, v in e["drops"].items()) or "none"))
        if e.get("clock_start") and e.get("clock_end"):
            drift = (e["clock_end"]["wall_ns"] - e["clock_end"]["mono_ns"]) - (
                e["clock_start"]["wall_ns"] - e["clock_start"]["mono_ns"])
            lines.append(f"  {'clock drift:':<{w}}{drift / 1e6:.3f} ms (wall vs monotonic over the episode)")
    for cam, est in sorted(info.camera_lag.items()):
        value = "unknown" if est.get("lag_ms") is None else f"{est['lag_ms']:+.1f} ± {est.get('stderr_ms') or 0:.1f} ms"
        note = f" ({est['note']})" if est.get("note") else ""
        lines.append(f"Camera lag {cam}: {value} behind the joints, from the images ({info.camera_lag_source}){note}")
    lines += [f"WARNING: {warning}" for warning in info.warnings]
    return "\n".join(lines)


def camera_lags(bag: Path) -> tuple[dict[str, dict[str, Any]], str]:
    """Each camera's lag behind the follower's joints: the verdict's, else estimated from the images."""
    bag_dir, _ = find_mcap(Path(bag))
    try:
        doc = read_verdict(bag_dir)
    except ValueError:
        doc = None
    if doc and isinstance(doc.get("camera_lag"), dict) and doc["camera_lag"]:
        return dict(doc["camera_lag"]), "verdict.json"
    opened = open_bag(bag_dir)
    if not opened.has(FOLLOWER_STATE):
        return {}, "no follower joint states"
    js = opened.joint_state(FOLLOWER_STATE)
    order = np.argsort(js.stamps_ns, kind="stable")
    out: dict[str, dict[str, Any]] = {}
    for cam, topic in sorted(opened.camera_topics().items()):
        im = opened.images(topic)
        motion = MotionEnergy()
        for i in np.argsort(im.stamps_ns, kind="stable"):
            small = small_grey(im.data[i])
            if small is not None:
                motion.add(small)
        stamps = np.sort(im.stamps_ns, kind="stable")
        energy = motion.energy()
        if len(energy) + 1 != len(stamps):
            out[cam] = {"lag_ms": None, "stderr_ms": None, "note": "images that do not decode"}
            continue
        out[cam] = estimate_lag(stamps, energy, js.stamps_ns[order], js.position[order]).to_dict()
    return out, "estimated from the bag"

