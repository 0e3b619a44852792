"""Commits publish versions by one rename of a pointer (`data/lerobot/commit/`): a reader sees the old
version or the new one, never a mix, even while the writer is killed -9 at every write step.

The readers run in their own processes and loop for the whole test: our `LeRobotDataset.open`, and
LeRobot's own `LeRobotDataset` (in an environment with LeRobot; skipped with the reason elsewhere)
given the version `commit.pinned(DATASET)` leases when it starts. Each read checks that info.json's
totals equal the episodes and rows it finds. (LeRobot given the pointer path itself opens it file by
file, so a commit during its start-up can give it one version's metadata and the next one's data:
seen once in three reads while writing this test; `commit/` says so.)

Leases: a version a reader has pinned is not collected however old it is; one nobody leases is, and
so is one whose reader was killed (the kernel drops its lock).
"""
from __future__ import annotations

import importlib.util
import json
import multiprocessing
import os
import shutil
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from teleop_flywheel.cli import main as cli_main
from teleop_flywheel.data.convert import converter as conv
from teleop_flywheel.data.errors import CommitError
from teleop_flywheel.data.lerobot import commit, v3_layout
from teleop_flywheel.data.lerobot.commit import primitives, versions
from teleop_flywheel.data.lerobot.consistency import problems
from teleop_flywheel.testing.synthetic_session import SessionSpec, write_session

ROOT = Path(__file__).resolve().parents[3]
SPEC = dict(duration_s=2.5, width=256, height=192)
HAVE_LEROBOT = importlib.util.find_spec("lerobot") is not None

READER = textwrap.dedent('''
    import json, sys
    from pathlib import Path
    root, stop, out, kind = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4]
    if kind == "lerobot":
        import logging
        logging.disable(logging.WARNING)
        from lerobot.datasets.lerobot_dataset import LeRobotDataset as Loader
        from teleop_flywheel.data.lerobot.commit import pinned
    else:
        from teleop_flywheel.data.lerobot import dataset as ours
    seen = {}
    while not stop.exists():
        try:
            if kind == "lerobot":
                with pinned(root) as version:
                    ds = Loader("local/ds", root=version, video_backend="pyav")
                    rows = ds.hf_dataset.with_format(None)["episode_index"]
                    found = (ds.meta.total_episodes, len(ds.meta.episodes), len(set(rows)),
                             ds.meta.total_frames, len(rows))
            else:
                ds = ours.LeRobotDataset.open(root)
                rows = ds.read_table(["episode_index"]).column("episode_index").to_pylist()
                found = (int(ds.info["total_episodes"]), len(ds.episodes), len(set(rows)),
                         int(ds.info["total_frames"]), len(rows))
        except Exception as exc:  # a read that fails is a finding too
            found = ("error", f"{type(exc).__name__}: {exc}")
        key = json.dumps(found)
        seen[key] = seen.get(key, 0) + 1
        out.with_suffix(".ready").touch()
    out.write_text(json.dumps(seen))
''')


def _reader(kind: str, ds: Path, tmp: Path) -> tuple[subprocess.Popen[bytes], Path, Path]:
    stop, out = tmp / f"stop-{kind}", tmp / f"seen-{kind}.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_DATASETS_CACHE": str(tmp / "hf-cache")}
    proc = subprocess.Popen([sys.executable, "-c", READER, str(ds), str(stop), str(out), kind], env=env)
    return proc, stop, out


def _converting(bag: Path, ds: Path, env: dict[str, str]) -> None:
    os.environ.update(env)
    primitives._steps[0] = 0  # counted from this process's start, as in a new one
    conv.convert([bag], ds, codec="h264", workers=1, progress=False)


def _convert(bag: Path, ds: Path, env: dict[str, str]) -> int | None:
    """A convert in a process of its own, forked (no second start-up: the test stays cheap); its exit code."""
    proc = multiprocessing.get_context("fork").Process(target=_converting, args=(bag, ds, env))
    proc.start()
    proc.join(120)
    return proc.exitcode


