"""Ingest's head start: each camera's episode video is encoded while the episode is recorded.

Encoding is most of a convert, and without a head start it all happens after the operator keeps
the episode. `ingest` therefore follows every bag in its watch folder that is not ready to be taken
— still recording (no metadata.yaml), or closed and waiting for its verdict, the keep or the grace
period — with a `BagPreEncoder`: it reads the growing MCAP (`recording.scan.FollowMcap`: complete
records only, every byte once) and encodes each camera's frames in segments (`data/convert/segments.py`)
as soon as they are decided. The rule is the convert's (`data/convert/align.py`): grid t_k = t0 +
round(k·1e9/fps) with t0 the latest first header stamp of the follower's state, its command and
every camera; frame k = the camera's latest image stamped ≤ t_k, decided once an image stamped
after t_{k} has arrived. When the bag is closed the grid's end (the earliest last stamp) is known
and the last, shorter segment is encoded too, so a kept episode converts without encoding a frame.

A guess, checked where it is used: the convert takes a segment only if it holds exactly the frames
it would encode. A pre-encoder stops, and says why, once its guess cannot be right any more: a grid
stream whose first message arrives after segments were made, images delivered out of stamp order,
a damaged file. Rejected episodes cost the work done ahead; that is the price of the head start,
paid at ingest's low priority.
"""
from __future__ import annotations

import contextlib
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote, unquote

import numpy as np
from mcap.records import Message

from teleop_flywheel.core.bag_topics import FOLLOWER_COMMAND, FOLLOWER_STATE
from teleop_flywheel.core.episode import EpisodeMeta
from teleop_flywheel.core.files import inside
from teleop_flywheel.core.topics import strip_namespace
from teleop_flywheel.data.convert.align import Grid, make_grid
from teleop_flywheel.data.convert.segments import (
    SEGMENT_FRAMES,
    VideoKey,
    cached_segment,
    decode_bgr,
    frame_digest,
    write_segment,
)
from teleop_flywheel.data.errors import EncoderStalled
from teleop_flywheel.data.lerobot.encoder_process import ENCODE_STALL_S
from teleop_flywheel.data.validate.validator import display
from teleop_flywheel.recording.mcap.cdr import decode_compressed_images, header_stamp_ns
from teleop_flywheel.recording.mcap.exceptions import CdrError
from teleop_flywheel.recording.mcap.reader import (
    COMPRESSED_IMAGE,
    FollowMcap,
    Stream,
    image_stream_name,
    name_problem,
)
from teleop_flywheel.recording.mcap.writer import START_RECORD

GRID_TOPICS = (FOLLOWER_STATE, FOLLOWER_COMMAND)  # with every camera: the streams the grid spans
# Images read but not yet encoded, per bag: a pre-encoder this far behind the recording (a busy machine
# gives ingest little CPU) stops rather than hold more; its convert encodes the rest.
MAX_HELD_BYTES = 256 * 1024 * 1024


@dataclass
class _Camera:
    """One camera's images from the next segment's first held image on (older ones are dropped)."""

    topic: str
    stamps: list[int] = field(default_factory=list)  # every image's header stamp, in arrival order
    jpegs: list[bytes] = field(default_factory=list)  # images[base:]
    base: int = 0
    segment: int = 0  # the next segment to make
    key: VideoKey | None = None


