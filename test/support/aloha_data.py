"""Small converted datasets with video for the HDF5 ALOHA tests, and independent readers of their frames.

The readers here are the oracle's side: PyAV decoding a dataset's mp4 by each episode's
[from, to) timestamps, pyarrow reading its data rows — nothing of the exporter's code.
"""
from __future__ import annotations

import shutil
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from teleop_flywheel.data.convert import converter as conv
from teleop_flywheel.testing.synthetic_session import SessionSpec, write_session

# The leader's rendered feedback recorded: every exporter carries complementary_info.feedback (or says why not).
SPEC = dict(duration_s=2.5, width=256, height=192, feedback="gripper")
CAMERA = "wrist"
VIDEO = f"observation.images.{CAMERA}"


def converted(root: Path, episodes: int = 2) -> Path:
    """`episodes` synthetic sessions of one duration (equal lengths: ACT's get_norm_stats stacks
    episodes) converted with h264 into `root/ds`."""
    bags = [write_session(root / "bags" / f"ep{i}", SessionSpec(seed=40 + i, task=f"task {i}", **SPEC)).bag
            for i in range(episodes)]
    ds = root / "ds"
    conv.convert(bags, ds, codec="h264", workers=1, progress=False)
    return ds


def truncated_video_copy(ds: Path, copy: Path) -> Path:
    """A copy of `ds` at `copy` whose first video stops decoding after its first 2000 bytes; that video."""
    shutil.copytree(ds, copy)
    video = next((copy / "videos" / VIDEO).rglob("*.mp4"))
    video.write_bytes(video.read_bytes()[:2000])
    return video


def episodes_table(ds: Path) -> pd.DataFrame:
    return pd.read_parquet(ds / "meta/episodes/chunk-000/file-000.parquet").sort_values("episode_index")


def rows(ds: Path) -> pd.DataFrame:
    """Every data row, in (episode, frame) order."""
    tables = [pq.read_table(p).to_pandas() for p in sorted((ds / "data").rglob("*.parquet"))]
    return pd.concat(tables).sort_values(["episode_index", "frame_index"]).reset_index(drop=True)


def column(ds: Path, name: str, episode: int) -> np.ndarray:
    data = rows(ds)
    values = data.loc[data["episode_index"] == episode, name].tolist()
    return np.asarray([np.asarray(v) for v in values])


def assert_lerobot_reads(root: Path, source: Path) -> None:
    """LeRobot's own `LeRobotDataset` (run where `lerobot` imports) loads `root`, every frame decodes at
    the source's size, and action and state equal the source dataset's rows exactly."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset as LeRobot  # noqa: PLC0415

    ds = LeRobot(f"local/{root.name}", root=root, video_backend="pyav")
    data = rows(source)
    assert ds.num_episodes == data["episode_index"].nunique() and len(ds) == len(data)
    for i in range(len(ds)):
        item = ds[i]
        assert tuple(item[VIDEO].shape) == (3, SPEC["height"], SPEC["width"])
        for key in ("action", "observation.state"):
            np.testing.assert_array_equal(item[key].numpy(), np.asarray(data[key][i]), err_msg=f"{key} row {i}")


def frames(ds: Path, key: str, episode: int) -> np.ndarray:
    """An episode's frames of one camera as (T, H, W, 3) RGB, decoded whole by PyAV."""
    row = episodes_table(ds).set_index("episode_index").loc[episode]
    path = ds / f"videos/{key}/chunk-{int(row[f'videos/{key}/chunk_index']):03d}/" \
                f"file-{int(row[f'videos/{key}/file_index']):03d}.mp4"
    lo, hi = float(row[f"videos/{key}/from_timestamp"]), float(row[f"videos/{key}/to_timestamp"])
    out = []
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        tb = stream.time_base or Fraction(1, 1)
        for frame in container.decode(stream):
            t = float(frame.pts * tb)
            if lo - 1e-6 <= t < hi - 1e-6:
                out.append(frame.to_ndarray(format="rgb24"))
    return np.stack(out)