@pytest.fixture(scope="module")
def bags(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    root = tmp_path_factory.mktemp("readers")
    return [write_session(root / f"b{i}", SessionSpec(seed=40 + i, **SPEC)).bag for i in range(10)]


LEROBOT = pytest.mark.skipif(not HAVE_LEROBOT, reason="LeRobot (torch, ~8 GB) is not installed here; run in "
                                                     "/work/lrenv/venv for its loader")


def _started(reader: subprocess.Popen[bytes], out: Path) -> None:
    for _ in range(1200):  # LeRobot imports torch: up to a minute on a busy machine
        if out.with_suffix(".ready").exists() or reader.poll() is not None:
            return
        time.sleep(0.1)


def _read_after(reader: subprocess.Popen[bytes], out: Path) -> None:
    """Wait for a read that started after now (the second one to end from now)."""
    for _ in range(2):
        out.with_suffix(".ready").unlink(missing_ok=True)
        for _ in range(600):
            if out.with_suffix(".ready").exists() or reader.poll() is not None:
                break
            time.sleep(0.1)


def _seen(reader: subprocess.Popen[bytes], stop: Path, out: Path) -> tuple[dict[tuple[Any, ...], int], dict[Any, int]]:
    """Stop the reader: every read's (episodes in info.json, in the table, in the data, frames in
    info.json, in the data) and how often, and the reads where those disagree or that failed."""
    stop.touch()
    reader.wait(60)
    seen = {tuple(json.loads(k)): n for k, n in json.loads(out.read_text()).items()}
    return seen, {s: n for s, n in seen.items() if s[0] == "error" or not s[0] == s[1] == s[2] or s[3] != s[4]}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind", ["ours", pytest.param("lerobot", marks=LEROBOT)])
@pytest.mark.parametrize("chunks", [1000, 1], ids=["chunk_of_1000", "chunk_of_1"])
def test_readers_see_old_or_new_while_appends_are_killed(bags: list[Path], tmp_path: Path, kind: str, chunks: int,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """`chunk_of_1`: one file a chunk, so every append closes chunks the commit moves into the shared
    store (killed there too) and readers read the older ones through its symlinks."""
    monkeypatch.setattr(v3_layout, "DEFAULT_CHUNK_SIZE", chunks)
    ds = tmp_path / "ds"
    assert conv.convert([bags[0]], ds, codec="h264", workers=1, progress=False).converted
    log = tmp_path / "steps.log"
    probe = tmp_path / "probe"
    shutil.copytree(commit.versions_path(ds), commit.versions_path(probe), symlinks=True)
    os.symlink(f"{probe.name}{commit.VERSIONS_SUFFIX}/{commit.current(ds).name}", probe)  # type: ignore[union-attr]
    assert _convert(bags[1], probe, {commit.FAULT_LOG: str(log)}) == 0
    steps = log.read_text().splitlines()
    reader, stop, out = _reader(kind, ds, tmp_path)
    try:
        _started(reader, out)
        nxt, published = 1, 0
        for n in range(1, len(steps) + 1):  # the same append killed at each of its write steps
            before = json.loads((ds / "meta/info.json").read_text())["total_episodes"]
            assert _convert(bags[nxt], ds, {commit.FAULT_AT: str(n)}) == -9, steps[n - 1]
            if json.loads((ds / "meta/info.json").read_text())["total_episodes"] > before:
                published += 1
                nxt += 1
        assert _convert(bags[nxt], ds, {}) == 0
        _read_after(reader, out)
    finally:
        seen, broken = _seen(reader, stop, out)
    assert problems(ds) == [] and published >= 3
    if chunks == 1:  # every commit closed a chunk and took it from the version before (killed there too)
        assert not any((ds / "data" / f"chunk-{c:03d}").is_symlink() for c in range(nxt + 1))
        assert commit.upload_note(ds) is None
    assert sum(seen.values()) >= 5 and {s[0] for s in seen} >= {1, nxt + 1}, seen  # read before and after
    assert broken == {}, (broken, seen)


@pytest.mark.timeout(120)
@LEROBOT
def test_lerobot_given_a_pinned_version_reads_one_while_appends_commit(bags: list[Path], tmp_path: Path) -> None:
    """LeRobot's loader started in a loop, each time on the version `pinned` leases, while appends
    commit back to back: every read is one version whole."""
    ds = tmp_path / "ds"
    assert conv.convert([bags[0]], ds, codec="h264", workers=1, progress=False).converted
    reader, stop, out = _reader("lerobot", ds, tmp_path)
    try:
        _started(reader, out)
        for bag in bags[1:5]:
            assert conv.convert([bag], ds, codec="h264", workers=1, progress=False).converted
        _read_after(reader, out)
    finally:
        seen, broken = _seen(reader, stop, out)
    assert {s[0] for s in seen} >= {1, 5} and len(seen) >= 3, seen  # read before, during and after
    assert broken == {}, (broken, seen)


PINNER = textwrap.dedent('''
    import sys
    from teleop_flywheel.data.lerobot.commit import pinned
    with pinned(sys.argv[1]) as version:
        print(version, flush=True)
        sys.stdin.read()
''')


def test_a_leased_version_is_kept_until_its_reader_ends_or_dies(tmp_path: Path) -> None:
    ds = tmp_path / "ds"
    v0 = _commit(ds, {"meta/info.json": "0"})
    with commit.pinned(ds) as pinned_v0:
        assert pinned_v0 == v0 and commit.lease_path(v0).is_file()
        v1 = _commit(ds, {"meta/info.json": "1"})
        other = subprocess.Popen([sys.executable, "-c", PINNER, str(ds)], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(ROOT)})
        try:
            assert other.stdout is not None and other.stdout.readline().decode().strip() == str(v1)
            for n in range(2, 5):
                _commit(ds, {"meta/info.json": str(n)})
            past = time.time() + commit.KEEP_S + 1
            assert commit.collect(ds, now=past) == [commit.versions_path(ds) / "v000002"]  # nobody leases it
            assert _names(ds) == ["v000000", "v000001", "v000003", "v000004"]
            assert (v0 / "meta/info.json").read_text() == "0" and (v1 / "meta/info.json").read_text() == "1"
            assert commit.collect(ds, now=time.time()) == []  # KEEP_S not over: nothing
        finally:
            other.kill()  # SIGKILL: the kernel releases its lease
            other.wait(30)
        assert commit.collect(ds, keep_s=0) == [v1] and _names(ds) == ["v000000", "v000003", "v000004"]
    assert commit.collect(ds, keep_s=0) == [v0] and _names(ds) == ["v000003", "v000004"]
    assert commit.pending(ds) == []  # lease files of live versions are not leftovers
    commit.lease_path(v0).touch()  # a collector killed between removing a version and its lease file
    assert commit.pending(ds) and commit.recover(ds) and _names(ds) == ["v000003", "v000004"]


def _names(root: Path) -> list[str]:
    """The versions beside `root`; each has its lease file (and nothing else is there)."""
    names = sorted(p.name for p in commit.versions_path(root).iterdir())
    versions = [n for n in names if not n.endswith(commit.LEASE_SUFFIX)]
    assert names == sorted(versions + [n + commit.LEASE_SUFFIX for n in versions])
    return versions


def _files(version: Path) -> dict[str, int]:
    return {p.relative_to(version).as_posix(): p.stat().st_ino for p in version.rglob("*") if p.is_file()}


def _commit(root: Path, files: dict[str, str], new: tuple[str, ...] = (), drop: tuple[str, ...] = ()) -> Path:
    stage = commit.new_stage(root)
    for rel, text in files.items():
        (stage / rel).parent.mkdir(parents=True, exist_ok=True)
        (stage / rel).write_text(text)
    return commit.publish(root, new, drop)


def test_a_version_links_what_did_not_change(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ds = tmp_path / "ds"
    v0 = _commit(ds, {"meta/info.json": "0", "data/a": "a"})
    assert os.readlink(ds) == "ds.versions/v000000" and commit.snapshot(ds) == v0
    v1 = _commit(ds, {"meta/info.json": "1", "data/b": "b"}, new=("data/b",))
    assert (ds / "meta/info.json").read_text() == "1" and (v0 / "meta/info.json").read_text() == "0"
    assert _files(v1)["data/a"] == _files(v0)["data/a"] and sorted(_files(v1)) == ["data/a", "data/b", "meta/info.json"]
    with pytest.raises(CommitError, match="never overwrites"):
        _commit(ds, {"data/a": "x"}, new=("data/a",))
    assert commit.recover(ds) is not None and commit.current(ds) == v1  # the refused stage removed
    v2 = _commit(ds, {}, drop=("data/b",))
    assert sorted(_files(v2)) == ["data/a", "meta/info.json"]
    assert _names(ds) == ["v000000", "v000001", "v000002"]  # KEEP_S
    monkeypatch.setattr(versions, "KEEP_S", 0.0)
    _commit(ds, {"meta/info.json": "3"})
    assert _names(ds) == ["v000002", "v000003"]  # current, previous
    elsewhere = tmp_path / "elsewhere"
    os.symlink(v0, elsewhere)
    with pytest.raises(CommitError, match="not to a version of this dataset"):
        commit.new_stage(elsewhere)
    assert commit.snapshot(elsewhere) == elsewhere  # readers read it as it is
    planted, victim = tmp_path / "planted", tmp_path / "victim"
    victim.mkdir()
    commit.versions_path(planted).symlink_to(victim)
    with pytest.raises(CommitError, match="nothing is written through"):
        commit.new_stage(planted)
    assert list(victim.iterdir()) == []


UPGRADER = textwrap.dedent('''
    import sys
    from pathlib import Path
    from teleop_flywheel.data.lerobot import commit, v3_layout
    root = Path(sys.argv[1])
    stage = commit.new_stage(root)
    (stage / "data").mkdir()
    (stage / "data" / "new").write_text("new")
    commit.publish(root, ["data/new"])
''')


@pytest.mark.parametrize("exchange", [True, False], ids=["exchange", "no_exchange"])
def test_a_plain_dataset_is_upgraded_whole(tmp_path: Path, exchange: bool) -> None:
    """A dataset from before versions: killed at each step of its upgrade and first commit, with
    RENAME_EXCHANGE and without (NFS, CIFS: `NO_EXCHANGE`), readers read the plain directory's files
    or the committed ones; the next run finishes from there and leaves nothing beside it. Without
    exchange, a kill between moving the directory aside and making the pointer left no `DATASET`
    before issue 39, and the next commit's recovery deleted the directory it had moved aside: the
    data survived only in `DATASET.versions/v000000`, which convert then refused."""
    plain = tmp_path / "plain"
    (plain / "meta").mkdir(parents=True)
    (plain / "meta" / "info.json").write_text("{}")
    old = {"meta/info.json": "{}"}
    log = tmp_path / "log"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if not exchange:
        env[commit.NO_EXCHANGE] = "1"
    first = tmp_path / "first"
    shutil.copytree(plain, first)
    done = subprocess.run([sys.executable, "-c", UPGRADER, str(first)], env={**env, commit.FAULT_LOG: str(log)})
    assert done.returncode == 0 and os.readlink(first) == "first.versions/v000001"
    steps = log.read_text().splitlines()
    assert [s.split(" ", 1)[1] for s in steps] == ["upgrade: files linked", "upgrade: v000000 linked"] + \
        ([] if exchange else ["upgrade: directory aside"]) + ["upgrade: pointer in place", "staged",
                                                              "version v000001", "published"]
    for n in range(1, len(steps) + 1):
        ds = tmp_path / f"ds{n}"
        shutil.copytree(plain, ds)
        killed = subprocess.run([sys.executable, "-c", UPGRADER, str(ds)], env={**env, commit.FAULT_AT: str(n)})
        assert killed.returncode == -9
        with commit.pinned(ds) as version:  # what a reader of the dataset reads (LeRobotDataset.open: snapshot)
            now = {p.relative_to(version).as_posix(): p.read_text() for p in version.rglob("*") if p.is_file()}
        assert now in (old, {**old, "data/new": "new"}), steps[n - 1]
        if exchange or not steps[n - 1].endswith("directory aside"):  # the bare path too, but in that window
            assert ds.is_dir(), steps[n - 1]
        else:
            assert not os.path.lexists(ds) and bool(commit.pending(ds))
            assert [p.leftover for p in problems(ds)] == [True]  # doctor --repair completes it
        commit.recover(ds)
        assert not commit.pending(ds) and list(tmp_path.glob(f".{ds.name}.*")) == [], steps[n - 1]
        if "data/new" not in now:
            _commit(ds, {"data/new": "new"}, new=("data/new",))
        assert {p.relative_to(ds).as_posix() for p in ds.rglob("*") if p.is_file()} == {"meta/info.json", "data/new"}
        assert sorted(p.name for p in commit.versions_path(ds).iterdir() if not p.name.endswith(".lease")) == \
            ["v000000", "v000001"] or "data/new" not in now, steps[n - 1]
        assert not commit.pending(ds) and not (commit.versions_path(ds) / commit.PLAIN).exists()


def test_an_upgrade_an_older_version_left_between_its_renames_is_completed(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """What the upgrade without RENAME_EXCHANGE left before issue 39 when killed between its renames:
    no `DATASET`, the directory at `.DATASET.pointer-PID.dir`, the temporary pointer beside it.
    Readers read v000000; recovery makes the pointer instead of deleting the directory."""
    ds = tmp_path / "ds"
    vdir = commit.versions_path(ds)
    (vdir / "v000000" / "meta").mkdir(parents=True)
    (vdir / "v000000" / "meta" / "info.json").write_text("{}")
    aside = tmp_path / ".ds.pointer-4242.dir"
    (aside / "meta").mkdir(parents=True)
    os.link(vdir / "v000000" / "meta" / "info.json", aside / "meta" / "info.json")
    os.symlink("ds.versions/v000000", tmp_path / ".ds.pointer-4242")
    assert commit.snapshot(ds) == vdir / "v000000"
    assert cli_main(["doctor", str(ds)]) == 1  # not "no such dataset" (exit 2)
    assert "interrupted before its pointer was made" in capsys.readouterr().out
    cli_main(["doctor", str(ds), "--repair"])  # this stand-in has no episodes table: only the layout is judged
    assert "interrupted before its pointer was made" in capsys.readouterr().out and not commit.pending(ds)
    assert os.readlink(ds) == "ds.versions/v000000" and (ds / "meta" / "info.json").read_text() == "{}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds", "ds.lock", "ds.versions"]


def test_doctor_reads_the_version_layout(tmp_path: Path) -> None:
    """What `doctor` says of pointers it did not make or that lost their version, and what a crash left."""
    ds = tmp_path / "ds"
    _commit(ds, {"meta/info.json": "0"})
    v1 = _commit(ds, {"meta/info.json": "1"})
    (commit.versions_path(ds) / "v000002").mkdir()  # a version a crash left, never pointed to
    found = problems(ds)
    assert len(found) == 1 and found[0].leftover
    assert "v000002: a version made by a commit interrupted" in found[0].detail
    commit.recover(ds)
    shutil.rmtree(v1)  # removed by hand
    with commit.pinned(ds) as version:
        assert version == v1  # not waited for: the reader finds it missing and says so
    assert [p.repair for p in problems(ds)] == [None] and "points to v000001, which is not in" in problems(ds)[0].detail
    ds.unlink()  # the pointer removed by hand: its versions are left alone
    assert commit.recover(ds) is None and (commit.versions_path(ds) / "v000000").is_dir()
    assert "whose pointer ds is gone" in problems(ds)[0].detail
    other = tmp_path / "other"
    os.symlink(commit.versions_path(ds) / "v000000", other)
    assert "not to a version of this dataset" in problems(other)[0].detail


def test_a_new_dataset_appears_whole(tmp_path: Path) -> None:
    """A first commit killed at each of its steps: no dataset, or all of it; the next one starts clean."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    log = tmp_path / "log"
    assert subprocess.run([sys.executable, "-c", UPGRADER, str(tmp_path / "first")],
                          env={**env, commit.FAULT_LOG: str(log)}).returncode == 0
    steps = log.read_text().splitlines()
    assert [s.split(" ", 1)[1] for s in steps] == ["staged", "pointer made", "published"]
    for n in range(1, len(steps) + 1):
        ds = tmp_path / f"ds{n}"
        killed = subprocess.run([sys.executable, "-c", UPGRADER, str(ds)], env={**env, commit.FAULT_AT: str(n)})
        assert killed.returncode == -9
        assert (ds / "data/new").is_file() == (n == len(steps)) and ds.exists() == (n == len(steps)), steps[n - 1]
        assert bool(commit.pending(ds)) == (n < len(steps))
        assert n == len(steps) or all(p.leftover for p in problems(ds))  # doctor --repair removes them
        commit.recover(ds)
        assert sorted(p.name for p in tmp_path.glob(f"*{ds.name}*")) == ([] if n < len(steps) else
                                                                        [ds.name, f"{ds.name}.versions"])
    legacy = tmp_path / "legacy"
    legacy.mkdir()
    (tmp_path / "legacy.convert-journal.json").write_text("{}")  # an append the journal format left half done
    assert "commit format before versions" in problems(legacy)[0].detail and problems(legacy)[0].layout


def _uploaded(root: Path) -> set[str]:
    """The files an upload of `root` sends: huggingface_hub's `upload_folder` (so `huggingface-cli upload`
    and LeRobot's `push_to_hub`) lists the folder with `Path.glob("**/*")`, which skips directory symlinks."""
    folder = root.resolve()
    return {p.relative_to(folder).as_posix() for p in folder.glob("**/*") if p.is_file()}


def _killed_at(step: int, work: Callable[[], object]) -> bool:
    """Run `work` as if killed -9 at its `step`-th write step (`commit.fault`): whether it was."""
    with pytest.MonkeyPatch.context() as m:
        m.setenv(commit.FAULT_AT, str(step))
        m.setattr(os, "kill", lambda pid, sig: (_ for _ in ()).throw(KeyboardInterrupt()))
        primitives._steps[0] = 0
        try:
            work()
        except KeyboardInterrupt:
            return True
    return False


@pytest.mark.parametrize("exchange", [True, False], ids=["exchange", "no_exchange"])
def test_closed_chunks_are_carried_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, exchange: bool) -> None:
    """A commit links a closed chunk directory's files once into the shared store; from then on the
    current version holds it as a directory of its own, which the next commit takes by RENAME_EXCHANGE
    for a symlink to the store (without RENAME_EXCHANGE: every later version carries that symlink), so a
    commit's links stay bounded by the open chunk however many files the dataset holds. A drop inside
    a shared chunk gives that version its own directory; the store entries no version links are
    collected with their versions, or removed by `recover` after a kill, which also gives the current
    version back the directories a killed commit took."""
    if not exchange:
        monkeypatch.setenv(commit.NO_EXCHANGE, "1")
    ds = tmp_path / "ds"
    _commit(ds, {"meta/info.json": "0", "data/chunk-000/file-000.parquet": "d0"})
    links: list[str] = []
    real_link = os.link
    per_commit = []
    with monkeypatch.context() as m:
        m.setattr(os, "link", lambda a, b: links.append(str(b)) or real_link(a, b))
        for k in range(1, 12):  # 2 files a chunk: chunk-000 holds file-000, file-001, chunk-001 the next two...
            rel = f"data/chunk-{k // 2:03d}/file-{k % 2:03d}.parquet"
            links.clear()
            _commit(ds, {"meta/info.json": str(k), rel: f"d{k}"}, new=(rel,))
            per_commit.append(len([t for t in links if "/data/" in t]))  # meta/info.json: staged, not linked
    version = commit.current(ds)
    assert version is not None
    previous = version.with_name(f"v{int(version.name[1:]) - 1:06d}")
    assert {p.name: p.is_symlink() for p in (version / "data").iterdir()} == {
        **{f"chunk-{c:03d}": not exchange for c in range(5)}, "chunk-005": False}
    assert max(per_commit) <= 2, per_commit  # the open chunk's file, or a newly closed chunk's two (once)
    data = {f"data/chunk-{k // 2:03d}/file-{k % 2:03d}.parquet": f"d{k}" for k in range(12)}
    assert {rel: (ds / rel).read_text() for rel in data} == data
    assert (set(data) <= _uploaded(ds)) is exchange
    assert os.readlink((previous if exchange else version) / "data/chunk-000") == "../../.shared/v000002/data/chunk-000"
    assert commit.pending(ds) == [] and (commit.upload_note(ds) is None) is exchange
    # a drop inside a shared chunk: that version has its own directory, linked from the store
    v = _commit(ds, {}, drop=("data/chunk-001/file-000.parquet",))
    del data["data/chunk-001/file-000.parquet"]
    assert not (v / "data/chunk-001").is_symlink() and sorted(p.name for p in (v / "data/chunk-001").iterdir()) == \
        ["file-001.parquet"]
    assert (v / "data/chunk-000").is_symlink() is not exchange
    # killed at each write step of a commit that closes chunk-005: every step leaves the dataset
    # whole; recover removes the store entry a kill left unlinked and gives back the directories taken
    store = commit.versions_path(ds) / commit.SHARED
    data["data/chunk-006/file-000.parquet"] = "d12"

    def closing() -> Path:
        commit.recover(ds)
        stage = commit.new_stage(ds)
        (stage / "data/chunk-006").mkdir(parents=True)
        (stage / "data/chunk-006/file-000.parquet").write_text("d12")
        return commit.publish(ds, ("data/chunk-006/file-000.parquet",))

    step, published = 0, False
    while not published:
        step += 1
        killed = _killed_at(step, closing)
        published = commit.current(ds) != v
        assert killed or published
        assert {rel: (ds / rel).read_text() for rel in data if published or "chunk-006" not in rel} == \
            {rel: text for rel, text in data.items() if published or "chunk-006" not in rel}
        if step == 1:  # killed after chunk-005 was shared, before its version was published
            assert (store / f"v{int(v.name[1:]) + 1:06d}/data/chunk-005").is_dir()
            assert any("shared store" in line for line in commit.pending(ds))
        if not published:
            assert commit.recover(ds) is not None and commit.pending(ds) == []
            assert not (store / f"v{int(v.name[1:]) + 1:06d}").exists()
            assert (set(data) - {"data/chunk-006/file-000.parquet"} <= _uploaded(ds)) is exchange
    assert step >= (4 if exchange else 3) and commit.current(ds) != v  # shared, exchanged x2, staged...
    assert (set(data) <= _uploaded(ds)) is exchange
    # every version but the current and the previous collected: so is every entry only they linked
    v = commit.current(ds)
    assert v is not None
    monkeypatch.setattr(versions, "KEEP_S", 0.0)
    last = _commit(ds, {"meta/info.json": "x"})
    used = {os.readlink(p).split("/")[3] for p in [*(last / "data").iterdir(), *(v / "data").iterdir()]
            if p.is_symlink()}
    assert sorted(p.name for p in store.iterdir()) == sorted(used)
    assert {rel: (ds / rel).read_text() for rel in data} == data
    assert (set(data) <= _uploaded(ds)) is exchange


def test_a_dataset_carrying_chunk_symlinks_gets_directories_again(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A current version that carries its closed chunks by symlink (committed where there was no
    RENAME_EXCHANGE, or by an older teleop-flywheel) gets them as directories at its next commit; a
    chunk that commit drops a file from gets a directory of its own, which the commit after is not
    fooled into taking for the store entry's twin: every version keeps reading its own files."""
    ds = tmp_path / "ds"
    monkeypatch.setenv(commit.NO_EXCHANGE, "1")
    _commit(ds, {"meta/info.json": "0", "data/chunk-000/file-000.parquet": "d0"})
    for k in range(1, 7):
        rel = f"data/chunk-{k // 2:03d}/file-{k % 2:03d}.parquet"
        _commit(ds, {rel: f"d{k}"}, new=(rel,))
    old = commit.current(ds)
    assert old is not None and commit.shared_links(old) == ["data/chunk-000", "data/chunk-001", "data/chunk-002"]
    assert commit.upload_note(ds) is not None
    monkeypatch.delenv(commit.NO_EXCHANGE)
    mid = _commit(ds, {}, drop=("data/chunk-001/file-000.parquet",))
    assert commit.shared_links(mid) == [] and commit.upload_note(ds) is None
    last = _commit(ds, {"data/chunk-003/file-001.parquet": "d7"}, new=("data/chunk-003/file-001.parquet",))
    assert commit.shared_links(last) == [] and commit.shared_links(mid) == ["data/chunk-000", "data/chunk-001",
                                                                            "data/chunk-002"]
    assert os.readlink(mid / "data/chunk-001") != os.readlink(old / "data/chunk-001")  # its own, shared anew
    assert sorted(os.path.relpath(os.path.join(d, n), old) for d, _dirs, names in os.walk(old, followlinks=True)
                  for n in names) == [f"data/chunk-{k // 2:03d}/file-{k % 2:03d}.parquet" for k in range(7)] + \
        ["meta/info.json"]
    for version in (mid, last):
        assert sorted(p.name for p in (version / "data/chunk-001").iterdir()) == ["file-001.parquet"]
        assert (version / "data/chunk-000/file-001.parquet").read_text() == "d1"
    assert (last / "data/chunk-003/file-001.parquet").read_text() == "d7" and commit.pending(ds) == []


def test_a_foreign_chunk_symlink_is_refused(tmp_path: Path) -> None:
    """A chunk directory symlinked elsewhere (not our store) is never carried or written through."""
    ds = tmp_path / "ds"
    v0 = _commit(ds, {"meta/info.json": "0", "data/chunk-001/file-000.parquet": "d"})
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "file-000.parquet").write_text("x")
    os.symlink(elsewhere, v0 / "data/chunk-000")
    with pytest.raises(CommitError, match="not to a chunk directory versions share"):
        _commit(ds, {"meta/info.json": "1"})


@pytest.mark.parametrize("exchange", [True, False], ids=["exchange", "no_exchange"])
def test_an_upload_of_the_dataset_holds_every_closed_chunk(bags: list[Path], tmp_path: Path, exchange: bool,
                                                           monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """huggingface-cli upload and LeRobot's push_to_hub list a folder with a recursive glob that skips
    directory symlinks. One-at-a-time ingests into 1-file chunks close a chunk at every commit; the
    current version holds each as a directory of its own, so such an upload of the dataset finds every
    data and video file. Where the filesystem has no RENAME_EXCHANGE the current version carries them
    by symlink, and the verbs run before an upload (card, doctor) say so, naming the copy to make."""
    if not exchange:
        monkeypatch.setenv(commit.NO_EXCHANGE, "1")
    monkeypatch.setattr(v3_layout, "DEFAULT_CHUNK_SIZE", 1)
    ds = tmp_path / "ds"
    for bag in bags[:5]:
        conv.convert([bag], ds, codec="h264", workers=1, progress=False)
    everything = {os.path.relpath(os.path.join(d, n), ds) for d, _dirs, names in os.walk(ds, followlinks=True)
                  for n in names if os.path.relpath(d, ds).split(os.sep)[0] in ("data", "videos")}
    assert len([f for f in everything if f.endswith(".parquet")]) == 5 and len(everything) >= 10
    assert (everything <= _uploaded(ds)) is exchange, sorted(everything - _uploaded(ds))
    assert cli_main(["card", str(ds), "--force"]) == 0
    card = capsys.readouterr().out
    assert cli_main(["doctor", str(ds)]) == 0
    doctor = capsys.readouterr().out
    for out in (card, doctor):
        assert ("cp -rL" in out and "push_to_hub" in out and "data/chunk-000" in out) is not exchange, out
    assert cli_main(["doctor", str(ds), "--json"]) == 0
    note = json.loads(capsys.readouterr().out)["upload_note"]
    assert note is None if exchange else "cp -rL" in note


@pytest.mark.timeout(300)
@LEROBOT
def test_lerobot_reads_a_dataset_whose_closed_chunks_are_shared(bags: list[Path], tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """LeRobot's own loader, given a version whose closed data and video chunks are symlinks to the
    shared store (every version but the current one; the current one too without RENAME_EXCHANGE,
    taken here), returns item for item what it returns for the same episodes laid out without
    sharing (one chunk): frames decoded from the shared mp4s, rows from the shared parquets."""
    import torch
    from lerobot.datasets.lerobot_dataset import LeRobotDataset as Loader

    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf-cache"))
    plain, shared = tmp_path / "plain", tmp_path / "shared"
    for bag in bags[:3]:
        conv.convert([bag], plain, codec="h264", workers=1, progress=False)
    monkeypatch.setattr(v3_layout, "DEFAULT_CHUNK_SIZE", 1)
    monkeypatch.setenv(commit.NO_EXCHANGE, "1")
    for bag in bags[:3]:
        conv.convert([bag], shared, codec="h264", workers=1, progress=False)
    key = next(p.name for p in (shared / "videos").iterdir())
    assert all((shared / sub).is_symlink() for sub in ("data/chunk-000", "data/chunk-001", f"videos/{key}/chunk-001"))
    with commit.pinned(plain) as a, commit.pinned(shared) as b:
        ours, theirs = Loader("local/plain", root=a, video_backend="pyav"), Loader("local/shared", root=b,
                                                                                   video_backend="pyav")
        assert len(ours) == len(theirs) and ours.num_episodes == theirs.num_episodes == 3
        starts = [int(i) for i in theirs.meta.episodes["dataset_from_index"]]
        for i in sorted({*starts, *(s + 7 for s in starts), len(theirs) - 1}):
            x, y = ours[i], theirs[i]
            assert x.keys() == y.keys() and key in x  # a frame decoded from the mp4s
            for name, value in x.items():
                if isinstance(value, torch.Tensor):
                    assert torch.equal(value, y[name]), (i, name)