class BagPreEncoder:
    """The segments of one bag, made as the recorder writes it."""

    def __init__(self, bag: Path, folder: Path, fps: int, codec: str, stall_s: float = ENCODE_STALL_S) -> None:
        self.bag, self.folder, self.fps, self.codec, self.stall_s = bag, folder, fps, codec, stall_s
        self.stopped: str | None = None  # why it gave up
        self.told = False  # the log has said why
        self.done = False  # every segment of the closed bag is made
        self.frames = 0  # frames encoded (or found made by an earlier run)
        self._follow: FollowMcap | None = None
        self._first: dict[str, int] = {}
        self._last: dict[str, int] = {}
        self._cameras: dict[str, _Camera] = {}
        self._t0: int | None = None
        self._namespace: str | None = None  # known at the first message
        self._held = 0  # bytes of the images in the cameras' `jpegs`

    def step(self, limit: int | None = None) -> int:
        """Read what the recorder added and make the segments now decided (at most `limit`);
        frames encoded."""
        if self.stopped or self.done:
            return 0
        if self._follow is None:
            mcaps = sorted(self.bag.glob("*.mcap"))
            if len(mcaps) != 1:
                return 0  # not created yet (or not a bag the recorder writes: one file per episode)
            self._follow = FollowMcap(mcaps[0], self._message)
        self._follow.poll()
        if self._follow.result.malformed:
            self.stopped = f"damaged: {self._follow.result.malformed}"
        made = 0 if self.stopped else self._make(limit)
        if self.stopped or self.done:
            self._cameras.clear()  # nothing more to encode: the images it held are let go
            self._held = 0
        return made

    def _message(self, m: Message) -> None:
        assert self._follow is not None
        result = self._follow.result
        channel = result.channels.get(m.channel_id)
        if channel is None or self.stopped:
            return
        topic = self._topic(channel.topic)
        schema = result.schemas.get(channel.schema_id)
        try:
            if schema is not None and schema.name == COMPRESSED_IMAGE:
                unsafe = name_problem(channel.topic, schema.name)
                if unsafe is not None:  # convert rejects the bag (UNSAFE_NAME): nothing is encoded for it
                    self.stopped = unsafe[1]
                    return
                stamps, _formats, jpegs = decode_compressed_images([m.data])
                cam = self._cameras.setdefault(image_stream_name(topic), _Camera(topic))
                stamp = int(stamps[0])
                if cam.stamps and stamp < cam.stamps[-1]:
                    self.stopped = f"{topic}: images out of stamp order"
                    return
                cam.stamps.append(stamp)
                cam.jpegs.append(jpegs[0])
                self._held += len(jpegs[0])
                if self._held > MAX_HELD_BYTES:
                    self.stopped = (f"more than {MAX_HELD_BYTES / 2**20:g} MiB of images read and not yet "
                                    "encoded: too far behind the recording")
                    return
            elif topic in GRID_TOPICS:
                stamp = header_stamp_ns(m.data)
            else:
                return
        except CdrError as exc:
            self.stopped = f"{topic}: undecodable message: {exc}"
            return
        self._last[topic] = max(stamp, self._last.get(topic, stamp))
        if stamp >= self._first.get(topic, stamp + 1):
            return  # the common case: the stream's start, and so the grid's, is unchanged
        self._first[topic] = stamp
        if self._t0 is not None and max(self._first[t] for t in self._grid_topics()) != self._t0:
            self.stopped = f"{topic}: the grid's start moved after segments were made"

    def _topic(self, recorded: str) -> str:
        """A recorded topic as the reader names it: the rig's namespace (episode metadata, written
        when the bag opens) stripped."""
        if self._namespace is None:
            assert self._follow is not None
            record = self._follow.result.metadata.get(START_RECORD)
            try:
                self._namespace = str(EpisodeMeta.from_strings(record).namespace or "") if record else ""
            except (ValueError, TypeError, AttributeError, KeyError):
                self._namespace = ""  # unreadable: the reader says so; its topics then keep their names
        return strip_namespace(recorded, self._namespace) if self._namespace else recorded

    def _grid_topics(self) -> list[str]:
        return [*GRID_TOPICS, *(c.topic for c in self._cameras.values())]

    def _declared_cameras_started(self) -> bool:
        assert self._follow is not None
        result = self._follow.result
        declared = {self._topic(ch.topic) for ch in result.raw_channels.values() if ch.schema_name == COMPRESSED_IMAGE}
        return bool(declared) and declared <= set(self._first)

    def _make(self, limit: int | None) -> int:
        assert self._follow is not None
        if self._t0 is None:
            if not (all(t in self._first for t in GRID_TOPICS) and self._declared_cameras_started()):
                return 0
            self._t0 = max(self._first[t] for t in self._grid_topics())
        end: int | None = None
        if self._follow.result.complete:  # closed: the grid's end is known
            spans = [Stream(t, np.array([self._first[t], self._last[t]], np.int64), np.zeros(2))
                     for t in self._grid_topics()]
            end = make_grid(spans, self.fps).n
        made, before = 0, sum(c.segment for c in self._cameras.values())
        for name, cam in self._cameras.items():
            left = None if limit is None else limit - (sum(c.segment for c in self._cameras.values()) - before)
            made += self._make_camera(name, cam, end, left)
        self.done = end is not None and not self.stopped and all(c.segment * SEGMENT_FRAMES >= end
                                                                 for c in self._cameras.values())
        return made

    def _make_camera(self, name: str, cam: _Camera, end: int | None, limit: int | None) -> int:
        """Segments of one camera decided now, at most `limit` (all of them up to `end` frames once
        the bag is closed); frames encoded."""
        assert self._t0 is not None
        made = segments = 0
        stamps = np.asarray(cam.stamps, np.int64)
        while limit is None or segments < limit:
            a = cam.segment * SEGMENT_FRAMES
            b = a + SEGMENT_FRAMES if end is None else min(end, a + SEGMENT_FRAMES)
            if b <= a:
                return made
            times = Grid(self._t0, self.fps, b).times()[a:]
            if end is None and (not len(stamps) or stamps[-1] <= times[-1]):
                return made  # its last frame is not decided yet
            held = np.searchsorted(stamps, times, side="right") - 1
            if held[0] < cam.base:
                self.stopped = f"camera {name}: segment {cam.segment} needs images already dropped"
                return made
            local = held - cam.base
            if cam.key is None:
                first = decode_bgr(cam.jpegs[int(local[0])], f"{self.bag.name}: camera {name}")
                cam.key = VideoKey(self.fps, self.codec, first.shape[1], first.shape[0])
            folder = inside(self.folder, name)
            digests = [frame_digest(cam.jpegs[int(i)]) for i in local]
            if cached_segment(folder, cam.segment, cam.key, digests) is None:  # an earlier run may have made it
                try:
                    write_segment(folder, cam.segment, cam.key, cam.jpegs, local, digests, self.stall_s)
                except EncoderStalled as exc:
                    raise EncoderStalled(f"{display(self.bag.name)} camera {name}, pre-encoding segment "
                                         f"{cam.segment}: {exc}") from None
            made += b - a
            segments += 1
            self.frames += b - a
            cam.segment += 1
            drop = int(held[-1]) - cam.base  # the next segment holds this image or a later one
            self._held -= sum(len(j) for j in cam.jpegs[:drop])
            del cam.jpegs[:drop]
            cam.base += drop
        return made


