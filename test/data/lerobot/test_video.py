"""The dataset's video encoder gives back every frame it was given, inter frames included, with the
PyAV (and so the SVT-AV1) installed here: the base install's and LeRobot's venv's differ; and the
same frames give the same bytes in any run, process or machine."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import av
import cv2
import numpy as np
import pytest

from teleop_flywheel.core.bag_topics import camera_image
from teleop_flywheel.data.lerobot.v3_layout import CODECS, VideoEncoder
from teleop_flywheel.recording.mcap.reader import open_bag
from teleop_flywheel.testing.synthetic_session import SessionSpec, write_session

# One encode in a process of its own: argv = frames (.npy of I420), out.mp4, codec, "one-cpu" or "all-cpus".
ENCODE = """
import os, sys
import numpy as np
from pathlib import Path
if sys.argv[4] == "one-cpu":
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
from teleop_flywheel.data.lerobot.v3_layout import VideoEncoder
frames = np.load(sys.argv[1])
encoder = VideoEncoder(Path(sys.argv[2]), frames.shape[2], frames.shape[1] * 2 // 3, 30, sys.argv[3])
for f in frames:
    encoder.add_i420(f)
encoder.close()
"""


@pytest.fixture(scope="module")
def frames(tmp_path_factory: pytest.TempPathFactory) -> list[np.ndarray]:
    """16 camera frames (BGR, 320x240) of a synthetic session: the arm moving, the pixel timecode."""
    bag = write_session(tmp_path_factory.mktemp("video") / "bag", SessionSpec(duration_s=1.0)).bag
    images = open_bag(bag).images(camera_image("wrist"))
    return [cv2.imdecode(np.frombuffer(images.data[i], np.uint8), cv2.IMREAD_COLOR) for i in range(16)]


@pytest.mark.parametrize("codec", CODECS)
def test_every_frame_comes_back_close_to_its_source(codec: str, frames: list[np.ndarray], tmp_path: Path) -> None:
    h, w = frames[0].shape[:2]
    encoder = VideoEncoder(tmp_path / "v.mp4", w, h, 30, codec)
    for f in frames:
        encoder.add_i420(cv2.cvtColor(f, cv2.COLOR_BGR2YUV_I420))
    encoder.close()
    with av.open(str(tmp_path / "v.mp4")) as video:
        decoded = [f.to_ndarray(format="bgr24") for f in video.decode(video=0)]
    assert len(decoded) == len(frames)
    errors = [float(np.abs(d.astype(int) - s.astype(int)).mean()) for d, s in zip(decoded, frames, strict=True)]
    # crf 30 costs ~1.1/255 on a frame; PyAV 15.1's SVT-AV1 at preset 10 left 4.6-14.8 on inter frames.
    assert max(errors) < 2.5, f"PyAV {av.__version__}, {codec}: per-frame error {[round(e, 1) for e in errors]}"


@pytest.mark.parametrize("codec", CODECS)
def test_the_same_frames_encode_to_the_same_bytes_in_any_process(codec: str, frames: list[np.ndarray],
                                                                 tmp_path: Path) -> None:
    """Twice in this process, then in processes whose heaps hold other garbage (glibc's
    MALLOC_PERTURB_ fills what malloc returns) and on one CPU instead of all: a convert on the
    process pool, on Ray or on another machine writes the bytes `--workers 1` writes."""
    i420 = np.stack([cv2.cvtColor(f, cv2.COLOR_BGR2YUV_I420) for f in frames])
    h, w = frames[0].shape[:2]
    here = []
    for run in range(2):
        encoder = VideoEncoder(tmp_path / f"here{run}.mp4", w, h, 30, codec)
        for f in i420:
            encoder.add_i420(f)
        encoder.close()
        here.append((tmp_path / f"here{run}.mp4").read_bytes())
    np.save(tmp_path / "frames.npy", i420)
    elsewhere = {}
    for name, perturb, cpus in (("heap 0", "0", "all-cpus"), ("heap 1", "1", "all-cpus"), ("one CPU", "0", "one-cpu")):
        out = tmp_path / f"{name}.mp4"
        subprocess.run([sys.executable, "-c", ENCODE, str(tmp_path / "frames.npy"), str(out), codec, cpus],
                       env={**os.environ, "MALLOC_PERTURB_": perturb}, check=True, timeout=120)
        elsewhere[name] = out.read_bytes()
    assert here[0] == here[1]
    assert [name for name, data in elsewhere.items() if data != here[0]] == []
