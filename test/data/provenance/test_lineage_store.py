"""The lineage registry's store: SQLite (lineage/2), a lineage/1 JSON registry read and migrated by
the first write, several writing processes at once losing nothing, a reused checkpoint id refused
even when another process saved it between our load and our save.

Oracles: the manifests written by `manifest create` (read as JSON here), the legacy file's bytes,
SQLite's own reader (`sqlite3`) for what the store holds on disk.
"""
from __future__ import annotations

import json
import multiprocessing
import os
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from teleop_flywheel.cli import main as cli_main
from teleop_flywheel.data.provenance import LEGACY_FORMAT, default_registry, legacy_backup
from teleop_flywheel.data.provenance.lineage import (
    LineageError,
    Registry,
    add_evaluation,
    register_checkpoint,
    register_export,
)
from teleop_flywheel.testing.synthetic_dataset import SyntheticSpec, write

WRITERS, EACH = 4, 6


@pytest.fixture(scope="module")
def manifests(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("manifests")
    root = write(tmp / "ds", SyntheticSpec(episodes=3, min_length=10, max_length=12, seed=1)).root
    a, b = tmp / "run_a.json", tmp / "run_b.json"
    assert cli_main(["manifest", "create", str(root), "--out", str(a)]) == 0
    assert cli_main(["manifest", "create", str(root), "--out", str(b), "--filter", "episode_index==1"]) == 0
    return a, b


def _legacy(path: Path, manifest: Path, checkpoints: int) -> dict[str, object]:
    """A lineage/1 registry as the JSON store wrote it: a full manifest copy per checkpoint."""
    m = json.loads(manifest.read_text())
    reg = Registry(path)
    entries = {f"old-{i}": reg.register(f"old-{i}", manifest, run=f"old{i}") for i in range(checkpoints)}
    data = {"format": LEGACY_FORMAT, "checkpoints": entries,
            "evaluations": {"old-0": [{"when": "then", "n": 3}]}}
    assert all(e["manifest"] == m for e in entries.values())
    path.write_text(json.dumps(data, indent=1) + "\n")
    return data


def _register_many(registry: str, manifest: str, writer: int) -> None:
    for i in range(EACH):
        register_checkpoint(Path(registry), f"w{writer}-{i}", Path(manifest), run=f"w{writer}")
        add_evaluation(Path(registry), f"w{writer}-{i}", {"writer": writer, "i": i})


def _rows(path: Path, sql: str) -> list[tuple[object, ...]]:
    with closing(sqlite3.connect(path)) as conn:
        return conn.execute(sql).fetchall()


def test_a_json_registry_is_read_as_it_is_and_migrated_by_the_first_write_keeping_the_original(
        tmp_path: Path, manifests: tuple[Path, Path]) -> None:
    path = tmp_path / "lineage.json"
    _legacy(path, manifests[0], 3)
    original = path.read_bytes()
    reg = Registry.load(path)  # read: the JSON is not touched
    assert reg.which("old-1")["run"] == "old1" and reg.evaluations["old-0"] == [{"when": "then", "n": 3}]
    assert path.read_bytes() == original and not legacy_backup(path).exists()

    register_checkpoint(path, "new-1", manifests[1])
    assert legacy_backup(path) == tmp_path / "lineage.v1.json" and legacy_backup(path).read_bytes() == original
    assert path.read_bytes()[:16] == b"SQLite format 3\x00"  # the path the user named is the registry still
    reg = Registry.load(path)
    assert sorted(reg.checkpoints) == ["new-1", "old-0", "old-1", "old-2"]
    assert reg.which("old-2")["manifest"] == json.loads(manifests[0].read_text())
    assert reg.which("new-1")["manifest"] == json.loads(manifests[1].read_text())
    assert reg.evaluations["old-0"] == [{"when": "then", "n": 3}]  # migrated once, not again
    assert reg.episodes("old1") == [e["episode_id"] for e in json.loads(manifests[0].read_text())["episodes"]]
    # Each manifest is stored once, however many checkpoints it trained.
    assert _rows(path, "SELECT count(*) FROM manifests") == [(2,)]
    add_evaluation(path, "old-0", {"when": "now", "n": 5})
    assert [e["n"] for e in Registry.load(path).evaluations["old-0"]] == [3, 5]


def test_several_processes_registering_at_once_lose_nothing(tmp_path: Path, manifests: tuple[Path, Path]) -> None:
    path = tmp_path / "lineage.json"
    _legacy(path, manifests[0], 2)  # the first writers race to migrate it, too
    ctx = multiprocessing.get_context("fork")  # no connection is open across the fork
    procs = [ctx.Process(target=_register_many, args=(str(path), str(manifests[w % 2]), w)) for w in range(WRITERS)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0] * WRITERS
    reg = Registry.load(path)
    expected = {f"w{w}-{i}" for w in range(WRITERS) for i in range(EACH)} | {"old-0", "old-1"}
    assert set(reg.checkpoints) == expected
    assert len(_rows(path, "SELECT id FROM checkpoints")) == len(expected)
    for w in range(WRITERS):
        assert reg.which(f"w{w}-0")["manifest"] == json.loads(manifests[w % 2].read_text())
        assert [e["i"] for e in reg.evaluations[f"w{w}-3"]] == [3]
    assert reg.evaluations["old-0"] == [{"when": "then", "n": 3}]
    assert _rows(path, "PRAGMA journal_mode") == [("wal",)]


def test_a_checkpoint_id_saved_by_another_process_meanwhile_is_never_replaced(
        tmp_path: Path, manifests: tuple[Path, Path]) -> None:
    path = tmp_path / "reg.sqlite"
    first, second = Registry.load(path), Registry.load(path)  # both loaded before either saved
    first.register("ckpt-9", manifests[0])
    second.register("ckpt-9", manifests[1])
    first.save()
    with pytest.raises(LineageError, match="never reused"):
        second.save()
    assert Registry.load(path).which("ckpt-9")["manifest_path"] == str(manifests[0].resolve())
    second = Registry.load(path)
    second.register("ckpt-9", manifests[0])  # the same pair again: a no-op
    second.save()
    assert _rows(path, "SELECT count(*) FROM checkpoints") == [(1,)]


def test_a_file_that_is_no_registry_is_refused_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "lineage.json"
    path.write_text("checkpoints: []\n")
    with pytest.raises(LineageError, match=f"{path}: not a lineage registry"):
        Registry.load(path)
    path.write_text('{"format": "something/1"}')
    with pytest.raises(LineageError, match="not a teleop_flywheel.lineage/1 registry"):
        Registry.load(path)


def test_the_default_registry_is_an_existing_json_one_else_a_new_sqlite_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TELEOP_FLYWHEEL_LINEAGE")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    assert default_registry() == tmp_path / "teleop_flywheel" / "lineage.sqlite"
    (tmp_path / "teleop_flywheel").mkdir()
    (tmp_path / "teleop_flywheel" / "lineage.json").write_text(json.dumps({"format": LEGACY_FORMAT}))
    assert default_registry() == tmp_path / "teleop_flywheel" / "lineage.json"  # a user's history stays theirs
    monkeypatch.setenv("TELEOP_FLYWHEEL_LINEAGE", str(tmp_path / "mine.db"))
    assert default_registry() == tmp_path / "mine.db"


def test_a_symlink_planted_beside_the_registry_is_refused_and_its_target_untouched(
        tmp_path: Path, manifests: tuple[Path, Path]) -> None:
    path = tmp_path / "lineage.sqlite"
    register_checkpoint(path, "ckpt-1", manifests[0])
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (tmp_path / "lineage.sqlite-wal").symlink_to(victim)
    with pytest.raises(LineageError, match="lineage.sqlite-wal: a symlink beside the lineage registry"):
        register_checkpoint(path, "ckpt-2", manifests[1])
    assert victim.read_text() == "precious"


def test_a_damaged_database_is_one_line_naming_it(tmp_path: Path, manifests: tuple[Path, Path]) -> None:
    path = tmp_path / "lineage.sqlite"
    register_checkpoint(path, "ckpt-1", manifests[0])
    reg = Registry.load(path)  # opened while it was whole; damaged before the lookup reads it
    data = bytearray(path.read_bytes())
    data[100:4096] = b"\xff" * (4096 - 100)  # the schema page, past the header
    path.write_bytes(bytes(data))
    with pytest.raises(LineageError, match=f"{path}: lineage registry: "):
        reg.which("ckpt-1")
    with pytest.raises(LineageError, match=f"{path}: "):
        register_checkpoint(path, "ckpt-2", manifests[1])


def test_a_reader_never_parses_a_database_renamed_over_the_json_it_looked_at(
        tmp_path: Path, manifests: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """Another process's first write migrates a lineage/1 JSON by renaming a database over it. A
    reader that looked at the file (JSON) and then opened the path again read the database as JSON
    and failed "unreadable" (one of four concurrent writers exited 1 under load). Here the rename
    lands right after the reader's first open of the path: whatever it opens next must not matter."""
    path = tmp_path / "lineage.json"
    _legacy(path, manifests[0], 2)
    migrated = tmp_path / "elsewhere" / "lineage.json"
    migrated.parent.mkdir()
    migrated.write_bytes(path.read_bytes())
    register_checkpoint(migrated, "other-1", manifests[1])  # what the other process's write leaves
    real_open = Path.open
    opened: list[Path] = []

    def open_then_migrate(self: Path, *args: Any, **kwargs: Any) -> Any:
        f = real_open(self, *args, **kwargs)
        if self == path:
            opened.append(self)
            if len(opened) == 1:
                os.replace(migrated, path)
        return f

    monkeypatch.setattr(Path, "open", open_then_migrate)
    reg = Registry.load(path)
    assert reg.which("old-1")["run"] == "old1"  # the JSON as it was when looked at


def test_which_export_and_list_read_only_the_rows_they_answer_with(
        tmp_path: Path, manifests: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    """`lineage which EXPORT` looks the export up by its content's fingerprint (an indexed row), and
    `lineage list` reads the listed fields: every other export's entry is made unreadable here, so
    reading one (the scan over every export `which` did) fails. `list` prints each checkpoint's
    episode count from its manifest, and each export's from its entry."""
    path = tmp_path / "lineage.sqlite"
    outs = []
    for k in range(3):
        out = tmp_path / f"export{k}"
        out.mkdir()
        (out / "episode_0.hdf5").write_bytes(bytes([k]) * 10)
        outs.append(out)
        register_export(path, "hdf5-aloha", out, [{"episode_id": f"e{k}", "source_episode_index": k}], "/data/ds")
    register_checkpoint(path, "ckpt-a", manifests[0])
    register_checkpoint(path, "ckpt-b", manifests[1])
    register_checkpoint(path, "ckpt-x", outs[2])
    assert cli_main(["lineage", "--registry", str(path), "list"]) == 0
    listed = capsys.readouterr().out.splitlines()
    n_a, n_b = (json.loads(m.read_text())["episode_count"] for m in manifests)
    assert [line.split()[:5] for line in listed[:3]] == [
        ["ckpt-a", "run", "run_a", str(n_a), "episodes"], ["ckpt-b", "run", "run_b", str(n_b), "episodes"],
        ["ckpt-x", "run", "export2", "1", "episodes"]]
    assert [line.split()[1] for line in listed[3:]] == ["1", "1", "1"] and str(outs[1].resolve()) in listed[4]
    target = Registry.load(path).find_export(outs[1])["export"]
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("UPDATE exports SET entry = 'damaged' WHERE id != ?", (target,))
        conn.commit()
    assert cli_main(["lineage", "--registry", str(path), "which", str(outs[1]), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["export"] == target
