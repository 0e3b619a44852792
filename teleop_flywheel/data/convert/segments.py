"""A camera's episode video made from JPEGs, in one encode or from segments encoded ahead of time.

Encoding is most of a convert (SVT-AV1 at 640x480 runs near 100 frames/s on 2 cores), so `ingest`
encodes while the episode is still being recorded (`data/convert/preencode.py`) and the convert uses that
work. A **segment** is SEGMENT_FRAMES consecutive frames of one camera's episode video (frames
[s·L, (s+1)·L) of the grid, the last one shorter) encoded as a closed mp4 of its own; with the
dataset's g=2 every segment starts on a key frame, so segments are remuxed back to back
(`format.concat_videos`, as episodes are) instead of being encoded again.

The convert uses a segment only if its record lists the BLAKE2 digest of exactly the JPEG each of
its frames holds, and the fps, codec and size of the video being made. A guess the pre-encoder got
wrong — the grid moved (a camera started late, `--trim-dead-air` cut the start), a frame was
delivered out of order, the bag changed — is a miss, and those frames are encoded here: a stale or
foreign segment can cost time, never a wrong frame.

Layout, per bag: `<folder>/<camera>/<s>.mp4` and `<s>.json`, each written to a fresh temporary
name in that folder and renamed into place, the json last (a json always names a whole mp4).
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import cv2
import numpy as np

from teleop_flywheel.core.files import replace_atomic
from teleop_flywheel.data.lerobot import v3_layout
from teleop_flywheel.data.lerobot.encoder_process import ENCODE_STALL_S

SEGMENT_FRAMES = 60  # 2 s at 30 fps: what is left to encode when an episode stops, at most
FORMAT = "teleop_flywheel.segment/1"


@dataclass(frozen=True)
class VideoKey:
    """What besides the frames decides a video's bytes: a segment made for another is not used."""

    fps: int
    codec: str
    width: int
    height: int


@dataclass
class CameraVideo:
    height: int
    width: int
    stats: dict[str, np.ndarray]
    reused: int = 0  # frames taken from pre-encoded segments


def frame_digest(jpeg: bytes) -> str:
    return hashlib.blake2b(jpeg, digest_size=16).hexdigest()


def decode_bgr(jpeg: bytes, what: str, size: tuple[int, int] | None = None) -> np.ndarray:
    """A BGR image from JPEG bytes (of `size` (h, w) when given); ValueError naming `what` otherwise."""
    bgr = cv2.imdecode(np.frombuffer(jpeg, np.uint8), cv2.IMREAD_COLOR) if jpeg else None
    if bgr is None:
        raise ValueError(f"{what} is not a decodable JPEG")
    if size is not None and bgr.shape[:2] != size:
        raise ValueError(f"{what} is not a {size[1]}x{size[0]} JPEG")
    return bgr


def _stat_image(bgr: np.ndarray) -> np.ndarray:
    return v3_layout.downsample(bgr)[..., ::-1]


def encode_frames(images: list[bytes], indices: np.ndarray, path: Path, key: VideoKey, what: str,
                  sample: frozenset[int] = frozenset(), stall_s: float = ENCODE_STALL_S) -> dict[int, np.ndarray]:
    """Encode frame k = the JPEG `images[indices[k]]` into the mp4 `path`, decoding each distinct
    image once in a thread beside the encoder; {k: downsampled RGB} of the frames in `sample`
    (LeRobot's image stats). `stall_s`: the encoder's watchdog (`lerobot/encoder_process.py`)."""
    size = (key.height, key.width)
    kept: dict[int, np.ndarray] = {}
    distinct = np.concatenate(([True], indices[1:] != indices[:-1]))
    with ThreadPoolExecutor(max_workers=2) as pool, \
            v3_layout.VideoEncoder(path, key.width, key.height, key.fps, key.codec, stall_s=stall_s) as enc:
        decoded = pool.map(lambda i: decode_bgr(images[i], f"{what}: image {i}", size),
                           (int(i) for i in indices[distinct]))
        yuv: np.ndarray = np.empty(0, np.uint8)  # set at k = 0: distinct[0] is True
        bgr = np.empty(0, np.uint8)
        for k in range(len(indices)):
            if distinct[k]:
                bgr = next(decoded)
                yuv = cv2.cvtColor(bgr, cv2.COLOR_BGR2YUV_I420)
            enc.add_i420(yuv)
            if k in sample:
                kept[k] = _stat_image(bgr)
    return kept


