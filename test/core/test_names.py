"""`core/names.py` and `core.files.inside`: whatever a name's pattern lets through is one path
component that stays in its folder; everything else is refused (hypothesis: any Unicode text)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from teleop_flywheel.core.errors import OutsideRootError, UnsafeNameError
from teleop_flywheel.core.files import inside
from teleop_flywheel.core.names import (
    IDENTIFIER_PATTERN,
    check_identifier,
    check_text,
    identifier_problem,
    text_problem,
)

NAMES = st.text(max_size=40) | st.text(alphabet="./\\\x00\n\uff0f\u2024\u2215ab", max_size=12)


@settings(max_examples=400, deadline=None)
@given(NAMES)
def test_a_name_the_patterns_accept_is_one_component_inside_its_folder(name: str) -> None:
    root = Path("/srv/dataset/work")
    for problem in (identifier_problem, text_problem):
        if name and problem(name) is None:
            assert Path(name).name == name and name not in (".", "..")
            assert inside(root, f"{name}.mp4").parent == root
    # the recorder's parameter regex says the same as the engine's check
    assert (re.fullmatch(IDENTIFIER_PATTERN, name) is not None) == (bool(name) and identifier_problem(name) is None)


@pytest.mark.parametrize("name", ["../../../../tmp/x/ESCAPED", "a/b", "..", "/etc/passwd", "a\x00b", "a\x1b[2J",
                                  "a" * 5000, "..\uff0f..", "\u2024\u2024", "a\\b"])
def test_hostile_names_are_refused_naming_the_field(name: str) -> None:
    with pytest.raises(UnsafeNameError, match=r"^camera .* is not a safe name"):
        check_identifier("camera", name)
    with pytest.raises(UnsafeNameError, match=r"^task "):
        check_text("task", name)


def test_inside_refuses_what_resolves_outside(tmp_path: Path) -> None:
    (tmp_path / "root").mkdir()
    (tmp_path / "root" / "link").symlink_to(tmp_path)
    assert inside(tmp_path / "root", "cam.mp4") == (tmp_path / "root" / "cam.mp4").resolve()
    for rel in ("../x.mp4", "/tmp/x.mp4", "link/x.mp4", "a/../../x"):
        with pytest.raises(OutsideRootError, match="outside"):
            inside(tmp_path / "root", rel)


def test_inside_by_name_keeps_links_into_a_cache(tmp_path: Path) -> None:
    """A downloaded dataset's files may be links into a cache (a Hugging Face snapshot): read by
    name they are inside; a name that climbs out is not."""
    blobs, snap = tmp_path / "blobs", tmp_path / "snapshots" / "rev"
    blobs.mkdir()
    (snap / "data").mkdir(parents=True)
    (blobs / "abc").write_text("x")
    (snap / "data" / "file.parquet").symlink_to(blobs / "abc")
    assert inside(snap, "data/file.parquet", follow_symlinks=False) == snap.absolute() / "data/file.parquet"
    with pytest.raises(OutsideRootError):
        inside(snap, "data/file.parquet")  # resolved, it is in the blobs
    with pytest.raises(OutsideRootError):
        inside(snap, "../../blobs/abc", follow_symlinks=False)
