"""`manifest episodes` and `manifest materialize`: the manifest's episodes, found by id, written as a dataset.

The oracles are independent of the writer: pandas/pyarrow reads of both datasets
(`testing/dataset_files.py`), PyAV demuxing and decoding the videos, numpy for the stats, the
project's v3.0 consistency checks (`doctor`), and, where LeRobot is installed, LeRobot's own
`LeRobotDataset` decoding every frame.
"""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pyarrow.parquet as pq
import pytest
from support.cli import run_cli
from support.paths import ROOT

from teleop_flywheel.cli import main as cli_main
from teleop_flywheel.data.convert import converter as conv
from teleop_flywheel.data.lerobot import commit
from teleop_flywheel.data.lerobot.consistency import problems
from teleop_flywheel.data.lerobot.dataset import LeRobotDataset
from teleop_flywheel.data.lerobot.flywheel_schema import SCHEMA_KEY, SCHEMA_VERSION
from teleop_flywheel.data.provenance.manifest import identities
from teleop_flywheel.testing.dataset_files import (
    data_files,
    drop_episode,
    layout_1_copy,
    read_episodes,
    read_frames,
    rewrite_column,
    stack,
)
from teleop_flywheel.testing.synthetic_dataset import SyntheticSpec, write
from teleop_flywheel.testing.synthetic_session import SessionSpec, write_session

HAVE_LEROBOT = importlib.util.find_spec("lerobot") is not None
NEEDS_LEROBOT = pytest.mark.skipif(not HAVE_LEROBOT, reason="LeRobot (torch, ~8 GB) is not installed here; "
                                                            "pip install '.[lerobot]' to run the loader check")
