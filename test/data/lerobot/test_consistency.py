"""A dataset's consistency check reads what it checks, and before an append only what changed since
the last convert's commit sealed it; its repairs still rebuild what they need from the whole episodes table."""
from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from teleop_flywheel.data.convert import converter as conv
from teleop_flywheel.data.errors import InconsistentDatasetError
from teleop_flywheel.data.lerobot import commit, consistency, v3_layout
from teleop_flywheel.data.lerobot.consistency import problems, repair
from teleop_flywheel.testing.synthetic_session import SessionSpec, write_session


def test_a_lost_stats_json_is_rebuilt_from_every_episode_row(tmp_path: Path) -> None:
    bags = [write_session(tmp_path / f"ep{i}", SessionSpec(seed=90 + i, session_time_s=60.0 * i, width=192,
                                                           height=144, duration_s=2.5)).bag for i in range(2)]
    ds = tmp_path / "ds"
    conv.convert(bags, ds, codec="h264", workers=1, progress=False)
    before = (ds / v3_layout.STATS_PATH).read_text()
    (ds / v3_layout.STATS_PATH).unlink()  # this version's name only: the file is the previous version's too
    assert [p.detail for p in problems(ds)] == ["meta/stats.json missing or unreadable"]
    done, left = repair(ds)
    assert len(done) == 1 and left == []
    assert (ds / v3_layout.STATS_PATH).read_text() == before


def _bags(root: Path, n: int) -> list[Path]:
    return [write_session(root / f"ep{i}", SessionSpec(seed=90 + i, session_time_s=60.0 * i, width=192, height=144,
                                                       duration_s=2.5)).bag for i in range(n)]


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The files whose header the check reads from now on."""
    read: list[str] = []
    for name in ("_parquet_rows", "_video_frames"):
        real = getattr(consistency, name)

        def counted(path: Path, real: Callable[[Path], int] = real) -> int:
            read.append(path.name)
            return real(path)

        monkeypatch.setattr(consistency, name, counted)
    return read


def test_an_append_checks_nothing_again_that_the_last_convert_sealed(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The check before an append reads no header and no episodes table of a dataset as its last convert
    left it; `doctor` (the whole check) still reads them all."""
    bags = _bags(tmp_path, 3)
    ds = tmp_path / "ds"
    conv.convert(bags[:2], ds, codec="h264", workers=1, progress=False)
    read = _counting(monkeypatch)
    tables: list[Path] = []
    real_table = consistency._read_table
    monkeypatch.setattr(consistency, "_read_table",
                        lambda root, *a, **k: tables.append(root) or real_table(root, *a, **k))
    res = conv.convert(bags[2:], ds, codec="h264", workers=1, progress=False)
    assert sum(len(v) for v in res.converted.values()) == 1
    assert read == [] and tables == []
    assert problems(ds) == [] and sorted(set(read)) == ["file-000.mp4", "file-000.parquet", "file-001.mp4",
                                                         "file-001.parquet"]


def test_a_damaged_file_an_append_did_not_write_is_still_caught(tmp_path: Path) -> None:
    """A data file of an earlier append cut short: the next convert refuses the dataset and doctor names
    the file. An mp4 header overwritten in place with its size and mtime kept (what the seal cannot see):
    doctor, which reads every header, names it."""
    bags = _bags(tmp_path, 3)
    ds = tmp_path / "ds"
    conv.convert(bags[:1], ds, codec="h264", workers=1, progress=False)
    conv.convert(bags[1:2], ds, codec="h264", workers=1, progress=False)
    assert consistency.sealed(ds)
    video = next((ds / "videos").rglob("file-000.mp4"))
    st = video.stat()
    with open(video, "r+b") as f:  # in place: every version holding the file (hard links) sees it
        f.write(b"\0" * 4096)
    os.utime(video, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert consistency.sealed(ds)
    assert any("file-000.mp4: unreadable" in p.detail for p in problems(ds))
    data = ds / "data/chunk-000/file-000.parquet"
    with open(data, "r+b") as f:
        f.truncate(data.stat().st_size - 100)
    assert not consistency.sealed(ds)
    with pytest.raises(InconsistentDatasetError, match="file-000"):
        conv.convert(bags[2:], ds, codec="h264", workers=1, progress=False)
    assert any("file-000.parquet: unreadable" in p.detail for p in problems(ds))


@pytest.mark.parametrize("exchange", [True, False], ids=["exchange", "no_exchange"])
def test_the_seal_lists_a_closed_chunk_not_its_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     exchange: bool) -> None:
    """One file a chunk: every append closes a chunk the commit carries whole from then on
    (`commit/`): the current version's own directory where the filesystem has RENAME_EXCHANGE, a
    symlink to the shared store where not. The seal names each such chunk by one stat of its directory
    or, for a store directory its commit makes, its file names (no stat of each file: O(files) per
    append before), so the next append still checks nothing again; a file added to or removed from a
    closed chunk breaks the seal and the convert refuses the dataset."""
    if not exchange:
        monkeypatch.setenv(commit.NO_EXCHANGE, "1")
    monkeypatch.setattr(v3_layout, "DEFAULT_CHUNK_SIZE", 1)
    bags = _bags(tmp_path, 4)
    ds = tmp_path / "ds"
    for bag in bags[:2]:
        conv.convert([bag], ds, codec="h264", workers=1, progress=False)
    assert (ds / "data/chunk-000").is_symlink() is not exchange and consistency.sealed(ds)
    doc = json.loads((ds / consistency.SEAL_PATH).read_text())
    assert "data/chunk-000/" in doc["files"] and "data/chunk-000/file-000.parquet" not in doc["files"]
    read = _counting(monkeypatch)
    conv.convert(bags[2:3], ds, codec="h264", workers=1, progress=False)
    assert read == [] and consistency.sealed(ds)
    files = json.loads((ds / consistency.SEAL_PATH).read_text())["files"]
    # chunk-000 carried before: one stat; chunk-001 closed by this commit: the stat of the directory the
    # current version takes with it, or the names of the store directory made for it
    assert files["data/chunk-000/"][0] != consistency.NAMES
    assert (files["data/chunk-001/"][0] == consistency.NAMES) is not exchange
    copied_in = ds / "data/chunk-001/file-001.parquet"
    copied_in.write_bytes(b"")
    assert not consistency.sealed(ds)  # a name more
    copied_in.unlink()
    assert consistency.sealed(ds) is not exchange  # the same names again; the directory's mtime moved on
    (ds / "data/chunk-000/file-000.parquet").unlink()
    assert not consistency.sealed(ds)
    with pytest.raises(InconsistentDatasetError, match="chunk-000/file-000"):
        conv.convert(bags[3:], ds, codec="h264", workers=1, progress=False)
