"""Lineage follows an export: which export of which episodes trained a checkpoint another stack made.

A real export (hdf5-aloha, from a manifest and of a whole dataset) registers itself; a checkpoint
directory, as ACT's training writes one, is registered against the export's directory; `lineage
which` answers from the checkpoint back to the manifest and the dataset. Oracles: the manifest file
and the episodes table (pyarrow), the exported files' own recorded attributes (h5py), sha256 of the
files computed here.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest
from support import aloha_data as ad
from support.cli import run_cli

from teleop_flywheel.data.provenance.lineage import Registry, source_summary

h5py = pytest.importorskip("h5py", reason="h5py is the hdf5 extra: pip install '.[hdf5]'")


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> dict[str, Path]:
    monkeypatch.setenv("TELEOP_FLYWHEEL_LINEAGE", str(tmp_path / "reg" / "lineage.json"))
    ds = ad.converted(tmp_path)
    manifest = tmp_path / "pick.json"
    for argv in (["manifest", "create", str(ds), "--out", str(manifest), "--filter", "episode_index==1"],
                 ["export", str(manifest), "--to", "hdf5-aloha", "--jpeg", "50", str(tmp_path / "act_data")],
                 ["export", str(ds), "--to", "hdf5-aloha", str(tmp_path / "all")]):
        code, _, err = run_cli(capsys, *argv)
        assert code == 0, err
    ckpt = tmp_path / "ckpt_act"  # what ACT's imitate_episodes.py leaves in its ckpt_dir
    ckpt.mkdir()
    (ckpt / "policy_best.ckpt").write_bytes(b"weights" * 100)
    (ckpt / "dataset_stats.pkl").write_bytes(b"stats")
    return {"root": tmp_path, "ds": ds, "manifest": manifest, "export": tmp_path / "act_data",
            "all": tmp_path / "all", "ckpt": ckpt}


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_checkpoint_trained_on_an_export_answers_with_its_episodes_manifest_and_dataset(
        world: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "lineage", "register", str(world["ckpt"]), str(world["export"]), "--run", "act1")
    assert code == 0, err
    manifest = json.loads(world["manifest"].read_text())
    episode_id = manifest["episodes"][0]["episode_id"]
    with h5py.File(world["export"] / "episode_0.hdf5", "r") as f:  # what the file itself records
        assert f.attrs["episode_id"] == episode_id and f.attrs["source_episode_index"] == 1

    code, out, err = run_cli(capsys, "lineage", "which", str(world["ckpt"]), "--json")
    assert code == 0, err
    answer = json.loads(out)
    assert answer["run"] == "act1" and answer["checkpoint_path"] == str(world["ckpt"].resolve())
    exported = answer["exported"]
    assert exported["format"] == "hdf5-aloha" and exported["out"] == str(world["export"].resolve())
    assert exported["options"] == {"jpeg": 50}
    assert exported["files"] == {"episode_0.hdf5": _sha(world["export"] / "episode_0.hdf5")}
    assert exported["episodes"] == [{"episode_id": episode_id, "source_episode_index": 1, "file": "episode_0.hdf5"}]
    assert answer["manifest_path"] == str(world["manifest"].resolve())
    assert answer["fingerprint"] == manifest["fingerprint"] and answer["episode_count"] == 1
    assert exported["source_dataset"] == os.path.abspath(world["ds"])

    code, out, _ = run_cli(capsys, "lineage", "which", str(world["ckpt"]))
    assert code == 0
    lines = out.splitlines()  # checkpoint -> export -> episodes -> manifest -> dataset, in that order
    assert lines[0].startswith("checkpoint ckpt_act:") and "run act1" in lines[0]
    order = [next(i for i, line in enumerate(lines) if line.strip().startswith(k))
             for k in ("export", "episodes", "manifest", "dataset")]
    assert order == sorted(order)
    assert "hdf5-aloha" in lines[order[0]] and "(source indices 1)" in lines[order[1]]
    assert str(world["manifest"].resolve()) in lines[order[2]] and manifest["dataset"] in lines[order[3]]

    code, out, _ = run_cli(capsys, "lineage", "episodes", "act1", "--json")
    assert code == 0 and json.loads(out) == [episode_id]
    code, out, _ = run_cli(capsys, "lineage", "which", str(world["export"]))  # and from the export's side
    assert code == 0 and "trained    " + answer["checkpoint"] in out
    reg = Registry.load()  # an evaluation report's lineage column
    summary = source_summary(reg.which(answer["checkpoint"]), reg)
    assert summary.startswith(f"run act1, export {exported['export']}") and "(1 episodes)" in summary


def test_the_export_is_found_by_its_content_wherever_it_lies(world: dict[str, Path],
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    moved = world["root"] / "copied_to_the_gpu_box"
    shutil.copytree(world["all"], moved)
    code, _, err = run_cli(capsys, "lineage", "register", "act-run-7", str(moved))
    assert code == 0, err
    code, out, _ = run_cli(capsys, "lineage", "which", "act-run-7", "--json")
    answer = json.loads(out)
    table = ad.episodes_table(world["ds"])
    assert [e["episode_id"] for e in answer["exported"]["episodes"]] == list(table["episode_id"])
    assert answer["exported"]["out"] == str(world["all"].resolve()) and "manifest_path" not in answer
    code, out, _ = run_cli(capsys, "lineage", "which", "act-run-7")
    assert "none: the whole dataset was exported" in out and os.path.abspath(world["ds"]) in out
    code, _, _ = run_cli(capsys, "lineage", "register", "act-run-7", str(moved))
    assert code == 0  # the same pair again: a no-op
    code, _, err = run_cli(capsys, "lineage", "register", "act-run-7", str(world["export"]))
    assert code == 2 and "never reused" in err
    renamed = world["root"] / "pick"  # a manifest is told from an export's file by its content, not its name
    renamed.write_bytes(world["manifest"].read_bytes())
    code, _, err = run_cli(capsys, "lineage", "register", "ckpt-m", str(renamed))
    assert code == 0, err

    edited = world["root"] / "edited"
    shutil.copytree(world["all"], edited)
    with h5py.File(edited / "episode_1.hdf5", "a") as f:
        f["/action"][0, 0] += 1.0
    code, _, err = run_cli(capsys, "lineage", "register", "act-run-8", str(edited))
    assert code == 2 and "not the output of an export registered" in err.strip().splitlines()[-1]
    code, out, _ = run_cli(capsys, "lineage", "list")
    assert code == 0 and out.count("hdf5-aloha:") == 3  # act-run-7's line and the two exports
