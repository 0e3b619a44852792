"""An output appears whole or not at all, and never over anything."""
from __future__ import annotations

from pathlib import Path

import pytest

from teleop_flywheel.core.errors import UsageError
from teleop_flywheel.data.formats.common.staged_output import staged_output


def test_a_directory_appears_only_when_complete(tmp_path: Path) -> None:
    out = tmp_path / "export"
    with staged_output(out) as stage:
        (stage / "episode_0.hdf5").write_bytes(b"x")
        assert not out.exists()
    assert (out / "episode_0.hdf5").read_bytes() == b"x"
    assert [p.name for p in tmp_path.iterdir()] == ["export"]


def test_a_file_output_is_renamed_into_place(tmp_path: Path) -> None:
    out = tmp_path / "demos.hdf5"
    with staged_output(out, directory=False) as target:
        target.write_bytes(b"y")
    assert out.read_bytes() == b"y"
    assert [p.name for p in tmp_path.iterdir()] == ["demos.hdf5"]


def test_an_error_leaves_nothing(tmp_path: Path) -> None:
    out = tmp_path / "export"
    with pytest.raises(RuntimeError), staged_output(out) as stage:
        (stage / "half").write_bytes(b"z")
        raise RuntimeError("disk full")
    assert list(tmp_path.iterdir()) == []


def test_an_existing_output_is_refused_untouched(tmp_path: Path) -> None:
    out = tmp_path / "export"
    out.mkdir()
    (out / "keep").write_bytes(b"k")
    with pytest.raises(UsageError, match="already exists"), staged_output(out):
        pass
    assert (out / "keep").read_bytes() == b"k"
    assert [p.name for p in tmp_path.iterdir()] == ["export"]
