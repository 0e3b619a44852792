"""What an append must agree on with the dataset it goes into, checked before anything is encoded.

A dataset has one fps, one video codec, one layout of ours and one feature set: LeRobot reads
info.json's `fps` and each video feature's `info` block as true for every episode, so an append
that differs would make info.json lie (an h264 append into an AV1 dataset did: accepted, and
`video.codec` still said av1).

- fps, codec and layout: the whole run is refused before any work (`AppendRefused`, exit 2), naming
  the dataset's value and the fix (another `--dataset`, or the dataset's value). A dataset of an
  older layout (`data/lerobot/flywheel_schema.py`: `observation.leader_state`) is never appended
  to in either layout (one dataset, two layouts): `teleop-flywheel migrate` upgrades it.
- feature set, per episode, before its encode (`data.errors.FeatureSetError`, status `refused`):
  an optional feature (`frames.OPTIONAL_FEATURES`: `observation.effort`, `complementary_info.feedback`)
  present in the episode and absent in the dataset, or the reverse (bags recorded before efforts, or
  the leader's rendered feedback, were); teleop-mode corrections into a dataset converted before
  `complementary_info.correction` existed (without corrections such an episode is written as the
  dataset's features say). A different camera set never goes into the dataset: it goes to a
  dataset of its own schema beside it (`convert.schema_root`), as before.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from teleop_flywheel.data.convert.frames import CORRECTION, OPTIONAL_FEATURES
from teleop_flywheel.data.errors import AppendRefused
from teleop_flywheel.data.lerobot.append import IMAGES, read_info
from teleop_flywheel.data.lerobot.flywheel_schema import SCHEMA_KEY, SCHEMA_VERSION, changes_since, schema_version

CODEC_NAMES = {"libsvtav1": "av1", "h264": "h264"}  # --codec -> the codec name video_info reads from the file


def dataset_codec(info: dict[str, Any]) -> str | None:
    """The codec of the dataset's videos (info.json, read from the files when they were written)."""
    for key, feat in sorted(info.get("features", {}).items()):
        if key.startswith(IMAGES) and isinstance(feat.get("info"), dict):
            codec = feat["info"].get("video.codec")
            if codec:
                return str(codec)
    return None


def check_append(roots: list[Path], fps: int, codec: str) -> None:
    """Refuse a run whose fps, codec or layout differs from a dataset it could append to."""
    for root in roots:
        info = read_info(root)
        if info is None:
            continue
        check_layout(root, info)
        if int(info.get("fps", fps)) != int(fps):
            raise AppendRefused(f"dataset is at {info['fps']} fps, this run at {fps}: a dataset has one fps",
                                where=str(root), fix=f"use --fps {info['fps']}, or convert into another --dataset")
        have, want = dataset_codec(info), CODEC_NAMES.get(codec, codec)
        if have is not None and have != want:
            flag = next((k for k, v in CODEC_NAMES.items() if v == have), have)
            raise AppendRefused(f"dataset videos are {have}, this run would encode {want}: info.json would lie",
                                where=str(root), fix=f"use --codec {flag}, or convert into another --dataset")


def feature_expectations(root: Path) -> tuple[frozenset[str] | None, bool]:
    """(the OPTIONAL_FEATURES the dataset has — None for a new dataset, it has complementary_info.correction)."""
    info = read_info(root)
    if info is None:
        return None, True
    features = info.get("features", {})
    return frozenset(OPTIONAL_FEATURES).intersection(features), CORRECTION in features


def check_layout(root: Path, info: dict[str, Any]) -> None:
    """Refuse to append to a dataset of another layout of ours: its episodes and ours would differ."""
    version = schema_version(info)
    if version is None or version == SCHEMA_VERSION:
        return
    if version > SCHEMA_VERSION:
        raise AppendRefused(f"dataset is in layout {version} ({SCHEMA_KEY}), newer than this converter's "
                            f"{SCHEMA_VERSION}", where=str(root),
                            fix="upgrade teleop_flywheel, or convert into another --dataset")
    raise AppendRefused(f"dataset is in layout {version} ({SCHEMA_KEY}), this converter writes {SCHEMA_VERSION} "
                        f"({'; '.join(changes_since(version))}): one dataset never mixes them", where=str(root),
                        fix=f"run `teleop-flywheel migrate {root}` and convert into its copy, or convert into "
                            "another --dataset")
