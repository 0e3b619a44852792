"""manifest verify catches added, removed and changed episodes; lineage answers the two questions."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from support.fleet import episode

from teleop_flywheel.cli import main as cli_main
from teleop_flywheel.data.lerobot.dataset import LeRobotDataset
from teleop_flywheel.data.provenance.lineage import Registry
from teleop_flywheel.data.provenance.manifest import create, identities, verify
from teleop_flywheel.testing.dataset_files import data_files, drop_episode, rewrite_column
from teleop_flywheel.testing.synthetic_dataset import SyntheticSpec, write
from teleop_flywheel.testing.synthetic_session import SessionSpec, write_session


def make(root: Path, episodes: int = 6, metadata: bool = True) -> Path:
    return write(root, SyntheticSpec(episodes=episodes, min_length=20, max_length=30, seed=7,
                                     episode_metadata=metadata)).root


def test_ids_are_stable_and_content_sensitive(tmp_path: Path) -> None:
    a = identities(LeRobotDataset.open(make(tmp_path / "a", metadata=False)))
    b = identities(LeRobotDataset.open(make(tmp_path / "b", metadata=False)))
    assert a == b  # same content, different directory: same ids
    assert len({e.episode_id for e in a}) == len(a)
    assert all(e.episode_id == e.data_sha256 for e in a)  # no converter ids: addressed by content


@pytest.mark.parametrize("metadata", [True, False], ids=["converter-ids", "content-ids"])
def test_verify_catches_added_removed_changed(tmp_path: Path, metadata: bool,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    root = make(tmp_path / "ds", metadata=metadata)
    manifest = tmp_path / "run.json"
    assert cli_main(["manifest", "create", str(root), "--out", str(manifest)]) == 0
    assert cli_main(["manifest", "verify", str(root), str(manifest)]) == 0
    assert "OK: dataset matches" in capsys.readouterr().out
    frozen = json.loads(manifest.read_text())
    ids = {e["episode_index"]: e["episode_id"] for e in frozen["episodes"]}

    # removed: episode 4 is gone
    drop_episode(root, 4)
    assert cli_main(["manifest", "verify", str(root), str(manifest)]) == 1
    out = capsys.readouterr().out
    assert f"removed episode 4 id {ids[4]}" in out and "MISMATCH" in out

    # changed: one action value of episode 2 edited
    shutil.rmtree(root)
    root = make(root, metadata=metadata)
    def edit(a: np.ndarray) -> np.ndarray:
        a = a.copy()
        a[np.flatnonzero(pq.read_table(data_files(root)[0]).column("episode_index").to_numpy() == 2)[5], 0] += 0.5
        return a
    rewrite_column(root, "action", edit)
    assert cli_main(["manifest", "verify", str(root), str(manifest)]) == 1
    out = capsys.readouterr().out
    assert f"changed episode 2 id {ids[2]}" in out
    assert "added   episode" not in out and "removed episode" not in out

    # added: the dataset has an episode the manifest never saw
    shutil.rmtree(root)
    root = make(root, metadata=metadata)
    older = dict(frozen, episodes=[e for e in frozen["episodes"] if e["episode_index"] != 5])
    (tmp_path / "older.json").write_text(json.dumps(older))
    assert cli_main(["manifest", "verify", str(root), str(tmp_path / "older.json")]) == 1
    out = capsys.readouterr().out
    assert f"added   episode 5 id {ids[5]}" in out
    assert "removed episode" not in out and "changed episode" not in out
    assert cli_main(["manifest", "verify", str(root), str(tmp_path / "older.json"), "--subset"]) == 0


def test_added_episode_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Manifest of a filtered subset; an episode that newly passes the filter is an addition."""
    root = make(tmp_path / "ds")
    ds = LeRobotDataset.open(root)
    manifest = create(ds, ["episode_index<=3"])
    assert manifest["episode_count"] == 4 and manifest["filter"] == ["episode_index<=3"]
    assert verify(ds, manifest).ok
    manifest["episodes"] = manifest["episodes"][:3]  # as if episode 3 had been recorded later
    (tmp_path / "m.json").write_text(json.dumps(manifest))
    assert cli_main(["manifest", "verify", str(root), str(tmp_path / "m.json")]) == 1
    assert "added   episode 3 id" in capsys.readouterr().out


