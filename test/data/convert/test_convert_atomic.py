"""`convert` is atomic: kill -9 at every write step, a full disk, and `doctor` for what older runs left.

The fault-injection hook (`TELEOP_FLYWHEEL_FAULT_AT=N`) kills a real `teleop-flywheel convert`
process with SIGKILL at its N-th write step, for every N until a run completes. After each kill,
what a reader of the dataset gets is byte-identical to before (the pointer not moved yet) or the
whole append, and only what is derived from it (the validation record, card and sample weights,
written after the append: `data/convert/refresh.py`) may be behind; `doctor` reports what the crash
left beside it, and the next run removes that and leaves exactly the dataset a run without the
crash makes. A full disk (a small tmpfs) stops the run with one line and leaves the dataset as it
was. `test/data/lerobot/test_commit.py` reads the dataset while such kills happen.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from support.tmpfs import mount_tmpfs, unmount
from support.zygote import Child, Zygote

from teleop_flywheel.cli import main as cli_main
from teleop_flywheel.core.files import is_replace_temp
from teleop_flywheel.data.convert import converter as conv
from teleop_flywheel.data.lerobot import commit
from teleop_flywheel.data.lerobot.consistency import problems
from teleop_flywheel.data.validate.dataset_record import INDEX_PATH, RECORD_DIR, read_verdicts
from teleop_flywheel.testing.synthetic_session import SessionSpec, write_session

SPEC = dict(duration_s=2.5, width=256, height=192)
DERIVED = ("README.md", "meta/sample_weights.parquet")  # refreshed after an append, with the validation record


def without_derived(c: dict[str, object]) -> dict[str, object]:
    """What a reader gets but what is refreshed after an append, and the temp file of a refresh a kill cut."""
    return {k: v for k, v in c.items() if k not in DERIVED and not k.startswith(f"{RECORD_DIR}/")
            and not is_replace_temp(Path(k).name)}


def tree(root: Path) -> dict[str, str]:
    """relpath -> sha256 of every file a reader of `root` finds (through its pointer)."""
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def copy_dataset(src: Path, dst: Path) -> None:
    """A copy of a dataset with versions: its versions directory and a pointer to the same version."""
    shutil.copytree(commit.versions_path(src), commit.versions_path(dst), symlinks=True)
    os.symlink(f"{commit.versions_path(dst).name}/{commit.current(src).name}", dst)  # type: ignore[union-attr]


def content(root: Path) -> dict[str, object]:
    """What a reader gets: file list, every parquet as rows, the JSON files, every video's bytes (an
    encode of the same frames gives the same bytes: test_video.py)."""
    out: dict[str, object] = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if p.suffix == ".parquet":
            out[rel] = pq.read_table(p).to_pylist()
        elif p.suffix == ".json":
            out[rel] = json.loads(p.read_text())
        elif p.suffix == ".mp4":
            out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("atomic")
    a = write_session(root / "bags" / "a", SessionSpec(seed=31, **SPEC)).bag
    b = write_session(root / "new" / "b", SessionSpec(seed=32, **SPEC)).bag
    base = root / "base"
    conv.convert([a], base, codec="h264", workers=1, progress=False)
    ref = root / "ref"
    copy_dataset(base, ref)
    conv.convert([b], ref, codec="h264", workers=1, progress=False)
    return {"a": a, "b": b, "base": base, "ref": ref, "root": root}


@pytest.fixture(scope="module")
def zygote() -> Iterator[Zygote]:
    with Zygote() as z:
        yield z


def _convert_process(zygote: Zygote, bag: Path, out: Path, env_extra: dict[str, str]) -> Child:
    """A real `convert` process (forked from a zygote that imported the data stack once)."""
    return zygote.start(["convert", str(bag), "--dataset", str(out), "--codec", "h264", "--workers", "1"],
                        env_extra, out.with_name(out.name + ".stderr"))


@pytest.mark.timeout(600)
def test_kill_9_at_every_write_step(setup: dict[str, Path], zygote: Zygote, tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    base_tree, ref_content = tree(setup["base"]), content(setup["ref"])
    records = [read_verdicts(setup["base"]), read_verdicts(setup["ref"])]
    log = tmp_path / "steps.log"
    copy_dataset(setup["base"], tmp_path / "counted")
    counted = _convert_process(zygote, setup["b"], tmp_path / "counted", {commit.FAULT_LOG: str(log)})
    assert counted.wait(120) == 0, counted.stderr()
    steps = log.read_text().splitlines()
    assert content(tmp_path / "counted") == ref_content
    assert len(steps) > 12 and any(s.endswith("published") for s in steps) and any(s.endswith("meta/info.json")
                                                                                   for s in steps)
    runs = {}
    for n in range(1, len(steps) + 1):  # a real process killed at each step, three at a time (2 cores)
        ds = tmp_path / f"ds{n}"
        copy_dataset(setup["base"], ds)
        runs[n] = (ds, _convert_process(zygote, setup["b"], ds, {commit.FAULT_AT: str(n)}))
        if len(runs) % 3 == 0 or n == len(steps):
            for _ds, proc in runs.values():
                proc.wait(120)
    published_kills = 0
    for n, (ds, proc) in runs.items():
        assert proc.returncode == -9, (steps[n - 1], proc.returncode, proc.stderr())
        if tree(ds) == base_tree:  # killed before the pointer moved: the dataset is exactly as it was
            assert commit.snapshot(ds).name == commit.snapshot(setup["base"]).name, steps[n - 1]
        else:  # killed after it: the whole append (what is derived from it may be behind)
            published_kills += 1
            assert without_derived(content(ds)) == without_derived(ref_content), steps[n - 1]
            assert read_verdicts(ds) in records, steps[n - 1]  # the record: the old one or the new, whole
        leftover = commit.pending(ds)
        assert cli_main(["doctor", str(ds)]) == (1 if leftover else 0), steps[n - 1]
        assert ("interrupted" in capsys.readouterr().out) == bool(leftover)
        result = conv.convert([setup["b"]], ds, codec="h264", workers=1, progress=False)  # the next run
        assert bool(result.recovered) == bool(leftover), steps[n - 1]
        assert problems(ds) == [] and not os.path.lexists(commit.staging_path(ds))
        assert content(ds) == ref_content, f"after a kill at step {steps[n - 1]}"
    assert published_kills >= 4  # the pointer moved, then each refresh step


@pytest.mark.timeout(300)
def test_a_temp_file_a_kill_left_is_never_published(setup: dict[str, Path], zygote: Zygote, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 39: a convert killed after `replace_atomic` wrote `meta/validation/.record.json.XXXX.tmp` and
    before its rename left it in the published version; the next convert did not remove it, `doctor
    --repair` called the dataset consistent and every later commit hard-linked it forward. Now doctor
    names it, `--repair` removes it, and the next commit neither carries nor keeps it."""
    log = tmp_path / "steps.log"
    copy_dataset(setup["base"], tmp_path / "counted")
    counted = _convert_process(zygote, setup["b"], tmp_path / "counted", {commit.FAULT_LOG: str(log)})
    assert counted.wait(120) == 0
    steps = log.read_text().splitlines()
    at = next(int(s.split()[0]) for s in steps if s.endswith(f"temp {INDEX_PATH}"))
    ds = tmp_path / "ds"
    copy_dataset(setup["base"], ds)
    killed = _convert_process(zygote, setup["b"], ds, {commit.FAULT_AT: str(at)})
    assert killed.wait(120) == -9
    version = commit.current(ds)
    assert version is not None
    (temp,) = [p for p in (version / RECORD_DIR).iterdir() if is_replace_temp(p.name)]  # what the kill left
    ds2 = tmp_path / "ds2"
    copy_dataset(ds, ds2)
    assert cli_main(["doctor", str(ds)]) == 1
    out = capsys.readouterr().out
    assert temp.name in out and "interrupted" in out and "consistent" not in out, out
    assert cli_main(["doctor", str(ds), "--repair"]) == 0
    out = capsys.readouterr().out
    assert out.rstrip().endswith("consistent") and temp.name in out, out
    assert not [p for p in commit.snapshot(ds).rglob("*") if is_replace_temp(p.name)]
    # the next commit (a new episode) on the copy: recovered first, nothing linked forward
    c = write_session(tmp_path / "new" / "c", SessionSpec(seed=33, **SPEC)).bag
    result = conv.convert([c], ds2, codec="h264", workers=1, progress=False)
    assert result.recovered and commit.current(ds2) != commit.current(ds)
    assert not [p for p in commit.snapshot(ds2).rglob("*") if is_replace_temp(p.name)]
    assert problems(ds2) == [] and cli_main(["doctor", str(ds2)]) == 0


