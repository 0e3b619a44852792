"""An export's episodes in worker processes (or Ray tasks) give the same bytes as one process; an episode that
fails in a worker stops the export with its own one-line error and writes nothing.

Oracles: the files' bytes compared with Python's own reads, and h5py reading each file as ACT does.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from support import aloha_data as ad
from support.cli import run_cli
from support.ray_driver import run_driver

from teleop_flywheel.cli import main as cli_main

h5py = pytest.importorskip("h5py", reason="h5py is the hdf5 extra: pip install '.[hdf5]'")


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return ad.converted(tmp_path_factory.mktemp("parallel"), episodes=3)


def _files(root: Path) -> dict[str, bytes]:
    """Every file below `root` (relative path → bytes): an ALOHA file per episode, or a bag directory."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("jpeg", [None, "50"])
def test_two_workers_write_the_bytes_one_writes(source: Path, tmp_path: Path, jpeg: str | None,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    extra = ["--jpeg", jpeg] if jpeg else []
    ids = []
    for workers in ("1", "2"):
        code, out, err = run_cli(capsys, "export", str(source), "--to", "hdf5-aloha", str(tmp_path / workers),
                                 "--workers", workers, *extra)
        assert code == 0, err
        ids.append(out.split("lineage export ")[-1].strip())
    serial, parallel = _files(tmp_path / "1"), _files(tmp_path / "2")
    assert list(serial) == [f"episode_{k}.hdf5" for k in range(3)]
    assert parallel == serial  # byte for byte: episode N is file N whichever worker wrote it
    assert ids[0] == ids[1]  # the same content is the same export in lineage
    for k in range(3):  # and each file is its own episode, not a neighbour's
        with h5py.File(tmp_path / "2" / f"episode_{k}.hdf5", "r") as f:
            assert f.attrs["source_episode_index"] == k
            np.testing.assert_array_equal(f["/observations/qpos"][()][:, 0],
                                          np.deg2rad(ad.column(source, "observation.state", k)[:, 0].astype(float)))


def test_an_episode_failing_in_a_worker_is_one_line_and_nothing(source: Path, tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    ds = tmp_path / "ds"
    video = ad.truncated_video_copy(source, ds)
    table = ad.episodes_table(ds)
    assert json.loads((ds / "meta/info.json").read_text())["total_episodes"] == 3 and len(table) == 3
    code, _, err = run_cli(capsys, "export", str(ds), "--to", "hdf5-aloha", str(tmp_path / "out"), "--workers", "2")
    line = err.strip().splitlines()[-1]
    assert code == 1 and "unreadable video" in line and str(video) in line, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds"]  # no OUT, no stage left behind
    assert cli_main(["export", str(ds), "--to", "hdf5-aloha", str(tmp_path / "x"), "--workers", "0"]) == 2


@pytest.mark.timeout(300)
def test_ray_tasks_write_the_bytes_one_process_writes(source: Path, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """`--executor ray`: the episodes as tasks on a (single-node, local) Ray cluster, ALOHA files and bags."""
    codes = run_driver("""
        from teleop_flywheel.cli import main
        answer([main(["export", sys.argv[1], "--to", fmt, f"{sys.argv[2]}/{fmt}", "--executor", "ray",
                      "--jpeg", "50"]) for fmt in ("hdf5-aloha", "mcap")])
    """, str(source), str(tmp_path / "ray"), cwd=tmp_path)
    assert codes == [0, 0]
    for fmt in ("hdf5-aloha", "mcap"):
        code, _, err = run_cli(capsys, "export", str(source), "--to", fmt, str(tmp_path / "one" / fmt),
                               "--workers", "1", "--jpeg", "50")
        assert code == 0, err
        assert _files(tmp_path / "ray" / fmt) == _files(tmp_path / "one" / fmt), fmt
