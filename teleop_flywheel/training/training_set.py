"""What a training run reads from a frozen manifest: the dataset it was frozen from, the CURRENT
episode index of each manifest episode and each one's sample weight.

The dataset is verified and the episodes found as `manifest episodes` does (`materialize.locate`:
a manifest episode missing or changed is an error, each difference named; episodes are matched by
`episode_id`, so a dataset that gained or renumbered episodes still trains exactly the manifest's).

`training_set` holds the dataset's current version pinned and leased (`commit.pinned`) while a
run reads it: verified, weighed and handed to LeRobot as that one version folder (`files`), so a
commit during the run changes nothing it reads and the version is not collected under it.

Weights come from `meta/sample_weights.parquet` (`data/curation/weights.py`, written by `curate`):
a row is matched by its `episode_id` where it has one, else by its episode index; a manifest episode
without a weight is an error (re-run `curate`). They are normalised over the manifest's episodes.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from teleop_flywheel.data.curation.weights import WEIGHTS_PATH, read_weight_table
from teleop_flywheel.data.errors import DatasetError
from teleop_flywheel.data.lerobot.dataset import LeRobotDataset
from teleop_flywheel.data.provenance.materialize import Located, locate, located


@dataclass(frozen=True)
class TrainingSet:
    """A verified manifest: its dataset and {current episode index: episode_id / weight}."""

    manifest_path: Path
    manifest: dict[str, Any]
    root: Path  # the dataset's path (what lineage and messages name)
    files: Path  # the version read: LeRobot's `--dataset.root` (`root` itself for a dataset without versions)
    episode_ids: dict[int, str]
    weights: dict[int, float]  # normalised to sum to 1 over the manifest's episodes
    weight_rule: dict[str, Any]

    @property
    def episodes(self) -> list[int]:
        """The dataset's current indices of the manifest's episodes, ascending (LeRobot's `--dataset.episodes`)."""
        return sorted(self.episode_ids)

    @property
    def repo_id(self) -> str:
        return str(self.manifest.get("repo_id") or f"local/{self.root.name}")


def load_training_set(manifest_path: str | Path, dataset: str | Path | None = None) -> TrainingSet:
    """Verify the manifest's dataset (or `dataset`), find its episodes and their weights;
    `data.errors.ManifestMismatch` names every difference."""
    return _training_set(locate(Path(manifest_path), Path(dataset) if dataset is not None else None))


@contextmanager
def training_set(manifest_path: str | Path, dataset: str | Path | None = None) -> Iterator[TrainingSet]:
    """`load_training_set` on the dataset's current version, pinned and leased until the block ends."""
    with located(Path(manifest_path), Path(dataset) if dataset is not None else None) as loc:
        yield _training_set(loc)


def _training_set(loc: Located) -> TrainingSet:
    ids = {index: episode_id for episode_id, index in loc.current.items()}
    weights, rule = _weights(loc.ds, ids)
    return TrainingSet(loc.path, loc.manifest, loc.ds.root, loc.ds.files, ids, weights, rule)


def _weights(ds: LeRobotDataset, ids: dict[int, str]) -> tuple[dict[int, float], dict[str, Any]]:
    table, rule = read_weight_table(ds.files)
    by_id: dict[str, float] = {}
    by_index: dict[int, float] = {}
    for row in table.select(["episode_index", "episode_id", "weight"]).to_pylist():
        if row["episode_id"]:
            by_id[str(row["episode_id"])] = float(row["weight"])
        else:
            by_index[int(row["episode_index"])] = float(row["weight"])
    found = {e: by_id[i] if i in by_id else by_index.get(e) for e, i in ids.items()}
    missing = sorted(e for e, w in found.items() if w is None)
    if missing:
        raise DatasetError(f"{ds.root / WEIGHTS_PATH}: no sample weight for manifest episode(s) {missing[:10]} "
                           f"(id {ids[missing[0]][:12]}…); re-run `teleop-flywheel curate {ds.root}`")
    total = sum(w for w in found.values() if w is not None)
    if not total > 0:
        raise DatasetError(f"{ds.root / WEIGHTS_PATH}: the manifest's episodes all weigh 0; re-run curate")
    return {e: float(w) / total for e, w in found.items() if w is not None}, rule