def test_full_disk_leaves_the_dataset_as_it_was(setup: dict[str, Path], tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    base_kb = sum(p.stat().st_size for p in setup["base"].rglob("*") if p.is_file()) // 1024
    ref_content = content(setup["ref"])
    outcomes = []
    for extra_kb in (8, 40, 120, 400):
        disk = tmp_path / f"disk{extra_kb}"
        mount_tmpfs(disk, f"{base_kb + 64 + extra_kb}k")
        try:
            ds = disk / "ds"
            copy_dataset(setup["base"], ds)
            before = tree(ds)
            code = cli_main(["convert", str(setup["b"]), "--dataset", str(ds), "--codec", "h264", "--workers", "1"])
            err = capsys.readouterr().err
            if code == 0:
                outcomes.append("fits")
                assert content(ds) == ref_content
                continue
            outcomes.append("full")
            assert code == 1 and "disk full" in err and "the dataset was not changed" in err, err
            assert err.count("disk full") == 1 and "Traceback" not in err
            assert tree(ds) == before and problems(ds) == []
        finally:
            unmount(disk)
    assert "full" in outcomes


def test_convert_refuses_an_inconsistent_dataset_and_doctor_repairs_it(setup: dict[str, Path], tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    ds = tmp_path / "ds"
    shutil.copytree(setup["base"], ds)
    data = next((ds / "data").rglob("*.parquet"))
    shutil.copy(data, data.with_name("file-007.parquet"))  # an orphan an older converter's crash left
    info = json.loads((ds / "meta/info.json").read_text())
    info["total_episodes"] = 4  # info.json against the table
    (ds / "meta/info.json").write_text(json.dumps(info))
    assert cli_main(["convert", str(setup["b"]), "--dataset", str(ds), "--codec", "h264", "--workers", "1"]) == 2
    err = capsys.readouterr().err
    assert "inconsistent" in err and f"teleop-flywheel doctor {ds}" in err
    assert cli_main(["doctor", str(ds)]) == 1
    out = capsys.readouterr().out
    assert "file-007.parquet: no episode refers to it" in out and "total_episodes 4" in out
    assert cli_main(["doctor", str(ds), "--repair"]) == 0
    out = capsys.readouterr().out
    assert "consistent" in out and (tmp_path / "ds.orphans" / "data/chunk-000/file-007.parquet").is_file()
    assert cli_main(["convert", str(setup["b"]), "--dataset", str(ds), "--codec", "h264", "--workers", "1"]) == 0
    assert content(ds) == content(setup["ref"])


def test_doctor_names_what_cannot_be_repaired(setup: dict[str, Path], tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    ds = tmp_path / "ds"
    shutil.copytree(setup["base"], ds)
    data = next((ds / "data").rglob("*.parquet"))
    with open(data, "r+b") as f:  # a data parquet without its footer
        f.truncate(data.stat().st_size - 100)
    assert cli_main(["doctor", str(ds), "--repair", "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert not doc["consistent"] and doc["problems"][0]["repair"] is None
    assert "data/chunk-000/file-000.parquet: unreadable" in doc["problems"][0]["problem"]
    assert cli_main(["doctor", str(tmp_path / "nothing")]) == 2


def test_one_convert_at_a_time(setup: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ds = tmp_path / "ds"
    with commit.locked_dataset(ds):
        assert cli_main(["convert", str(setup["b"]), "--dataset", str(ds), "--codec", "h264", "--workers", "1"]) == 2
    assert "in use by another process" in capsys.readouterr().err
    assert not ds.exists()


def test_non_utf8_bag_name_converts(setup: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    odd = Path(os.fsdecode(bytes(tmp_path) + b"/caf\xe9_bag"))
    shutil.copytree(setup["b"], odd)
    assert cli_main(["convert", str(odd), "--dataset", str(tmp_path / "ds"), "--codec", "h264", "--workers", "1"]) == 0
    row = pq.read_table(next((tmp_path / "ds/meta/episodes").rglob("*.parquet"))).to_pylist()[0]
    assert row["source_bag"] == "caf\\xe9_bag"
    assert np.isfinite(row["recorded_wall_ns"])
