"""Video encoded while an episode is recorded (`data/convert/preencode.py`, `data/convert/segments.py`): the growing
MCAP is followed chunk by chunk, segments are made before the episode stops, and the convert uses
them only where they hold exactly its frames — the dataset's video is the one a plain convert makes."""
from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path

import av
import numpy as np
import pytest
from mcap.records import Message

from teleop_flywheel.data.convert import preencode
from teleop_flywheel.data.convert.converter import ConvertResult, convert
from teleop_flywheel.data.convert.ingest_loop import IngestConfig, ingest_once, read_state, segments_root, waiting_bags
from teleop_flywheel.data.convert.preencode import PreEncoding
from teleop_flywheel.data.convert.segments import SEGMENT_FRAMES
from teleop_flywheel.recording.mcap.reader import FollowMcap, open_bag
from teleop_flywheel.recording.mcap.scan import scan
from teleop_flywheel.recording.mcap.writer import BagWriter
from teleop_flywheel.recording.recorder.verdict import DISCARD, KEEP, mark_decision, verdict_doc, write_verdict
from teleop_flywheel.testing.growing_bag import grow
from teleop_flywheel.testing.synthetic_session import SessionSpec, write_session

SPEC = SessionSpec(duration_s=6.0, stamp_clock="ros", motion="reach", seed=3, cameras=("front",))


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_session(tmp_path_factory.mktemp("src") / "ep", SPEC).bag