def test_filters(tmp_path: Path) -> None:
    ds = LeRobotDataset.open(make(tmp_path / "ds", episodes=10))
    table = ds.episodes
    assert create(ds, ["outcome=success"])["episode_count"] == int((table["outcome"] == "success").sum())
    assert create(ds, ["operator!=ana", "length>=25"])["episode_count"] == int(
        ((table["operator"] != "ana") & (table["length"] >= 25)).sum())
    assert create(ds, ["task='pick the brick'"])["episode_count"] == 10
    with pytest.raises(ValueError, match="bad filter"):
        create(ds, ["nonsense"])
    with pytest.raises(ValueError, match="unknown column 'colour' at position 1"):
        create(ds, ["colour=red"])


def test_manifests_are_never_overwritten(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = make(tmp_path / "ds")
    out = tmp_path / "run.json"
    out.write_text("{}")
    assert cli_main(["manifest", "create", str(root), "--out", str(out)]) == 2
    assert "manifests are frozen" in capsys.readouterr().err


def test_lineage_answers_which_manifest_and_which_episodes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("TELEOP_FLYWHEEL_LINEAGE", str(tmp_path / "reg" / "lineage.json"))
    root = make(tmp_path / "ds")
    m46, m47 = tmp_path / "run46.json", tmp_path / "run47.json"
    assert cli_main(["manifest", "create", str(root), "--out", str(m46), "--filter", "episode_index<3"]) == 0
    assert cli_main(["manifest", "create", str(root), "--out", str(m47)]) == 0
    assert cli_main(["lineage", "register", "ckpt-046", str(m46)]) == 0
    assert cli_main(["lineage", "register", "ckpt-047", str(m47), "--run", "run47"]) == 0
    assert cli_main(["lineage", "register", "ckpt-047", str(m47), "--run", "run47"]) == 0  # idempotent
    assert cli_main(["lineage", "register", "ckpt-047", str(m46)]) == 2
    assert "never reused" in capsys.readouterr().err
    m47.unlink()  # the registry keeps its own copy
    capsys.readouterr()

    # the model on the robot: a bag recorded with it names the checkpoint in its episode metadata (MCAP)
    bag = write_session(tmp_path / "bag", SessionSpec(duration_s=2.0, policy_checkpoint="ckpt-047")).bag
    assert cli_main(["lineage", "which", str(bag), "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["run"] == "run47" and answer["manifest_path"] == str(m47.resolve())
    assert answer["episode_count"] == 6
    # metadata.yaml is never trusted over the MCAP: an edited copy of the checkpoint there is refused
    meta = bag / "metadata.yaml"
    meta.write_text(meta.read_text().replace("policy_checkpoint: ckpt-047", "policy_checkpoint: ckpt-046"))
    assert cli_main(["lineage", "which", str(bag)]) == 2
    assert "disagree on policy_checkpoint" in capsys.readouterr().err

    assert cli_main(["lineage", "episodes", "run46", "--json"]) == 0
    expected = [e["episode_id"] for e in json.loads(m46.read_text())["episodes"]]
    assert json.loads(capsys.readouterr().out) == expected and len(expected) == 3
    assert Registry.load().episodes("ckpt-047") == [e.episode_id for e in identities(LeRobotDataset.open(root))]
    assert cli_main(["lineage", "which", "ckpt-999"]) == 2
    assert "not in" in capsys.readouterr().err

    # "Which manifest produced the model currently on this robot": the rig's latest policy episode.
    fleet = tmp_path / "fleet"
    episode(fleet, "a1", "rig_a", "ana", 0, 10, "success", "ckpt-046")
    episode(fleet, "a2", "rig_a", "ana", 60, 10, "success", "ckpt-047")
    episode(fleet, "b1", "rig_b", "ben", 120, 10, "success", "ckpt-046")
    episode(fleet, "a3", "rig_a", "ana", 180, 10, "success")  # teleop: no checkpoint, not what runs
    assert cli_main(["lineage", "which", "--rig", "rig_a", str(fleet)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("rig rig_a runs ckpt-047 (its latest policy episode)") and "run run47" in out
    assert cli_main(["lineage", "which", "--rig", "rig_b", str(fleet), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["run"] == "run46"
    assert cli_main(["lineage", "which", "--rig", "rig_c", str(fleet)]) == 2
    assert "no policy episode recorded on rig 'rig_c'" in capsys.readouterr().err
    assert cli_main(["lineage", "which", "ckpt-046", "ckpt-047"]) == 2
