"""`teleop-flywheel migrate`: an old file is refused by its reader naming the command, upgraded into a
copy (the original untouched, nothing overwritten), and the copy is read as usual.

Bags with old schemas: written as the recorder wrote them before commit 2adad37 (`MSG:
std_msgs/msg/Header` dependency headers); Foxglove's own parser (npm `@foxglove/rosmsg`, run by node
as in test_foxglove_parsers.py) cannot decode their stamped topics. The copy decodes there, keeps
every message and the episode metadata (same content ids). Bags with old stamps are in
test_data_time_and_foreign.py, old manifests in test_data_manifest_coverage.py. Datasets of our
layout 1 (`data/lerobot/flywheel_schema.py`) are upgraded here; that every reader reads them as
they are is in test/data/lerobot/test_flywheel_schema.py.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from support.foxglove_npm import decode_bag

from teleop_flywheel.cli import main as cli_main
from teleop_flywheel.core.episode import METADATA_RECORD, EpisodeMeta
from teleop_flywheel.data import migrate as migrate_module
from teleop_flywheel.data.convert.converter import convert
from teleop_flywheel.data.lerobot import commit, v3_layout
from teleop_flywheel.data.lerobot.dataset import LeRobotDataset
from teleop_flywheel.recording.mcap import msgdefs
from teleop_flywheel.recording.mcap.exceptions import OutdatedBagError
from teleop_flywheel.recording.mcap.reader import open_bag, open_indexed
from teleop_flywheel.recording.mcap.upgrade import fixed_text
from teleop_flywheel.recording.mcap.writer import BagWriter, mcap_file_name
from teleop_flywheel.testing import synthetic_dataset
from teleop_flywheel.testing.dataset_files import data_files, layout_1_copy
from teleop_flywheel.testing.synthetic_session import SessionSpec, write_session


def _old_form(type_name: str) -> msgdefs.MessageDefinition:
    d = msgdefs.definition(type_name)
    text = re.sub(r"^MSG: (\w+)/(\w+)$", r"MSG: \1/msg/\2", d.text, flags=re.MULTILINE)
    return msgdefs.MessageDefinition(d.type_name, text, d.type_hash, d.encoding)


def old_bag(src: Path, dest: Path) -> Path:
    """The messages and episode metadata of `src`, written with the pre-fix schema text."""
    idx = open_indexed(src)
    records = idx.metadata()
    with BagWriter(dest, episode=EpisodeMeta.from_strings(records[METADATA_RECORD]), fsync=False) as w:
        names = {}
        for cid, ch in sorted(idx.channels.items()):
            w.add_topic(ch.topic, ch.schema_name, definition=_old_form(ch.schema_name))
            names[cid] = ch.topic
        for m in idx.messages():
            w.write(names[m.channel_id], m.data, m.log_time, m.publish_time)
    return dest


def _hashes(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_fixed_text_names_dependencies_as_written() -> None:
    old = _old_form("sensor_msgs/msg/JointState").text
    assert "MSG: std_msgs/msg/Header" in old
    assert fixed_text(old) == msgdefs.definition("sensor_msgs/msg/JointState").text


def test_a_bag_with_old_schemas_is_refused_then_migrated(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = write_session(tmp_path / "src", SessionSpec(duration_s=2.0, session_kind="policy", width=256, height=192,
                                                      interventions=((0.5, 1.0, "too_slow"),))).bag
    bag = old_bag(src, tmp_path / "episode_old")
    before = _hashes(bag)
    broken = decode_bag(bag / mcap_file_name(bag.name))
    assert broken["/follower/joint_states"]["errors"] and broken["/cameras/wrist/image/compressed"]["errors"]
    for read in (open_bag, open_indexed):
        with pytest.raises(OutdatedBagError, match=r"MSG: pkg/msg/Type.*run `teleop-flywheel migrate "):
            read(bag)
    assert cli_main(["recover", str(bag)]) == 2
    assert f"run `teleop-flywheel migrate {bag / mcap_file_name(bag.name)}`" in capsys.readouterr().err

    assert cli_main(["migrate", str(bag)]) == 0
    out = capsys.readouterr().out
    assert "schemas: " in out and "sensor_msgs/msg/JointState" in out and "stamps:" not in out
    assert "the original" in out and "is unchanged" in out
    copy = tmp_path / "episode_old.migrated"
    assert _hashes(bag) == before and sorted(p.name for p in tmp_path.iterdir()) == \
        ["episode_old", "episode_old.migrated", "src"]
    fixed = decode_bag(copy / mcap_file_name(copy.name))
    assert set(fixed) == set(broken)
    a, b = open_bag(src), open_bag(copy)
    for topic, entry in fixed.items():
        assert entry["errors"] == [], (topic, entry["errors"][:1])
        assert entry["count"] == len(b.raw(topic))
    assert b.damage == [] and (a.episode_id, a.episode_id_v1) == (b.episode_id, b.episode_id_v1)

    assert cli_main(["migrate", str(bag)]) == 2  # never overwritten
    assert "refusing to overwrite" in capsys.readouterr().err
    assert cli_main(["migrate", str(src)]) == 0  # current
    assert "already in the current format" in capsys.readouterr().out
    assert not (tmp_path / "src.migrated").exists()


def test_a_dataset_beside_old_convert_temps_is_copied_without_them(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    ds = synthetic_dataset.write(tmp_path / "ds").root
    assert cli_main(["migrate", str(ds)]) == 0
    assert "already in the current format" in capsys.readouterr().out
    (tmp_path / ".convert-abc123").mkdir()  # a converter from before staging crashed here
    assert cli_main(["migrate", str(ds)]) == 0
    out = capsys.readouterr().out
    assert "temps: 1 temporary directories" in out and ".convert-abc123" in out
    assert _hashes(tmp_path / "ds.migrated") == _hashes(ds) and (tmp_path / ".convert-abc123").is_dir()
    assert len(LeRobotDataset.open(tmp_path / "ds.migrated").episodes) == len(LeRobotDataset.open(ds).episodes)


def test_a_dataset_of_layout_1_is_upgraded_into_a_copy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The copy of a layout-1 dataset is what the converter writes now, file for file: the same data
    tables, info.json, stats.json and episodes table (the leader's reading renamed where it was),
    the same videos (linked, never re-encoded); the original is unchanged; a crash leaves no half copy."""
    bags = [write_session(tmp_path / f"ep{i}", SessionSpec(duration_s=3.0, seed=30 + i)).bag for i in range(2)]
    convert(bags, tmp_path / "now", workers=1, progress=False, codec="h264")
    old = layout_1_copy(tmp_path / "now", tmp_path / "old")
    before = _hashes(old)
    assert cli_main(["migrate", str(old)]) == 0
    out = capsys.readouterr().out
    assert "layout: 1 -> 2: the leader arm's reading moved from observation.leader_state" in out
    assert "observation.leader_state -> complementary_info.leader_state in 1 data files" in out
    assert "note: manifests frozen from the original verify against the original only" in out
    copy, now = tmp_path / "old.migrated", tmp_path / "now"
    assert _hashes(old) == before
    assert json.loads((copy / "meta/info.json").read_text()) == json.loads((now / "meta/info.json").read_text())
    assert json.loads((copy / "meta/stats.json").read_text()) == json.loads((now / "meta/stats.json").read_text())
    for rel in ["meta/episodes/chunk-000/file-000.parquet", *(p.relative_to(now) for p in data_files(now))]:
        assert pq.read_table(copy / rel).equals(pq.read_table(now / rel)), rel
    videos = sorted(p.relative_to(old) for p in (old / "videos").rglob("*.mp4"))
    assert videos and all((copy / v).stat().st_ino == (old / v).stat().st_ino for v in videos)
    assert {k: v for k, v in _hashes(copy).items() if not k.startswith(("data/", "meta/"))} == \
        {k: v for k, v in before.items() if not k.startswith(("data/", "meta/"))}

    assert cli_main(["migrate", str(copy)]) == 0
    assert "already in the current format" in capsys.readouterr().out
    assert cli_main(["migrate", str(old)]) == 2  # never overwritten
    assert "refusing to overwrite" in capsys.readouterr().err

    def crash(*_: object) -> None:
        raise OSError(28, "No space left on device")

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(migrate_module.pq, "write_table", crash)
        with pytest.raises(OSError):
            migrate_module.migrate(old, tmp_path / "half")
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix != ".lock") == \
        ["ep0", "ep1", "now", "now.versions", "old", "old.migrated", "old.migrated.versions"]  # no half*