@pytest.fixture(scope="module")
def plain(source: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The dataset a convert without segments makes of the source bag."""
    ds = tmp_path_factory.mktemp("plain") / "ds"
    assert convert([source], ds, workers=1, progress=False).outcomes == {str(source): "converted"}
    return ds


def _frames(ds: Path) -> list[np.ndarray]:
    (video,) = (ds / "videos").rglob("*.mp4")
    with av.open(str(video)) as c:
        return [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]


def _image_stats(ds: Path) -> list[float]:
    stats = json.loads((ds / "meta/stats.json").read_text())["observation.images.front"]
    return [float(x) for k in ("mean", "std") for x in np.ravel(stats[k])]


def _grown(source: Path, watch: Path, pre: PreEncoding) -> tuple[Path, list[int]]:
    """The source replayed into `watch` chunk by chunk, the pre-encoder stepped before each chunk;
    (the bag, frames it made at each step)."""
    bag = watch / source.name
    made: list[int] = []
    grow(source, bag, lambda _log_ns: made.append(pre.step([bag])))
    made.append(pre.step([bag]))
    return bag, made


def _convert(bag: Path, ds: Path, pre: PreEncoding) -> ConvertResult:
    res = convert([bag], ds, workers=1, progress=False, segments=pre.segments([bag]))
    assert res.outcomes == {str(bag): "converted"}
    return res


def test_follow_reads_a_growing_file_as_the_scan_reads_the_whole(source: Path, tmp_path: Path) -> None:
    seen: list[Message] = []
    follow: list[FollowMcap] = []

    def poll(_log_ns: int) -> None:
        if not follow:
            follow.append(FollowMcap(next((tmp_path / "ep").glob("*.mcap")), seen.append))
        follow[0].poll()

    grow(source, tmp_path / "ep", poll)
    polled_before_close = len(seen)
    follow[0].poll()
    whole: list[Message] = []
    result = scan(next(source.glob("*.mcap")), whole.append)
    assert 0 < polled_before_close < len(whole)  # read while it grew, not only at the end
    assert follow[0].result.complete and follow[0].ended and not follow[0].result.problems
    assert [(m.channel_id, m.sequence, m.data) for m in seen] == [(m.channel_id, m.sequence, m.data) for m in whole]
    assert follow[0].result.counts == result.counts and follow[0].result.data_crc == result.data_crc


def test_segments_made_while_recording_give_the_plain_convert_s_video(source: Path, plain: Path,
                                                                      tmp_path: Path) -> None:
    watch = tmp_path / "watch"
    watch.mkdir()
    pre = PreEncoding(tmp_path / "segments", watch, 30, "libsvtav1")
    bag, made = _grown(source, watch, pre)
    frames = json.loads((plain / "meta/info.json").read_text())["total_frames"]
    assert sum(made[:-1]) >= frames - 2 * SEGMENT_FRAMES  # all but the last segments made before it stopped
    assert sum(made) == frames and len(list((tmp_path / "segments").rglob("*.mp4"))) == -(-frames // SEGMENT_FRAMES)
    res = _convert(bag, tmp_path / "ds", pre)
    assert res.reused_frames == {str(bag): frames}  # nothing encoded at keep
    ours, theirs = _frames(tmp_path / "ds"), _frames(plain)
    assert len(ours) == len(theirs) == frames
    assert max(float(np.abs(a.astype(np.int16) - b).mean()) for a, b in zip(ours, theirs, strict=True)) < 0.5
    assert np.allclose(_image_stats(tmp_path / "ds"), _image_stats(plain))


def test_a_segment_that_does_not_hold_the_frames_is_encoded_again(source: Path, plain: Path, tmp_path: Path) -> None:
    watch = tmp_path / "watch"
    watch.mkdir()
    pre = PreEncoding(tmp_path / "segments", watch, 30, "libsvtav1")
    bag, _made = _grown(source, watch, pre)
    # Segment 1 now claims the frames of segment 2 (a bag changed since, a wrong guess): its digests differ.
    folder = pre.folder(bag) / "front"
    one, two = (json.loads((folder / f"{i:06d}.json").read_text()) for i in (1, 2))
    (folder / "000001.json").write_text(json.dumps({**one, "frames": two["frames"]}))
    # Segment 2 was made for another size: not used either.
    (folder / "000002.json").write_text(json.dumps({**two, "width": two["width"] + 2}))
    res = _convert(bag, tmp_path / "ds", pre)
    frames = json.loads((plain / "meta/info.json").read_text())["total_frames"]
    assert 2 * SEGMENT_FRAMES < frames <= 3 * SEGMENT_FRAMES
    assert res.reused_frames == {str(bag): SEGMENT_FRAMES}  # segment 0 remuxed; 1 and 2 encoded (as one part)
    ours, theirs = _frames(tmp_path / "ds"), _frames(plain)
    assert len(ours) == len(theirs)
    assert max(float(np.abs(a.astype(np.int16) - b).mean()) for a, b in zip(ours, theirs, strict=True)) < 0.5


def test_segments_of_another_episode_are_never_used(tmp_path: Path, plain: Path, source: Path) -> None:
    watch = tmp_path / "watch"
    watch.mkdir()
    pre = PreEncoding(tmp_path / "segments", watch, 30, "libsvtav1")
    other = write_session(tmp_path / "other" / source.name, SessionSpec(
        duration_s=6.0, stamp_clock="ros", motion="reach", seed=4, cameras=("front",))).bag
    bag, _made = _grown(other, watch, pre)  # same name, other pictures
    res = convert([source], tmp_path / "ds", workers=1, progress=False, segments={str(source): pre.folder(bag)})
    assert res.outcomes == {str(source): "converted"} and res.reused_frames == {}
    assert len(_frames(tmp_path / "ds")) == len(_frames(plain))


def test_ingest_converts_a_kept_episode_from_what_it_encoded_while_recording(source: Path, tmp_path: Path) -> None:
    watch, ds = tmp_path / "bags", tmp_path / "ds"
    watch.mkdir()
    cfg = IngestConfig([watch], ds, tmp_path / "quarantine", grace_s=30.0)
    pre = PreEncoding(segments_root(ds), watch, cfg.fps, cfg.codec)
    lines: list[str] = []
    bag = watch / source.name
    grow(source, bag, lambda _log_ns: lines.extend(f"{k}: {v}" for k, v in ingest_once(cfg, lines.append, pre).items()))
    assert ingest_once(cfg, lines.append, pre) == {}  # closed, no verdict yet: its last segment is made meanwhile
    assert not any(": converted" in x for x in lines)
    write_verdict(bag, verdict_doc(bag.name, {"report": {"episode_id": "x", "reasons": []}, "seconds": 1.0}))
    mark_decision(bag, KEEP)
    frames_made = len(list(segments_root(ds).rglob("*.mp4")))
    assert frames_made > 0
    assert ingest_once(cfg, lines.append, pre) == {str(bag): "converted"}
    info = json.loads((ds / "meta/info.json").read_text())
    assert any(f"{bag.name}: converted ({info['total_frames']} camera frames encoded while it was recorded)" in x
               for x in lines), lines
    assert next(iter(read_state(ds)["bags"].values()))["pre_encoded_frames"] == info["total_frames"]
    assert not segments_root(ds).exists()  # the taken bag's segments are removed (and the empty folder)


def test_a_pre_encoder_that_cannot_be_right_stops_and_says_why(tmp_path: Path) -> None:
    """The clock steps back 200 ms at 3 s: the camera's stamps go back, the grid's frames can no longer
    be decided as they arrive. It stops, says so once, and keeps what it made before."""
    src = write_session(tmp_path / "src" / "stepped", SessionSpec(
        duration_s=6.0, stamp_clock="ros", seed=5, cameras=("front",), clock_step=(3.0, -200.0))).bag
    watch = tmp_path / "watch"
    watch.mkdir()
    lines: list[str] = []
    pre = PreEncoding(tmp_path / "segments", watch, 30, "libsvtav1", lines.append)
    _bag, made = _grown(src, watch, pre)
    assert lines == ["ingest: pre-encoding of stepped stopped (/cameras/front/image/compressed: images out of "
                     "stamp order); its convert encodes"]
    assert 0 < sum(made) < 3 * SEGMENT_FRAMES and len(list((tmp_path / "segments").rglob("*.mp4"))) >= 1


def test_only_bags_being_recorded_or_about_to_be_taken_are_encoded_ahead(tmp_path: Path) -> None:
    watch = tmp_path / "bags"
    cfg = IngestConfig([watch], tmp_path / "ds", None, grace_s=30.0)

    def bag(name: str, decision: str | None = None, verdict: bool = True) -> Path:
        b = write_session(watch / name, SessionSpec(duration_s=1.0, seed=1)).bag
        if verdict:
            write_verdict(b, verdict_doc(b.name, {"report": {"episode_id": "x", "reasons": []}, "seconds": 1.0}))
        if decision:
            mark_decision(b, decision)
        return b

    bag("kept", KEEP)
    bag("in_grace")
    bag("discarded_in_place", DISCARD)
    bag("judging", verdict=False)
    old = bag("old_unjudged", verdict=False)
    os.utime(old / "metadata.yaml", (time.time() - 600, time.time() - 600))
    (watch / "recording").mkdir()
    (watch / "recording" / "recording_0.mcap").write_bytes(b"\x89MCAP0\r\n")
    now, ahead = waiting_bags(cfg, {"bags": {}})
    assert [b.name for b in now] == ["kept"]
    assert sorted(b.name for b in ahead) == ["in_grace", "judging", "recording"]


def _namespaced(src: Path, dst: Path, ns: str = "/rig_a") -> Path:
    """`src` as a rig under namespace `ns` records it: every topic but /diagnostics qualified, the
    namespace in the episode metadata (written when the bag opens)."""
    ep = open_bag(src).episode
    assert ep is not None
    named = {t: t if t == "/diagnostics" else ns + t for t in ep.topics}
    meta = dataclasses.replace(ep, namespace=ns, topics=list(named.values()),
                               drops={named.get(t, t): n for t, n in ep.drops.items()})
    scanned = scan(next(src.glob("*.mcap")))
    topics = {cid: ch.topic if ch.topic == "/diagnostics" else ns + ch.topic for cid, ch in scanned.channels.items()}
    with BagWriter(dst, episode=meta, fsync=False, max_chunk_age_s=1e6, chunk_size=256 * 1024) as bag:
        for cid, ch in sorted(scanned.channels.items()):
            bag.add_topic(topics[cid], scanned.schemas[ch.schema_id].name)
        scan(scanned.path, lambda m: bag.write(topics[m.channel_id], m.data, m.log_time, m.publish_time, m.sequence))
    return dst


def test_a_namespaced_rig_s_bag_is_encoded_ahead_under_the_reader_s_names(source: Path, plain: Path,
                                                                          tmp_path: Path) -> None:
    rig = _namespaced(source, tmp_path / "src" / "ep")
    watch = tmp_path / "watch"
    watch.mkdir()
    pre = PreEncoding(tmp_path / "segments", watch, 30, "libsvtav1")
    bag, made = _grown(rig, watch, pre)
    frames = json.loads((plain / "meta/info.json").read_text())["total_frames"]
    assert sum(made) == frames and (pre.folder(bag) / "front").is_dir()  # the camera as read
    assert _convert(bag, tmp_path / "ds", pre).reused_frames == {str(bag): frames}


def test_ingests_of_several_rigs_keep_apart_the_segments_of_same_named_bags_and_of_each_other(tmp_path: Path
                                                                                              ) -> None:
    """Two rigs' folders hold a bag of the same name (recorders name bags by the second they start):
    each bag has its own segment folder. Two ingests sharing one dataset (one root) each remove only
    the stale folders that are theirs — a bag gone, or one of theirs no longer waiting — never the
    folders of the bags the other is encoding ahead."""
    root = tmp_path / "ds.ingest.segments"
    bags = {rig: tmp_path / rig / "episode_20260105_100000" for rig in ("rig_a", "rig_b")}
    for bag in bags.values():
        bag.mkdir(parents=True)
    taken = tmp_path / "rig_a" / "episode_20260105_095900"
    taken.mkdir()
    a = PreEncoding(root, [tmp_path / "rig_a"], 30, "h264")
    b = PreEncoding(root, tmp_path / "rig_b", 30, "h264")
    one = PreEncoding(root, [tmp_path / "rig_a", tmp_path / "rig_b"], 30, "h264")
    folders = {rig: a.folder(bag) for rig, bag in bags.items()}
    assert folders["rig_a"] != folders["rig_b"] and one.folder(bags["rig_b"]) == b.folder(bags["rig_b"])
    gone = a.folder(tmp_path / "rig_b" / "discarded_since")
    for folder in [*folders.values(), a.folder(taken), gone]:
        (folder / "front").mkdir(parents=True)
    a.step([bags["rig_a"]])  # rig_a's ingest: its waiting bag; rig_b's bag is not its to judge
    assert folders["rig_a"].is_dir() and folders["rig_b"].is_dir()
    assert not a.folder(taken).exists() and not gone.exists()  # its own bag taken; a bag gone
    b.step([])  # rig_b's ingest took its bag
    assert folders["rig_a"].is_dir() and not folders["rig_b"].exists()


def test_a_budgeted_step_makes_one_segment_per_bag_in_turn_and_says_it_is_behind(source: Path, tmp_path: Path
                                                                                  ) -> None:
    """However much is decided, a step with its budget spent stops after a round of one segment per
    bag: a bag that becomes ready is not kept waiting behind the work ahead."""
    watch = tmp_path / "watch"
    grow(source, watch / "a")
    grow(source, watch / "b")  # two closed bags: 3 segments each are decided
    pre = PreEncoding(tmp_path / "segments", watch, 30, "libsvtav1", budget_s=0.0)
    rounds = []
    while True:
        rounds.append(pre.step([watch / "a", watch / "b"]))
        if not pre.behind:
            break
    frames = sum(rounds)
    assert rounds[:2] == [2 * SEGMENT_FRAMES, 2 * SEGMENT_FRAMES] and frames == 2 * (frames // 2)
    assert len(rounds) == 3 and len(list((tmp_path / "segments").rglob("*.mp4"))) == 6
    assert pre.step([watch / "a", watch / "b"]) == 0 and not pre.behind  # all made: nothing left


def test_lerobot_loads_every_frame_of_a_video_made_from_segments(source: Path, plain: Path, tmp_path: Path) -> None:
    """LeRobot's own loader (in the LeRobot venv) reads the remuxed segments frame for frame as it
    reads the plain convert's single encode."""
    lerobot_dataset = pytest.importorskip("lerobot.datasets.lerobot_dataset",
                                          reason="LeRobot not installed (too heavy for CI)")
    watch = tmp_path / "watch"
    watch.mkdir()
    pre = PreEncoding(tmp_path / "segments", watch, 30, "libsvtav1")
    bag, _made = _grown(source, watch, pre)
    assert _convert(bag, tmp_path / "ds", pre).reused_frames
    ours = lerobot_dataset.LeRobotDataset("local/segments", root=tmp_path / "ds", video_backend="pyav")
    theirs = lerobot_dataset.LeRobotDataset("local/plain", root=plain, video_backend="pyav")
    assert len(ours) == len(theirs) > 2 * SEGMENT_FRAMES
    for i in range(len(ours)):
        a, b = ours[i]["observation.images.front"], theirs[i]["observation.images.front"]
        assert a.shape == b.shape and float((a - b).abs().mean()) < 0.5 / 255, i


def test_a_pre_encoder_too_far_behind_stops_instead_of_holding_more(source: Path, plain: Path, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Images read and not yet encoded are held in memory: past the bound (here 0.25 MiB, shipped 256 MiB)
    the pre-encoder lets them go and says so; the convert encodes what it did not."""
    monkeypatch.setattr(preencode, "MAX_HELD_BYTES", 1 << 18)
    watch = tmp_path / "watch"
    grow(source, watch / source.name)  # all of it written before the first look: far behind
    lines: list[str] = []
    pre = PreEncoding(tmp_path / "segments", watch, 30, "libsvtav1", lines.append)
    assert pre.step([watch / source.name]) == 0
    assert lines == [f"ingest: pre-encoding of {source.name} stopped (more than 0.25 MiB of images read and not yet "
                     "encoded: too far behind the recording); its convert encodes"]
    res = _convert(watch / source.name, tmp_path / "ds", pre)
    assert res.reused_frames == {} and len(_frames(tmp_path / "ds")) == len(_frames(plain))