SPEC = dict(duration_s=2.5, width=256, height=192)
VIDEO = "observation.images.wrist"
POSITIONAL = {"index", "episode_index", "task_index"}


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A three-episode h264 dataset, a manifest of episodes 0 and 2, and both materialized forms."""
    root = tmp_path_factory.mktemp("materialize")
    bags = [write_session(root / "bags" / f"ep{i}", SessionSpec(seed=40 + i, task=f"task {i}", **SPEC)).bag
            for i in range(3)]
    ds = root / "ds"
    conv.convert(bags, ds, codec="h264", workers=1, progress=False)
    manifest = root / "m02.json"
    assert cli_main(["manifest", "create", str(ds), "--out", str(manifest), "--filter", "episode_index!=1"]) == 0
    assert cli_main(["manifest", "materialize", str(manifest), str(root / "remuxed")]) == 0
    assert cli_main(["manifest", "materialize", str(manifest), str(root / "small"), "--resolution", "128x96"]) == 0
    return {"root": root, "ds": ds, "manifest": manifest, "remuxed": root / "remuxed", "small": root / "small",
            **{f"bag{i}": b for i, b in enumerate(bags)}}


def _synthetic(root: Path, metadata: bool = True) -> Path:
    return write(root, SyntheticSpec(episodes=6, min_length=20, max_length=30, seed=7,
                                     episode_metadata=metadata)).root


def _plain(value: object) -> object:
    """A cell of a pandas-read parquet as plain Python (nested arrays as nested lists)."""
    if isinstance(value, np.ndarray):
        return [_plain(v) for v in value]
    return value.item() if isinstance(value, np.generic) else value


def _packets(path: Path, lo: float, hi: float) -> list[tuple[int, int, bytes]]:
    """(pts, dts relative to the span's first packet, bytes) of the packets whose pts is in [lo, hi) s."""
    out = []
    with av.open(str(path)) as c:
        s = c.streams.video[0]
        assert s.time_base is not None
        for p in c.demux(s):
            if p.pts is not None and p.dts is not None and lo - 1e-6 <= float(p.pts * s.time_base) < hi - 1e-6:
                out.append((p.pts, p.dts, bytes(p)))
    assert out, f"{path}: no packets in [{lo}, {hi})"
    first = out[0][0]
    return [(pts - first, dts - first, data) for pts, dts, data in out]


def _video_span(root: Path, row: dict) -> tuple[Path, float, float]:
    rel = (f"videos/{VIDEO}/chunk-{int(row[f'videos/{VIDEO}/chunk_index']):03d}/"
           f"file-{int(row[f'videos/{VIDEO}/file_index']):03d}.mp4")
    return root / rel, float(row[f"videos/{VIDEO}/from_timestamp"]), float(row[f"videos/{VIDEO}/to_timestamp"])


# --------------------------------------------------------------------------- manifest episodes
@pytest.mark.parametrize("metadata", [True, False], ids=["converter-ids", "content-ids"])
def test_episodes_prints_current_indices_after_renumbering(tmp_path: Path, metadata: bool,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    root = _synthetic(tmp_path / "ds", metadata)
    manifest = tmp_path / "m.json"
    assert cli_main(["manifest", "create", str(root), "--out", str(manifest), "--filter", "episode_index>=2"]) == 0
    capsys.readouterr()
    assert run_cli(capsys, "manifest", "episodes", str(manifest)) == (0, "--dataset.episodes='[2, 3, 4, 5]'\n", "")
    ids = {e.episode_index: e.episode_id for e in identities(LeRobotDataset.open(root))}

    drop_episode(root, 0, renumber=True)  # every later episode moves down one index
    code, out, err = run_cli(capsys, "manifest", "episodes", str(manifest))
    assert (code, out, err) == (0, "--dataset.episodes='[1, 2, 3, 4]'\n", "")
    code, out, _ = run_cli(capsys, "manifest", "episodes", str(manifest), "--json")
    doc = json.loads(out)
    assert code == 0 and doc["episodes"] == [1, 2, 3, 4]
    assert doc["episode_index"] == {ids[e]: e - 1 for e in (2, 3, 4, 5)}


def test_a_changed_or_missing_episode_is_an_error_naming_it(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    root = _synthetic(tmp_path / "ds")
    manifest = tmp_path / "m.json"
    assert cli_main(["manifest", "create", str(root), "--out", str(manifest)]) == 0
    ids = {e["episode_index"]: e["episode_id"] for e in json.loads(manifest.read_text())["episodes"]}
    capsys.readouterr()
    episode = pq.read_table(data_files(root)[0]).column("episode_index").to_numpy()

    def edit(a: np.ndarray) -> np.ndarray:
        a = a.copy()
        a[np.flatnonzero(episode == 3)[4], 2] += 0.25
        return a

    rewrite_column(root, "action", edit)
    code, out, err = run_cli(capsys, "manifest", "episodes", str(manifest))
    assert code == 1 and out == ""
    lines = err.splitlines()
    assert lines[0].startswith(f"changed episode 3 id {ids[3]}: data rows") and len(lines) == 2
    assert lines[1].startswith("teleop-flywheel manifest: error: differs from manifest") and "1 place(s)" in lines[1]
    out_dir = tmp_path / "out"
    assert run_cli(capsys, "manifest", "materialize", str(manifest), str(out_dir))[0] == 1
    assert not out_dir.exists() and not commit.staging_path(out_dir).exists()

    drop_episode(root, 4)
    code, _, err = run_cli(capsys, "manifest", "episodes", str(manifest))
    assert code == 1 and f"removed episode 4 id {ids[4]}" in err and f"changed episode 3 id {ids[3]}" in err


def test_episodes_after_the_dataset_gained_episodes(made: dict[str, Path], tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    ds = tmp_path / "ds"
    conv.convert([made["bag0"], made["bag2"]], ds, codec="h264", workers=1, progress=False)
    manifest = tmp_path / "m.json"
    assert cli_main(["manifest", "create", str(ds), "--out", str(manifest)]) == 0
    conv.convert([made["bag1"]], ds, codec="h264", workers=1, progress=False)  # appended: episode 2
    capsys.readouterr()
    assert run_cli(capsys, "manifest", "verify", str(ds), str(manifest))[0] == 1  # it did gain an episode
    assert run_cli(capsys, "manifest", "episodes", str(manifest)) == (0, "--dataset.episodes='[0, 1]'\n", "")


# --------------------------------------------------------------------------- manifest materialize
def test_materialized_dataset_holds_exactly_the_manifest(made: dict[str, Path],
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    src, out = made["ds"], made["remuxed"]
    assert problems(out) == []
    assert run_cli(capsys, "doctor", str(out))[0] == 0
    manifest = json.loads(made["manifest"].read_text())
    src_eps, out_eps = read_episodes(src).set_index("episode_index"), read_episodes(out)
    kept = [0, 2]
    assert out_eps["episode_index"].tolist() == [0, 1]
    assert out_eps["episode_id"].tolist() == [m["episode_id"] for m in manifest["episodes"]]
    # every column of the episodes table that does not say where the episode is, ours included
    ours = [c for c in src_eps.columns if not c.startswith(("data/", "videos/", "meta/", "stats/", "dataset_"))]
    assert {"episode_id", "outcome", "interventions", "operator", "tasks"} <= set(ours)
    for new, old in enumerate(kept):
        for c in ours:
            assert _plain(out_eps.loc[new, c]) == _plain(src_eps.loc[old, c]), c

    src_rows, out_rows = read_frames(src), read_frames(out)
    assert out_rows["index"].tolist() == list(range(len(out_rows)))
    src_tasks = pq.read_table(src / "meta/tasks.parquet").to_pandas()
    out_tasks = pq.read_table(out / "meta/tasks.parquet").to_pandas()
    text = {"src": dict(zip(src_tasks["task_index"], src_tasks.index, strict=True)),
            "out": dict(zip(out_tasks["task_index"], out_tasks.index, strict=True))}
    assert sorted(text["out"].values()) == ["task 0", "task 2"]
    for new, old in enumerate(kept):
        a, b = src_rows[src_rows["episode_index"] == old], out_rows[out_rows["episode_index"] == new]
        assert len(a) == len(b) == int(src_eps.loc[old, "length"])
        for c in src_rows.columns:
            if c not in POSITIONAL:
                np.testing.assert_array_equal(stack(b[c]), stack(a[c]), err_msg=c)
        assert [text["out"][t] for t in b["task_index"]] == [text["src"][t] for t in a["task_index"]]
        # remuxed: the episode's packets byte for byte, at the same relative times
        before = _packets(*_video_span(src, src_eps.loc[old].to_dict()))
        after = _packets(*_video_span(out, out_eps.loc[new].to_dict()))
        assert len(after) == len(a) and after == before

    info = json.loads((out / "meta/info.json").read_text())
    assert (info["total_episodes"], info["total_frames"], info["total_tasks"]) == (2, len(out_rows), 2)
    prov = info["materialized_from"]
    assert prov["manifest"] == str(made["manifest"].resolve()) and prov["fingerprint"] == manifest["fingerprint"]
    assert prov["dataset"] == os.path.abspath(src) and prov["source_episodes"] == kept
    code, said, _ = run_cli(capsys, "lineage", "--registry", str(made["root"] / "reg.json"), "which", str(out))
    assert code == 0 and str(made["manifest"].resolve()) in said


def test_a_source_of_layout_1_gives_a_dataset_of_the_current_layout(made: dict[str, Path], tmp_path: Path) -> None:
    """Training reads the materialized dataset, so the leader's reading is never an observation
    there: from a layout-1 copy of the source, the same dataset as from the source itself."""
    old = layout_1_copy(made["ds"], tmp_path / "old")
    manifest = tmp_path / "m02.json"
    assert cli_main(["manifest", "create", str(old), "--out", str(manifest), "--filter", "episode_index!=1"]) == 0
    assert cli_main(["manifest", "materialize", str(manifest), str(tmp_path / "out")]) == 0
    out, want = tmp_path / "out", made["remuxed"]
    info, info_want = (json.loads((d / "meta/info.json").read_text()) for d in (out, want))
    assert info[SCHEMA_KEY] == SCHEMA_VERSION and info["features"] == info_want["features"]
    assert list(info["features"]) == list(info_want["features"])
    assert json.loads((out / "meta/stats.json").read_text()) == json.loads((want / "meta/stats.json").read_text())
    assert read_frames(out).columns.tolist() == read_frames(want).columns.tolist()
    for c in read_frames(want).columns:
        np.testing.assert_array_equal(stack(read_frames(out)[c]), stack(read_frames(want)[c]), err_msg=c)
    assert read_episodes(out).columns.tolist() == read_episodes(want).columns.tolist()
    assert problems(out) == []


def test_stats_are_recomputed_over_the_kept_frames(made: dict[str, Path]) -> None:
    out = made["remuxed"]
    rows = read_frames(out)
    stats = json.loads((out / "meta/stats.json").read_text())
    for key in ("action", "observation.state", "index", "episode_index"):
        v = stack(rows[key]).astype(np.float64).reshape(len(rows), -1)
        s = {k: np.asarray(x) for k, x in stats[key].items()}
        np.testing.assert_allclose(s["min"], v.min(0))
        np.testing.assert_allclose(s["max"], v.max(0))
        np.testing.assert_allclose(s["mean"], v.mean(0), rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(s["std"], v.std(0), rtol=1e-9, atol=1e-9)
        assert s["count"].tolist() == [len(rows)]
        # quantiles as LeRobot aggregates them: the count-weighted mean of the per-episode ones
        per = [v[(rows["episode_index"] == e).to_numpy()] for e in (0, 1)]
        for name, q in (("q01", 0.01), ("q50", 0.5), ("q99", 0.99)):
            want = sum(len(p) * np.quantile(p, q, axis=0) for p in per) / len(rows)
            np.testing.assert_allclose(s[name], want, rtol=1e-9, atol=1e-9)
    eps = read_episodes(out)
    assert eps["stats/index/min"].map(lambda x: x[0]).tolist() == eps["dataset_from_index"].tolist()
    assert eps["stats/episode_index/max"].map(lambda x: x[0]).tolist() == [0, 1]


def test_sample_weights_keep_their_ratios(made: dict[str, Path]) -> None:
    src = pq.read_table(made["ds"] / "meta/sample_weights.parquet").to_pandas().set_index("episode_index")
    out = pq.read_table(made["remuxed"] / "meta/sample_weights.parquet")
    assert out.schema.metadata == pq.read_schema(made["ds"] / "meta/sample_weights.parquet").metadata
    out_df = out.to_pandas()
    assert out_df["episode_index"].tolist() == [0, 1]
    assert out_df["episode_id"].tolist() == src.loc[[0, 2], "episode_id"].tolist()
    w = src.loc[[0, 2], "weight"].to_numpy()
    np.testing.assert_allclose(out_df["weight"].to_numpy(), w / w.sum())


def test_resolution_reencodes_once_at_that_size(made: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    out = made["small"]
    assert problems(out) == [] and run_cli(capsys, "doctor", str(out))[0] == 0
    info = json.loads((out / "meta/info.json").read_text())
    feature = info["features"][VIDEO]
    assert feature["shape"] == [96, 128, 3] and feature["info"]["video.codec"] == "av1"
    assert info["materialized_from"]["resolution"] == "128x96"
    eps = read_episodes(out)
    for row in eps.to_dict("records"):
        path, lo, hi = _video_span(out, row)
        with av.open(str(path)) as c:
            s = c.streams.video[0]
            assert s.time_base is not None
            frames = [f for f in c.decode(s) if lo - 1e-6 <= float(Fraction(f.pts) * s.time_base) < hi - 1e-6]
        assert len(frames) == row["length"]
        assert {(f.width, f.height) for f in frames} == {(128, 96)}
        assert all(f.to_ndarray(format="rgb24").std() > 1 for f in frames)  # a picture, not a blank
        assert np.asarray(_plain(row[f"stats/{VIDEO}/mean"])).shape == (3, 1, 1)
    np.testing.assert_array_equal(stack(read_frames(out)["action"]), stack(read_frames(made["remuxed"])["action"]))


def test_materialize_from_a_renumbered_dataset(made: dict[str, Path], tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    edited = tmp_path / "edited"
    shutil.copytree(made["ds"], edited)
    drop_episode(edited, 1, renumber=True)  # episode 2 is now 1; its video span is where it was
    code, out, _ = run_cli(capsys, "manifest", "episodes", str(made["manifest"]), "--dataset", str(edited))
    assert (code, out) == (0, "--dataset.episodes='[0, 1]'\n")
    again = tmp_path / "again"
    code, _, _ = run_cli(capsys, "manifest", "materialize", str(made["manifest"]), str(again), "--dataset", str(edited))
    assert code == 0
    for new in (0, 1):
        a = _packets(*_video_span(made["remuxed"], read_episodes(made["remuxed"]).loc[new].to_dict()))
        b = _packets(*_video_span(again, read_episodes(again).loc[new].to_dict()))
        assert a == b
    np.testing.assert_array_equal(stack(read_frames(again)["action"]), stack(read_frames(made["remuxed"])["action"]))


def test_an_existing_out_is_refused_and_nothing_is_written(made: dict[str, Path], tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    out.mkdir()
    code, _, err = run_cli(capsys, "manifest", "materialize", str(made["manifest"]), str(out))
    assert code == 2 and "output already exists" in err
    assert list(out.iterdir()) == [] and sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    code, _, err = run_cli(capsys, "manifest", "materialize", str(made["manifest"]), str(tmp_path / "x"),
                        "--resolution", "127x96")
    assert code == 2 and "bad resolution" in err and not (tmp_path / "x").exists()


def test_a_crash_leaves_no_dataset(made: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(ROOT), commit.FAULT_AT: "2"}  # killed after the first video is staged
    argv = [sys.executable, "-m", "teleop_flywheel.cli", "manifest", "materialize", str(made["manifest"]), str(out)]
    killed = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert killed.returncode == -9, killed.stderr
    assert not out.exists() and commit.staging_path(out).is_dir()
    env.pop(commit.FAULT_AT)
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert not commit.staging_path(out).exists() and problems(out) == []
    assert read_frames(out).equals(read_frames(made["remuxed"]))


@NEEDS_LEROBOT
@pytest.mark.parametrize("form", ["remuxed", "small"])
def test_lerobot_loads_every_frame(made: dict[str, Path], form: str) -> None:
    from lerobot.datasets.lerobot_dataset import LeRobotDataset as LeRobot  # noqa: PLC0415

    ds = LeRobot("local/materialized", root=made[form], video_backend="pyav")
    rows = read_frames(made[form])
    assert ds.num_episodes == 2 and len(ds) == len(rows)
    height, width = (192, 256) if form == "remuxed" else (96, 128)
    for i in range(len(ds)):
        item = ds[i]
        assert tuple(item[VIDEO].shape) == (3, height, width)
        assert int(item["episode_index"]) == int(rows["episode_index"][i])
        np.testing.assert_array_equal(item["action"].numpy(), np.asarray(rows["action"][i]))
