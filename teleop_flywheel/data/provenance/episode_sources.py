"""What was recorded, episode by episode: the records of a dataset made by `convert`, or of bags.

`stats`, `rollout status` and `lineage which --rig` all ask the same question of a folder: which
episodes, recorded when, on which rig, by whom, with which checkpoint. Bags are read through each
MCAP's episode metadata record (via the summary index; no message is decoded), never from
metadata.yaml alone: a bag whose metadata.yaml disagrees with its MCAP is refused, naming it.
"""
from __future__ import annotations

from pathlib import Path

from teleop_flywheel.data.errors import DatasetError
from teleop_flywheel.data.lerobot.dataset import INFO_PATH, LeRobotDataset
from teleop_flywheel.data.lerobot.episode_table import EpisodeRecord, episode_records, record_from_meta
from teleop_flywheel.data.validate.validator import find_bags
from teleop_flywheel.recording.mcap.exceptions import BagReadError
from teleop_flywheel.recording.mcap.reader import read_episode


def bag_records(paths: list[Path]) -> list[EpisodeRecord]:
    """Episode metadata of every bag under the given paths, from each MCAP's episode record (never
    metadata.yaml alone: a bag whose metadata.yaml disagrees with its MCAP is refused, naming it)."""
    bags, errors = find_bags(list(paths))
    if not bags:
        raise DatasetError(f"no bags under {', '.join(map(str, paths))}" + (f" ({errors[0]})" if errors else ""))
    out = []
    for i, bag in enumerate(bags):
        try:
            meta = read_episode(bag)
        except BagReadError as exc:
            raise DatasetError(str(exc)) from None
        if meta is None:
            raise DatasetError(f"{bag}: no episode metadata record (a foreign bag?): nothing to count")
        out.append(record_from_meta(meta, episode_index=i, episode_id=bag.name))
    return out


def records_for(paths: list[Path]) -> list[EpisodeRecord]:
    """The episode records of one dataset made by `convert`, or of the bags under `paths`."""
    if len(paths) == 1 and (paths[0] / INFO_PATH).is_file():
        return episode_records(LeRobotDataset.open(paths[0]))
    return bag_records(paths)