def _record_path(folder: Path, index: int) -> Path:
    return folder / f"{index:06d}.json"


def write_segment(folder: Path, index: int, key: VideoKey, images: list[bytes], indices: np.ndarray,
                  digests: list[str], stall_s: float = ENCODE_STALL_S) -> Path:
    """Encode segment `index` (frame k = `images[indices[k]]`, whose `frame_digest`s are `digests`)
    into `folder` and record what it holds."""
    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".segment-", suffix=".mp4", dir=folder)
    os.close(fd)
    try:
        encode_frames(images, indices, Path(tmp), key, f"{folder.name} segment {index}", stall_s=stall_s)
        mp4 = folder / f"{index:06d}.mp4"
        os.replace(tmp, mp4)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    doc = {"format": FORMAT, **asdict(key), "frames": digests}
    replace_atomic(_record_path(folder, index), json.dumps(doc))
    return mp4


def cached_segment(folder: Path, index: int, key: VideoKey, digests: list[str]) -> Path | None:
    """The mp4 of segment `index` if its record says it holds exactly `digests` for `key`, else None."""
    try:
        doc = json.loads(_record_path(folder, index).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or doc.get("frames") != digests:
        return None
    if any(doc.get(name) != value for name, value in asdict(key).items()):
        return None
    mp4 = folder / f"{index:06d}.mp4"
    return mp4 if mp4.is_file() else None


def _plan(images: list[bytes], indices: np.ndarray, folder: Path | None, key: VideoKey
          ) -> Iterator[tuple[int, int, Path | None]]:
    """(first frame, end, pre-encoded mp4 or None) covering the frames in order; misses merged."""
    n = len(indices)
    if folder is None:
        yield 0, n, None
        return
    digests: dict[int, str] = {}
    start = 0  # of the run of misses not yet given out
    for a in range(0, n, SEGMENT_FRAMES):
        b = min(n, a + SEGMENT_FRAMES)
        wanted = [digests.setdefault(int(i), frame_digest(images[int(i)])) for i in indices[a:b]]
        hit = cached_segment(folder, a // SEGMENT_FRAMES, key, wanted)
        if hit is not None:
            if start < a:
                yield start, a, None
            yield a, b, hit
            start = b
    if start < n:
        yield start, n, None


def encode_camera(images: list[bytes], indices: np.ndarray, path: Path, fps: int, codec: str,
                  segments: Path | None = None, stall_s: float = ENCODE_STALL_S) -> CameraVideo:
    """The episode video of one camera (frame k = `images[indices[k]]`) at `path`, with the image
    stats of LeRobot's sampled frames; pre-encoded segments in `segments` used where they match;
    `stall_s`: the encoder's watchdog."""
    what = path.stem
    first = decode_bgr(images[int(indices[0])], f"{what}: image {int(indices[0])}")
    key = VideoKey(fps, codec, first.shape[1], first.shape[0])
    size = first.shape[:2]
    sampled = frozenset(v3_layout.sample_indices(len(indices)).tolist())
    stat_images: dict[int, np.ndarray] = {}
    parts: list[Path] = []
    made: list[Path] = []
    reused = 0
    for a, b, hit in _plan(images, indices, segments, key):
        sample = frozenset(k - a for k in sampled if a <= k < b)
        if hit is not None:
            parts.append(hit)
            reused += b - a
            for k in sample:
                i = int(indices[a + k])
                stat_images[a + k] = _stat_image(decode_bgr(images[i], f"{what}: image {i}", size))
            continue
        part = path if (a, b) == (0, len(indices)) else path.with_name(f"{path.stem}.{a:06d}{path.suffix}")
        stat_images.update(
            {a + k: im for k, im in encode_frames(images, indices[a:b], part, key, what, sample, stall_s).items()}
        )
        parts.append(part)
        made.append(part)
    if parts != [path]:
        v3_layout.concat_videos(parts, path)
        for part in made:
            part.unlink()
    stats = v3_layout.image_stats([stat_images[k] for k in sorted(stat_images)])
    return CameraVideo(size[0], size[1], stats, reused)
