"""Manifests cover everything training reads (ids v2): videos, episode fields, task texts, files.

Each edit below passed `manifest verify` before (a v1 manifest hashed the data rows only); now the
verification names the episode and the file. Appending episodes leaves a manifest of the earlier
ones valid. A manifest of format 1 or 2 is refused naming `teleop-flywheel migrate`, which upgrades
it when the dataset still holds what it froze (and refuses, naming the episode, when not).
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from teleop_flywheel.cli import main as cli_main
from teleop_flywheel.data.convert import converter as conv
from teleop_flywheel.data.lerobot.dataset import LeRobotDataset
from teleop_flywheel.recording.mcap.reader import open_bag
from teleop_flywheel.testing.synthetic_session import SessionSpec, write_session

SPEC = dict(duration_s=2.5, width=256, height=192)


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("manifest_v2")
    bags = [write_session(root / "bags" / f"ep{i}", SessionSpec(seed=40 + i, task=f"task {i % 2}", **SPEC)).bag
            for i in range(3)]
    ds = root / "ds"
    conv.convert(bags[:2], ds, codec="h264", workers=1, progress=False)
    manifest = root / "run.json"
    assert cli_main(["manifest", "create", str(ds), "--out", str(manifest)]) == 0
    swapped = root / "swapped"
    conv.convert([bags[1], bags[0]], swapped, codec="h264", workers=1, progress=False)
    return {"ds": ds, "manifest": manifest, "swapped": swapped, "bag2": bags[2], "root": root, "bag0": bags[0]}


def _verify(ds: Path, manifest: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str]:
    code = cli_main(["manifest", "verify", str(ds), str(manifest), *extra])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def _copy(made: dict[str, Path], tmp_path: Path) -> Path:
    ds = tmp_path / "ds"
    shutil.copytree(made["ds"], ds)
    return ds


def test_manifest_v3_records_what_it_covers(made: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    m = json.loads(made["manifest"].read_text())
    assert m["format"] == "teleop_flywheel.manifest/4" and m["id_version"] == 2
    assert sorted(m["files"]) == ["data/chunk-000/file-000.parquet",
                                  "videos/observation.images.wrist/chunk-000/file-000.mp4"]
    e = m["episodes"][0]
    assert e["episode_id"] == open_bag(made["bag0"]).episode_id
    assert {"row_sha256", "task_sha256", "data_file"} <= set(e) and e["videos"]["observation.images.wrist"]["sha256"]
    code, out = _verify(made["ds"], made["manifest"], capsys)
    assert code == 0 and "OK: dataset matches" in out and "ids v2" in out


def test_a_flipped_video_byte_names_file_and_episode(made: dict[str, Path], tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    ds = _copy(made, tmp_path)
    video = next((ds / "videos").rglob("*.mp4"))
    data = bytearray(video.read_bytes())
    data[len(data) // 3] ^= 0x40  # inside the packets of the first episode
    video.write_bytes(bytes(data))
    code, out = _verify(ds, made["manifest"], capsys)
    assert code == 1 and "changed file videos/observation.images.wrist/chunk-000/file-000.mp4" in out
    assert "changed episode 0" in out and "video observation.images.wrist" in out


def test_episodes_reordered_in_the_video_are_named(made: dict[str, Path], tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    ds = _copy(made, tmp_path)
    rel = "videos/observation.images.wrist/chunk-000/file-000.mp4"
    shutil.copy(made["swapped"] / rel, ds / rel)  # the same two episodes, the other way round
    code, out = _verify(ds, made["manifest"], capsys)
    assert code == 1 and f"changed file {rel}" in out
    assert "changed episode 0" in out and "changed episode 1" in out


def test_a_flipped_outcome_and_an_edited_task_are_named(made: dict[str, Path], tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    ds = _copy(made, tmp_path)
    path = ds / "meta/episodes/chunk-000/file-000.parquet"
    t = pq.read_table(path)
    outcome = t.column("outcome").to_pylist()
    outcome[1] = "failure"
    pq.write_table(t.set_column(t.schema.get_field_index("outcome"), "outcome", pa.array(outcome)), path)
    code, out = _verify(ds, made["manifest"], capsys)
    assert (
        code == 1 and "changed episode 1" in out and "episodes-table fields" in out and "changed episode 0" not in out
    )
    ds2 = tmp_path / "ds2"
    shutil.copytree(made["ds"], ds2)
    tasks = pd.read_parquet(ds2 / "meta/tasks.parquet")
    tasks.index = pd.Index([t.replace("task 0", "task zero") for t in tasks.index], name="task")
    tasks.to_parquet(ds2 / "meta/tasks.parquet")
    code, out = _verify(ds2, made["manifest"], capsys)
    assert code == 1 and "changed episode 0" in out and "task text (meta/tasks.parquet)" in out
    assert "changed episode 1" not in out


def test_a_parquet_flip_names_the_file(
    made: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ds = _copy(made, tmp_path)
    path = ds / "data/chunk-000/file-000.parquet"
    t = pq.read_table(path)
    col = t.column("complementary_info.blend_weight").to_pylist()
    col[-1] += 0.25  # a value of the last episode
    pq.write_table(t.set_column(t.schema.get_field_index("complementary_info.blend_weight"),
                                "complementary_info.blend_weight", pa.array(col, pa.float32())), path)
    code, out = _verify(ds, made["manifest"], capsys)
    assert code == 1 and "changed file data/chunk-000/file-000.parquet" in out and "changed episode 1" in out
    assert "data rows" in out


def test_appending_keeps_a_manifest_of_earlier_episodes_valid(made: dict[str, Path], tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    ds = _copy(made, tmp_path)
    assert len(conv.convert([made["bag2"]], ds, codec="h264", workers=1, progress=False).converted) == 1
    code, out = _verify(ds, made["manifest"], capsys, "--subset")
    assert code == 0, out
    code, out = _verify(ds, made["manifest"], capsys)
    assert code == 1 and "added   episode 2" in out


def _old_manifests(made: dict[str, Path], tmp_path: Path) -> dict[int, Path]:
    """The manifests `manifest create` wrote before format 3, of the same dataset: format 1 (ids v1 and
    data rows) and format 2 (ids v1 beside v2; no nulls in this dataset's rows, so its row hashes agree)."""
    m = json.loads(made["manifest"].read_text())
    ds = LeRobotDataset.open(made["ds"])
    v1_ids = dict(zip(ds.episodes["episode_index"], ds.episodes["episode_id_v1"], strict=True))
    v2 = m | {"format": "teleop_flywheel.manifest/2",
              "episodes": [e | {"episode_id_v1": v1_ids[e["episode_index"]]} for e in m["episodes"]]}
    v1 = {"format": "teleop_flywheel.manifest/1", "created": m["created"], "dataset": m["dataset"], "repo_id": "",
          "filter": [], "fingerprint": "x", "episode_count": 2, "frame_count": m["frame_count"],
          "episodes": [{"episode_index": e["episode_index"], "episode_id": v1_ids[e["episode_index"]],
                        "data_sha256": e["data_sha256"], "length": e["length"], "task": e["task"]}
                       for e in m["episodes"]]}
    out = {1: tmp_path / "v1.json", 2: tmp_path / "v2.json"}
    for version, doc in ((1, v1), (2, v2)):
        out[version].write_text(json.dumps(doc))
    return out


@pytest.mark.parametrize("version", [1, 2])
def test_an_old_manifest_is_refused_then_migrated(version: int, made: dict[str, Path], tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    old = _old_manifests(made, tmp_path)[version]
    code, out = _verify(made["ds"], old, capsys)
    assert code == 2 and f"manifest format v{version} is older than this reader" in out
    assert f"run `teleop-flywheel migrate {old}`" in out
    assert cli_main(["lineage", "--registry", str(tmp_path / "reg.json"), "register", "ckpt-1", str(old)]) == 2
    assert "teleop-flywheel migrate" in capsys.readouterr().err

    before = old.read_bytes()
    assert cli_main(["migrate", str(old)]) == 0
    out = capsys.readouterr().out
    assert f"manifest: v{version} -> v4: 2 episodes" in out and "the original" in out and old.read_bytes() == before
    new = tmp_path / f"v{version}.migrated.json"
    assert json.loads(new.read_text())["episodes"] == json.loads(made["manifest"].read_text())["episodes"]
    code, out = _verify(made["ds"], new, capsys)
    assert code == 0 and "OK: dataset matches" in out
    assert cli_main(["lineage", "--registry", str(tmp_path / "reg.json"), "register", "ckpt-1", str(new)]) == 0
    assert cli_main(["migrate", str(new)]) == 0 and "already in the current format" in capsys.readouterr().out


def test_migrate_refuses_an_old_manifest_whose_dataset_changed(made: dict[str, Path], tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    old = _old_manifests(made, tmp_path)[2]
    ds = _copy(made, tmp_path)
    path = next((ds / "meta" / "episodes").rglob("*.parquet"))
    table = pq.read_table(path).to_pandas()
    table.loc[table["episode_index"] == 1, "outcome"] = "failure"  # flipped after the manifest was frozen
    pq.write_table(pa.Table.from_pandas(table, preserve_index=False), path)
    assert cli_main(["migrate", str(old), "--dataset", str(ds)]) == 1
    err = capsys.readouterr().err
    assert "no longer holds what this manifest froze" in err and "episode 1" in err and "episodes-table row" in err
    assert not (tmp_path / "v2.migrated.json").exists()
