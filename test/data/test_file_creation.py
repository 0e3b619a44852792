"""Files the engine writes: never-overwritten ones are created exclusively, replaced ones atomically.

Each test plants a symlink where the old writers put their predictable temp file (`X.tmp`) or the
file itself, pointing at a file the attacker wants overwritten; nothing may be written through it.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from teleop_flywheel.cli import main as cli_main
from teleop_flywheel.data.lerobot import v3_layout
from teleop_flywheel.data.provenance.lineage import Registry
from teleop_flywheel.recording.mcap.metadata import METADATA_FILE, bagfile_information, write_metadata_yaml
from teleop_flywheel.recording.mcap.writer import BagWriter
from teleop_flywheel.testing.synthetic_dataset import SyntheticSpec, write


def _victim(tmp_path: Path) -> Path:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    return victim


def test_metadata_yaml_is_not_written_through_a_planted_temp_symlink(tmp_path: Path) -> None:
    victim = _victim(tmp_path)
    bag = BagWriter(tmp_path / "bag")
    bag.add_topic("/t", "std_msgs/msg/String")
    (tmp_path / "bag" / (METADATA_FILE + ".tmp")).symlink_to(victim)
    bag.close()
    assert victim.read_text() == "precious"
    assert (tmp_path / "bag" / METADATA_FILE).is_file() and not (tmp_path / "bag" / METADATA_FILE).is_symlink()
    # never overwritten: a second write of the same bag's metadata.yaml is refused
    with pytest.raises(FileExistsError):
        write_metadata_yaml(tmp_path / "bag", bagfile_information("bag_0.mcap", [], None, None, None))


def test_info_json_is_not_written_through_a_planted_temp_symlink(tmp_path: Path) -> None:
    victim = _victim(tmp_path)
    (tmp_path / "meta").mkdir()
    (tmp_path / "meta" / "info.json.tmp").symlink_to(victim)
    v3_layout.write_json(tmp_path / v3_layout.INFO_PATH, {"a": 1})
    v3_layout.write_json(tmp_path / v3_layout.INFO_PATH, {"a": 2})
    assert victim.read_text() == "precious"
    assert json.loads((tmp_path / v3_layout.INFO_PATH).read_text()) == {"a": 2}


def test_manifest_is_created_exclusively(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    victim = _victim(tmp_path)
    root = write(tmp_path / "ds", SyntheticSpec(episodes=2, min_length=10, max_length=12, seed=1)).root
    out = tmp_path / "run.json"
    (tmp_path / "run.json.tmp").symlink_to(victim)
    assert cli_main(["manifest", "create", str(root), "--out", str(out)]) == 0
    assert victim.read_text() == "precious" and json.loads(out.read_text())["episode_count"] == 2
    dangling = tmp_path / "run2.json"
    dangling.symlink_to(tmp_path / "elsewhere.json")  # a link to a file that does not exist yet
    assert cli_main(["manifest", "create", str(root), "--out", str(dangling)]) == 2  # a usage error: one line
    assert not (tmp_path / "elsewhere.json").exists()
    assert "never overwritten" in capsys.readouterr().err


def test_lineage_registry_is_not_written_through_a_planted_temp_symlink(tmp_path: Path) -> None:
    victim = _victim(tmp_path)
    root = write(tmp_path / "ds", SyntheticSpec(episodes=2, min_length=10, max_length=12, seed=1)).root
    manifest = tmp_path / "run.json"
    assert cli_main(["manifest", "create", str(root), "--out", str(manifest)]) == 0
    registry = tmp_path / "lineage.json"
    (tmp_path / "lineage.json.tmp").symlink_to(victim)
    reg = Registry.load(registry)
    reg.register("ckpt-1", manifest)
    reg.save()
    assert victim.read_text() == "precious"
    assert Registry.load(registry).which("ckpt-1")["run"] == "run"
