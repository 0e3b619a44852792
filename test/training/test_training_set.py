"""A manifest turned into what training reads: verified episodes at their current indices, weighted."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from teleop_flywheel.cli import main as cli_main
from teleop_flywheel.data.curation.weights import WEIGHTS_PATH, read_weights
from teleop_flywheel.data.errors import DatasetError, ManifestMismatch
from teleop_flywheel.data.lerobot import commit
from teleop_flywheel.testing.dataset_files import rewrite_column
from teleop_flywheel.testing.synthetic_dataset import SyntheticSpec, write
from teleop_flywheel.training.loop import lerobot_arguments
from teleop_flywheel.training.training_set import load_training_set, training_set


def make(tmp: Path) -> tuple[Path, Path]:
    """6 episodes with curate's weights, and a manifest of all but episode 1."""
    root = write(tmp / "ds", SyntheticSpec(episodes=6, min_length=20, max_length=30, seed=3,
                                           intervention_share=0.5, days_between_episodes=20.0)).root
    assert cli_main(["curate", str(root)]) == 0
    manifest = tmp / "run.json"
    assert cli_main(["manifest", "create", str(root), "--out", str(manifest), "--filter", "episode_index!=1"]) == 0
    return root, manifest


def test_the_manifests_episodes_at_their_indices_with_their_weights(tmp_path: Path) -> None:
    root, manifest = make(tmp_path)
    tset = load_training_set(manifest)
    frozen = json.loads(manifest.read_text())["episodes"]
    assert tset.episodes == [0, 2, 3, 4, 5] and tset.root == root.resolve()
    assert tset.episode_ids == {m["episode_index"]: m["episode_id"] for m in frozen}
    weights, rule = read_weights(root)
    total = sum(weights[e] for e in tset.episodes)
    assert tset.weights == pytest.approx({e: weights[e] / total for e in tset.episodes})
    assert rule == tset.weight_rule and rule["intervention_weight"] == 2.5


def _commit_unchanged(root: Path) -> Path:
    """A new version of `root` with the same files (a plain directory is upgraded to versions first)."""
    with commit.locked_dataset(root):
        commit.new_stage(root)
        return commit.publish(root)


def test_a_run_reads_the_version_it_pinned_and_keeps_it(tmp_path: Path) -> None:
    """LeRobot gets the pinned version folder; the lease keeps it however many commits follow;
    what the run records (the manifest, `root`) is still the dataset's path."""
    root, manifest = make(tmp_path)
    first = _commit_unchanged(root)
    with training_set(manifest) as tset:
        assert tset.files == first and tset.root == root and tset.episodes == [0, 2, 3, 4, 5]
        assert f"--dataset.root={first}" in lerobot_arguments(tset, "act", tmp_path / "run", None, None, None, [])
        assert json.loads(manifest.read_text())["dataset"] == str(root)
        _commit_unchanged(root)
        _commit_unchanged(root)
        assert commit.collect(root, keep_s=0) == [first.with_name("v000000")]  # the upgrade's: nobody leases it
        assert (first / "meta/info.json").is_file()
    assert commit.collect(root, keep_s=0) == [first]  # the run ended: its version goes


def test_weights_are_matched_by_episode_id_not_by_row_or_index(tmp_path: Path) -> None:
    """A weights file whose rows are reordered and whose indices are stale still weighs each episode
    by its id (a dataset renumbered since `curate` ran)."""
    root, manifest = make(tmp_path)
    expected = load_training_set(manifest).weights
    path = root / WEIGHTS_PATH
    table = pq.read_table(path)
    table = table.take(pa.array(np.arange(table.num_rows)[::-1]))
    stale = pa.array(np.arange(table.num_rows, dtype=np.int64) + 100)
    table = table.set_column(table.schema.get_field_index("episode_index"), "episode_index", stale)
    pq.write_table(table, path)
    assert load_training_set(manifest).weights == pytest.approx(expected)


def test_a_manifest_episode_without_a_weight_is_named(tmp_path: Path) -> None:
    root, manifest = make(tmp_path)
    path = root / WEIGHTS_PATH
    table = pq.read_table(path)
    pq.write_table(table.filter(pa.array(table.column("episode_index").to_numpy() != 3)), path)
    with pytest.raises(DatasetError, match=r"no sample weight for manifest episode\(s\) \[3\].*re-run `teleop-fly"):
        load_training_set(manifest)
    path.unlink()
    with pytest.raises(DatasetError, match="no sample weights .*run `teleop-flywheel curate"):
        load_training_set(manifest)


def test_a_changed_episode_is_an_error_naming_it(tmp_path: Path) -> None:
    root, manifest = make(tmp_path)
    ep = pq.read_table(next((root / "data").rglob("*.parquet"))).column("episode_index").to_numpy()
    rewrite_column(root, "action", lambda a: np.where((ep == 3)[:, None], a + np.float32(1.0), a))
    with pytest.raises(ManifestMismatch, match=r"differs from manifest .*run.json in 1 place") as err:
        load_training_set(manifest)
    assert err.value.exit_code == 1 and len(err.value.details) == 1
    assert err.value.details[0].startswith("changed episode 3 id ") and "data rows" in err.value.details[0]
    load_training_set(manifest, dataset=make(tmp_path / "again")[0])  # an unchanged copy elsewhere trains (--dataset)
