"""A dataset's validation record in pieces (`data/validate/dataset_record.py`): a write killed at any of
its steps leaves the old record or the new one, never half of one, and the next write removes the pieces
the kill left; a record whose index names a piece outside the record's folder is refused."""
from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path

import pytest

from teleop_flywheel.core.files import is_replace_temp
from teleop_flywheel.data.convert.refresh import update_record
from teleop_flywheel.data.errors import DatasetError
from teleop_flywheel.data.lerobot import commit
from teleop_flywheel.data.lerobot.commit import primitives
from teleop_flywheel.data.validate import dataset_record
from teleop_flywheel.data.validate.dataset_record import INDEX_PATH, RECORD_DIR, Record
from teleop_flywheel.data.validate.reasons import Reason
from teleop_flywheel.data.validate.validator import EpisodeReport


def _report(i: int, *codes: str) -> EpisodeReport:
    return EpisodeReport(f"bags/x{i}", f"x{i}", f"{i:064x}", [Reason(c, "") for c in codes])


def _files(root: Path) -> dict[str, bytes]:
    """The record's files; not the temp file of a replace a kill cut (`commit.recover` removes it before a
    convert or ingest writes: test_convert_atomic.py)."""
    return {p.name: p.read_bytes() for p in sorted((root / RECORD_DIR).iterdir()) if not is_replace_temp(p.name)}


def _killed_at(root: Path, reports: list[EpisodeReport], step: int) -> int:
    """Merge `reports` into the record at `root` in a forked process killed (SIGKILL) at its `step`-th
    write step (`commit.fault`); its wait status."""
    pid = os.fork()
    if pid == 0:  # the child: nothing of pytest's runs here, it leaves by _exit or by the kill
        try:
            primitives._steps[0] = 0
            os.environ[commit.FAULT_AT] = str(step)
            update_record(root, reports)
        finally:
            os._exit(0)
    return os.waitpid(pid, 0)[1]


def test_a_write_killed_at_any_step_leaves_the_old_record_or_the_new(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dataset_record, "PIECE_LINES", 2)
    base = tmp_path / "base"
    update_record(base, [_report(0, "FRAME_GAP"), _report(1), _report(2)])  # a closed piece, a verdict open
    # x0 replaced in the closed piece (rewritten under a new name), x3 closes a second piece
    merge = [_report(0, "DEAD_AIR"), _report(3)]
    ref = tmp_path / "ref"
    shutil.copytree(base, ref)
    update_record(ref, merge)
    states = [(r.verdicts(), r.summary) for r in (Record.read(base), Record.read(ref))]
    assert states[0] != states[1] and len(Record.read(ref).pieces) == 2
    step = 1
    while True:
        ds = tmp_path / f"killed{step}"
        shutil.copytree(base, ds)
        status = _killed_at(ds, merge, step)
        if os.WIFEXITED(status):
            break  # no step left to kill at: the write completed
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
        record = Record.read(ds)
        assert (record.verdicts(), record.summary) in states, step  # the old record or the new, whole
        update_record(ds, merge)  # the next write: what the kill left is gone
        assert _files(ds) == _files(ref), step
        assert set(_files(ds)) == {"record.json", *(p.file for p in Record.read(ds).pieces)}, step
        step += 1
    assert _files(ds) == _files(ref)
    assert step == 4  # the rewritten piece, the closed piece and the index: each killed after its write


def test_an_index_naming_a_piece_outside_the_record_is_refused(tmp_path: Path) -> None:
    update_record(tmp_path, [_report(0)])
    index = tmp_path / INDEX_PATH
    text = index.read_text()
    forged = text.replace('"pieces": []', '"pieces": ' + json.dumps([{"file": "../../info.json", "keys": ["a"]}]))
    assert forged != text
    index.write_text(forged)
    with pytest.raises(DatasetError, match="a piece named '../../info.json'"):
        Record.read(tmp_path)
