"""`recover --fix-schemas`: a Foxglove-readable copy of a bag recorded before the schema fix.

The old bag is written as the recorder wrote it before commit 2adad37 (`MSG: std_msgs/msg/Header`
dependency headers); Foxglove's own parser (npm `@foxglove/rosmsg`, run by node as in
test_foxglove_parsers.py) cannot decode its stamped topics. The copy decodes there, keeps every
message and the episode metadata (same content ids), and the original is not touched.
"""
from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from support.paths import FOXGLOVE_NPM

from teleop_flywheel.cli import main as cli_main
from teleop_flywheel.core.episode import METADATA_RECORD, EpisodeMeta
from teleop_flywheel.recording.mcap import msgdefs
from teleop_flywheel.recording.mcap.fix_schemas import fixed_text
from teleop_flywheel.recording.mcap.reader import open_bag, open_indexed
from teleop_flywheel.recording.mcap.writer import BagWriter, mcap_file_name
from teleop_flywheel.testing.synthetic_session import SessionSpec, write_session

FOXGLOVE = FOXGLOVE_NPM


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


def _decode(mcap: Path) -> dict[str, dict[str, object]]:
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        pytest.skip("node/npm not on this machine (Foxglove's parsers are npm packages)")
    if not (FOXGLOVE / "node_modules" / "@foxglove" / "rosmsg").is_dir():
        subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--silent"], cwd=FOXGLOVE, check=True, timeout=300)
    out = subprocess.run(["node", str(FOXGLOVE / "decode_bag.mjs"), str(mcap)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["topics"]


def _hashes(root: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.iterdir())}


def test_fixed_text_names_dependencies_as_written() -> None:
    old = _old_form("sensor_msgs/msg/JointState").text
    assert "MSG: std_msgs/msg/Header" in old
    assert fixed_text(old) == msgdefs.definition("sensor_msgs/msg/JointState").text


def test_fix_schemas_writes_a_foxglove_readable_copy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = write_session(tmp_path / "src", SessionSpec(duration_s=2.0, session_kind="policy", width=256, height=192,
                                                      interventions=((0.5, 1.0, "too_slow"),))).bag
    bag = old_bag(src, tmp_path / "episode_old")
    before = _hashes(bag)
    broken = _decode(bag / mcap_file_name(bag.name))
    assert broken["/follower/joint_states"]["errors"] and broken["/cameras/wrist/image/compressed"]["errors"]

    assert cli_main(["recover", "--fix-schemas", str(bag)]) == 0
    assert "the original is unchanged" in capsys.readouterr().out
    copy = tmp_path / "episode_old_foxglove"
    assert _hashes(bag) == before and sorted(p.name for p in tmp_path.iterdir()) == \
        ["episode_old", "episode_old_foxglove", "src"]
    fixed = _decode(copy / mcap_file_name(copy.name))
    assert set(fixed) == set(broken)
    for topic, entry in fixed.items():
        assert entry["errors"] == [], (topic, entry["errors"][:1])
        assert entry["count"] == len(open_bag(bag).raw(topic))
    a, b = open_bag(bag), open_bag(copy)
    assert b.damage == [] and (a.episode_id, a.episode_id_v1) == (b.episode_id, b.episode_id_v1)

    assert cli_main(["recover", "--fix-schemas", str(bag)]) == 2  # never overwritten
    assert "refusing to overwrite" in capsys.readouterr().err
    assert cli_main(["recover", "--fix-schemas", str(src)]) == 0  # already in rosbag2's form
    assert "nothing to fix" in capsys.readouterr().out and not (tmp_path / "src_foxglove").exists()
