"""Many stations into one dataset: two rigs × 5 episodes each, taken by two `ingest` processes running
at once, by one ingest over both rigs' folders (a process pool, and Ray tasks on a one-node cluster),
give the dataset that two ingests one after the other give.

"The same dataset", precisely, with every episode keyed by its content id:
- the episode indices are 0..9, each once, in the episodes table and the data rows; `index` runs
  0..N-1 and each episode's rows are its `dataset_from_index:dataset_to_index`; the tasks table holds
  each rig's task once;
- per episode: the same frames (every column but the three that number rows by append order:
  `index`, `episode_index`, `task_index`), the same task text (through the tasks table), the same
  per-episode stats and episode columns (but the append-order ones: indices, file numbers, video
  offsets);
- per frame, through LeRobot's own `LeRobotDataset` (pyav) — where LeRobot is installed: every
  frame of every episode decodes at its index, with the episode's own task, its pixels carry the
  capture time (`hw/camera/timecode.py`) of the camera image the frame contract puts there (the
  simulation's truth: the camera's latest image stamped at or before the frame's grid time, every
  episode on its own stretch of time, so a frame of another episode or a neighbour can never pass),
  and its pixels equal the sequential dataset's frame of that episode and index.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from support.paths import ROOT
from support.ray_driver import run_driver

from teleop_flywheel.data.convert.ingest_loop import IngestConfig, ingest_once, read_state
from teleop_flywheel.data.lerobot import v3_layout
from teleop_flywheel.hw.camera import timecode
from teleop_flywheel.recording.recorder.verdict import KEEP, mark_decision, verdict_doc, write_verdict
from teleop_flywheel.testing.synthetic_session import SessionSpec, SessionTruth, write_session

RIGS = {"rig_a": "pick the brick", "rig_b": "stack the cup"}
EPISODES = 5
FPS = 30
CAMERA = "observation.images.wrist"
W, H = 192, 144  # the smallest frame that holds the pixel timecode (88 bits in 16 px blocks)
ORDERED = ("index", "episode_index", "task_index")  # numbered by append order
INGEST = ["--once", "--grace", "0", "--codec", "h264", "--nice", "0", "--no-audit", "--no-quarantine"]


def _kept(bag: Path) -> None:
    write_verdict(bag, verdict_doc(bag.name, {"report": {"episode_id": "x", "reasons": []}, "seconds": 1.0}))
    mark_decision(bag, KEEP)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, SessionTruth]]:
    """Two rigs' output folders, 5 kept episodes each; each episode recorded a minute after the last,
    so no two share a capture time."""
    root = tmp_path_factory.mktemp("fleet")
    truths = {}
    for r, (rig, task) in enumerate(RIGS.items()):
        for i in range(EPISODES):
            k = r * EPISODES + i
            truth = write_session(root / rig / f"ep{i}", SessionSpec(
                duration_s=2.5, width=W, height=H, seed=k, session_time_s=60.0 * k, rig_id=rig, task=task))
            _kept(truth.bag)
            truths[f"{rig}/ep{i}"] = truth
    return root, truths


def _ingest(watch: list[Path], ds: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "teleop_flywheel.cli", "ingest", *map(str, watch), "--dataset",
                             str(ds), *INGEST, *extra], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})


def _finished(*procs: subprocess.Popen[str]) -> None:
    for p in procs:
        out, _ = p.communicate(timeout=120)
        assert p.returncode == 0, out[-3000:]


@pytest.fixture(scope="module")
def datasets(fleet: tuple[Path, dict[str, SessionTruth]]) -> dict[str, Path]:
    root, _ = fleet
    rigs = [root / rig for rig in RIGS]
    out = {name: root / name for name in ("sequential", "concurrent", "one_ingest")}
    for rig in rigs:  # the reference: one rig's ingest, then the other's
        ingest_once(IngestConfig([rig], out["sequential"], None, grace_s=0, codec="h264"), log=lambda _line: None)
    _finished(*[_ingest([rig], out["concurrent"]) for rig in rigs])  # two ingest processes at once
    _finished(_ingest(rigs, out["one_ingest"], "--workers", "2"))
    return out


def _table(path: Path) -> dict[str, list[Any]]:
    return pq.read_table(path).to_pydict()


def _content(ds: Path) -> dict[str, dict[str, Any]]:
    """{episode id: what the episode holds, without its place in the dataset}, after checking that
    the places themselves are right: indices contiguous, rows where the episodes table says."""
    info = json.loads((ds / v3_layout.INFO_PATH).read_text())
    eps = _table(ds / v3_layout.EPISODES_PATH.format(chunk_index=0, file_index=0))
    tasks = pq.read_table(ds / v3_layout.TASKS_PATH).to_pandas()
    task_of = {int(i): str(t) for t, i in zip(tasks.index, tasks["task_index"], strict=True)}
    assert sorted(task_of.values()) == sorted(RIGS.values()) and sorted(task_of) == [0, 1]
    data = pa.concat_tables([pq.read_table(p) for p in sorted((ds / "data").rglob("*.parquet"))]).to_pydict()
    n_eps = 2 * EPISODES
    assert info["total_episodes"] == n_eps and info["total_tasks"] == 2 and info["splits"] == {"train": f"0:{n_eps}"}
    assert eps["episode_index"] == list(range(n_eps))
    assert data["index"] == list(range(info["total_frames"]))
    out = {}
    for row in range(n_eps):
        lo, hi = eps["dataset_from_index"][row], eps["dataset_to_index"][row]
        assert (row == 0 and lo == 0) or lo == eps["dataset_to_index"][row - 1]
        assert hi - lo == eps["length"][row] and set(data["episode_index"][lo:hi]) == {row}
        (task_index,) = set(data["task_index"][lo:hi])
        assert eps["tasks"][row] == [task_of[task_index]]
        out[eps["episode_id"][row]] = {
            "task": task_of[task_index],
            "frames": {k: v[lo:hi] for k, v in data.items() if k not in ORDERED},
            "episode": {k: v[row] for k, v in eps.items() if not k.startswith(("videos/", "data/", "meta/"))
                        and k not in {"episode_index", "dataset_from_index", "dataset_to_index"}
                        and not k.startswith(tuple(f"stats/{o}/" for o in ORDERED))},
        }
    assert data["index"][-1] == eps["dataset_to_index"][-1] - 1
    return out


def _assert_same(name: str, ds: Path, reference: Path) -> None:
    want, got = _content(reference), _content(ds)
    assert len(want) == 2 * EPISODES and got.keys() == want.keys(), name
    for eid, ep in want.items():
        assert got[eid]["task"] == ep["task"], (name, eid)
        for part in ("frames", "episode"):  # repr: exact floats, and NaN (no camera lag estimate) equals NaN
            assert repr(sorted(got[eid][part].items())) == repr(sorted(ep[part].items())), (name, eid, part)
    state = read_state(ds)["bags"]
    assert sorted(v["outcome"] for v in state.values()) == ["converted"] * len(want), name


def test_concurrent_ingests_and_one_ingest_over_both_rigs_equal_two_sequential_ingests(
        datasets: dict[str, Path]) -> None:
    for name in ("concurrent", "one_ingest"):
        _assert_same(name, datasets[name], datasets["sequential"])


@pytest.mark.timeout(240)
def test_one_ingest_over_both_rigs_as_ray_tasks_equals_two_sequential_ingests(
        fleet: tuple[Path, dict[str, SessionTruth]], datasets: dict[str, Path]) -> None:
    """Validation and conversion as Ray tasks (a one-node cluster on 127.0.0.1 stands in for the fleet's)."""
    root, _ = fleet
    got = run_driver("""
        from pathlib import Path
        from teleop_flywheel.data.convert import converter
        from teleop_flywheel.data.convert.ingest_loop import IngestConfig, ingest_once

        root, rigs = Path(sys.argv[1]), sys.argv[2:]
        executors = []  # what the convert asked parallel_map for (it still runs every job)
        plain = converter.parallel_map

        def spied(*args, **kwargs):
            executors.append(kwargs["executor"])
            return plain(*args, **kwargs)

        converter.parallel_map = spied
        cfg = IngestConfig([root / rig for rig in rigs], root / "ray", None, grace_s=0, codec="h264", workers=2,
                           executor="ray")
        answer({"taken": sorted(ingest_once(cfg, log=lambda _line: None).values()), "executors": executors})
    """, str(root), *RIGS, cwd=root)
    assert got == {"taken": ["converted"] * 2 * EPISODES, "executors": ["ray"]}
    _assert_same("ray", root / "ray", datasets["sequential"])


def _expected_captures(truth: SessionTruth, length: int) -> np.ndarray:
    """The capture time in the pixels of each frame: the camera's latest image stamped at or before
    the frame's grid time t_k = t0 + k/fps, t0 the latest first stamp of the grid's streams."""
    stamps, captures = truth.camera_stamp_ns["wrist"], truth.camera_capture_ns["wrist"]
    t0 = max(int(truth.joint_stamps_ns[0]), int(stamps[0]))
    grid = t0 + np.round(np.arange(length) * 1e9 / FPS).astype(np.int64)
    return captures[np.searchsorted(stamps, grid, side="right") - 1]


def _lerobot_frames(lerobot_dataset: Any, name: str, root: Path) -> dict[tuple[str, int], np.ndarray]:
    """{(episode id, frame index): RGB uint8} as LeRobot's loader gives them: each episode's frames in one
    item (`delta_timestamps` over the episode: every frame decoded at its timestamp within LeRobot's
    tolerance), and items by index at each episode's first, middle and last frame (what a training
    sampler asks for): its episode, frame, task and the same picture."""
    eps = _table(root / v3_layout.EPISODES_PATH.format(chunk_index=0, file_index=0))
    longest = max(eps["length"])
    whole = lerobot_dataset.LeRobotDataset(f"local/{name}", root=root, video_backend="pyav",
                                           delta_timestamps={CAMERA: [k / FPS for k in range(longest)]})
    plain = lerobot_dataset.LeRobotDataset(f"local/{name}", root=root, video_backend="pyav")
    assert len(plain) == sum(eps["length"])
    out = {}
    for ep, (eid, lo, n) in enumerate(zip(eps["episode_id"], eps["dataset_from_index"], eps["length"], strict=True)):
        item = whole[lo]
        assert int(item["episode_index"]) == ep and int(item["frame_index"]) == 0
        assert int((~item[f"{CAMERA}_is_pad"]).sum()) == n, (name, ep)
        frames = (item[CAMERA][:n].permute(0, 2, 3, 1).numpy() * 255).round().astype(np.uint8)
        out.update({(eid, k): frames[k] for k in range(n)})
        for k in (0, n // 2, n - 1):
            one = plain[lo + k]
            assert (int(one["index"]), int(one["episode_index"]), int(one["frame_index"])) == (lo + k, ep, k), name
            assert one["task"] == RIGS[eps["rig_id"][ep]], (name, ep)
            picture = (one[CAMERA].permute(1, 2, 0).numpy() * 255).round().astype(np.uint8)
            np.testing.assert_array_equal(picture, frames[k], err_msg=f"{name}: episode {ep} frame {k}")
    return out


def test_lerobot_decodes_every_frame_of_every_episode_at_its_index(
        fleet: tuple[Path, dict[str, SessionTruth]], datasets: dict[str, Path]) -> None:
    lerobot_dataset = pytest.importorskip("lerobot.datasets.lerobot_dataset",
                                          reason="LeRobot (torch, ~8 GB) is not installed here; run this test in its "
                                                 "venv (pip install '.[lerobot]')")
    _, truths = fleet
    eps = _table(datasets["sequential"] / v3_layout.EPISODES_PATH.format(chunk_index=0, file_index=0))
    truth_of = {eid: truths[f"{rig}/{bag}"] for eid, rig, bag in zip(eps["episode_id"], eps["rig_id"],
                                                                      eps["source_bag"], strict=True)}
    frames = {name: _lerobot_frames(lerobot_dataset, name, root) for name, root in datasets.items()}
    expected = {eid: _expected_captures(truth, eps["length"][e]) for e, (eid, truth) in enumerate(truth_of.items())}
    for name, got in frames.items():
        assert got.keys() == frames["sequential"].keys(), name
        for (eid, k), image in got.items():
            assert timecode.decode(image[..., ::-1]) == expected[eid][k], (name, eid, k)
            # The same picture; not bit for bit: x264 does not repeat its bits from run to run here.
            diff = np.abs(image.astype(np.int16) - frames["sequential"][(eid, k)]).mean()
            assert diff < 0.5, (name, eid, k, diff)