@pytest.mark.parametrize("exchange", [True, False], ids=["exchange", "no_exchange"])
def test_a_copy_holds_the_files_of_chunks_versions_share(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         exchange: bool) -> None:
    """A dataset whose closed chunks are shared (`commit/`: the current version's own directories,
    or, without RENAME_EXCHANGE, symlinks to its shared store) is copied with those chunks' files, not
    the links (relative to the original's store: dangling in the copy)."""
    if not exchange:
        monkeypatch.setenv(commit.NO_EXCHANGE, "1")
    monkeypatch.setattr(v3_layout, "DEFAULT_CHUNK_SIZE", 1)
    ds = tmp_path / "ds"
    for i in range(3):
        res = convert([write_session(tmp_path / f"ep{i}", SessionSpec(duration_s=2.5, seed=50 + i)).bag], ds, workers=1,
                      progress=False, codec="h264")
        assert sum(len(v) for v in res.converted.values()) == 1, res
    assert bool(commit.shared_links(commit.snapshot(ds))) is not exchange
    migrate_module._upgraded_copy(ds, tmp_path / "copy", {})
    copy = commit.snapshot(tmp_path / "copy")
    through = {os.path.relpath(os.path.join(d, n), ds): hashlib.sha256(Path(d, n).read_bytes()).hexdigest()
               for d, _dirs, names in os.walk(ds, followlinks=True) for n in names}  # the links followed
    assert commit.shared_links(copy) == [] and _hashes(copy) == through
    assert len(LeRobotDataset.open(tmp_path / "copy").episodes) == 3
