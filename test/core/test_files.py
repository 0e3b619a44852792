"""Exclusive creation and atomic replacement: no overwrite, no followed symlink, no half file."""
from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from teleop_flywheel.core.errors import FileExistsRefused
from teleop_flywheel.core.files import create_exclusive, replace_atomic


def test_create_exclusive_never_overwrites_or_follows_a_symlink(tmp_path: Path) -> None:
    target = tmp_path / "manifest.json"
    create_exclusive(target, "first")
    with pytest.raises(FileExistsRefused, match="never overwritten"):
        create_exclusive(target, "second")
    assert target.read_text() == "first"
    victim = tmp_path / "victim"
    victim.write_text("precious")
    planted = tmp_path / "planted.json"
    planted.symlink_to(victim)
    with pytest.raises(FileExistsRefused):
        create_exclusive(planted, "attack")
    assert victim.read_text() == "precious"


def test_replace_atomic_uses_no_predictable_temp_name(tmp_path: Path) -> None:
    target = tmp_path / "info.json"
    victim = tmp_path / "victim"
    victim.write_text("precious")
    (tmp_path / "info.json.tmp").symlink_to(victim)  # what the old writers' fixed temp name followed
    replace_atomic(target, "v1")
    replace_atomic(target, "v2")
    assert target.read_text() == "v2" and victim.read_text() == "precious"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["info.json", "info.json.tmp", "victim"]


def test_replace_atomic_leaves_the_old_file_when_writing_fails(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "stats.json"
    replace_atomic(target, "old")

    def disk_full(_fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", disk_full)
    with pytest.raises(OSError, match="No space"):
        replace_atomic(target, "new")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["stats.json"]  # no temp file left behind