class PreEncoding:
    """The pre-encoders of the bags ingest is waiting for, stepped between its looks.

    `budget_s`: a step makes one segment per bag in turn until that much time has passed (finishing
    the segment it is in), so a bag that becomes ready is taken within about a budget even while
    recordings go on — a busy machine makes the pre-encoder fall behind, never the ingest (`behind`
    says there is work left; None: every decided segment in one step). Segments live in
    `root/<bag, relative to root's parent (else absolute), quoted>/<camera>/`: one folder per bag
    however many rigs' folders (`watch`) hold an `episode_<same second>`, and however many ingests
    share the root. A step removes a folder whose bag is gone (discarded, moved) or lies in `watch`
    and is no longer waiting (taken); the folders of bags another ingest watches are its own.
    An encode that makes no progress for `stall_s` raises `EncoderStalled` (the ingest stops, naming
    the bag and camera)."""

    def __init__(self, root: Path, watch: Path | list[Path], fps: int, codec: str,
                 log: Callable[[str], None] = print, budget_s: float | None = None,
                 stall_s: float = ENCODE_STALL_S) -> None:
        self.root, self.fps, self.codec, self.log, self.stall_s = root, fps, codec, log, stall_s
        self.watch = [w.resolve() for w in ([watch] if isinstance(watch, Path) else watch)]
        self.budget_s = budget_s
        self.behind = False
        self._bags: dict[Path, BagPreEncoder] = {}

    def folder(self, bag: Path) -> Path:
        path = bag.resolve()
        base = self.root.resolve().parent
        return self.root / quote((path.relative_to(base) if path.is_relative_to(base) else path).as_posix(), safe="")

    def _stale(self, folder: Path) -> bool:
        """Whether a folder no bag of ours is waiting for is stale: its bag is gone, or is ours (in
        `watch`) and so no longer waiting."""
        bag = self.root.resolve().parent / unquote(folder.name)  # an absolute name stays absolute
        return not bag.exists() or any(bag.is_relative_to(w) for w in self.watch)

    def step(self, waiting: list[Path]) -> int:
        """Advance the pre-encoders of `waiting` (bags being recorded or about to be taken); frames
        encoded. Stale folders under `root` are removed."""
        wanted = {self.folder(b): b for b in waiting}
        for folder in [f for f in self._bags if f not in wanted]:
            del self._bags[folder]
        if self.root.is_dir():
            for stale in [d for d in self.root.iterdir() if d not in wanted and self._stale(d)]:
                shutil.rmtree(stale, ignore_errors=True)
        deadline = None if self.budget_s is None else time.monotonic() + self.budget_s
        active = [self._bags.setdefault(folder, BagPreEncoder(bag, folder, self.fps, self.codec,
                                                                         self.stall_s))
                  for folder, bag in wanted.items()]
        made = 0
        while active:
            again = []
            for pre in active:
                n = self._advance(pre, None if deadline is None else 1)
                made += n
                if n and deadline is not None and not (pre.done or pre.stopped):
                    again.append(pre)
            active = again
            if deadline is not None and time.monotonic() >= deadline:
                break
        self.behind = bool(active)
        return made

    def _advance(self, pre: BagPreEncoder, limit: int | None) -> int:
        try:
            made = pre.step(limit)
        except (OSError, ValueError) as exc:  # a full disk or a bad image: the convert decides, and says why
            made, pre.stopped = 0, f"{type(exc).__name__}: {exc}"
        if pre.stopped and not pre.told:
            self.log(f"ingest: pre-encoding of {pre.bag.name} stopped ({pre.stopped}); its convert encodes")
            pre.told = True
        return made

    def segments(self, bags: list[Path]) -> dict[str, Path]:
        """{bag: its segment folder} for the convert of `bags`."""
        return {str(b): self.folder(b) for b in bags}

    def forget(self, bags: list[Path]) -> None:
        """Remove the segments of bags taken (converted, rejected or refused)."""
        for bag in bags:
            self._bags.pop(self.folder(bag), None)
            shutil.rmtree(self.folder(bag), ignore_errors=True)
        with contextlib.suppress(OSError):
            self.root.rmdir()  # when nothing else waits: no empty folder left beside the dataset
