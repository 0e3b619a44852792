"""`replay` policy: play back the commands of a recorded episode, on its original timing.

`policy_args` is either

* `BAG_DIR` — an episode bag of this project: `/follower/joint_command` at its recorded stamps; or
* `DATASET_DIR#EPISODE_INDEX[,calibration=FILE]` — one episode of a LeRobot v3.0 dataset: its
  `action` column (LeRobot units: degrees, gripper 0–100) converted to radians through the
  follower calibration `FILE` (datasets do not carry one): required on a real follower, where a
  simulator's is refused; on a simulated one the shipped `config/calibration/follower_sim.yaml`
  (the one the converter falls back to) when none is named (`base.follower_calibration`). Frame k
  plays from k/fps on (`frame_index`, `meta/info.json` fps). Read with the project's own dataset
  reader: no LeRobot install needed.

Either way the command in effect at time t after `reset` is the latest one recorded at or before t;
after the last one it holds.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from teleop_flywheel.core.bag_topics import FOLLOWER_COMMAND
from teleop_flywheel.core.so101 import JOINT_NAMES
from teleop_flywheel.policies.base import NO_IMAGES, Images, Policy, follower_calibration, split_args
from teleop_flywheel.recording.mcap.reader import open_bag

if TYPE_CHECKING:
    from teleop_flywheel.data.lerobot.dataset import Feature

DATASET_KEYS = ("calibration",)


@dataclass
class ReplayPolicy(Policy):
    checkpoint_id: str
    stamps_ns: np.ndarray  # offsets from the episode's first command, ascending
    positions: np.ndarray  # (N, 6), JOINT_NAMES order, radians
    cameras: tuple[str, ...] = field(default=(), init=False)
    _t0: int | None = None

    @classmethod
    def from_args(cls, args: str, checkpoint_id: str, simulated: bool) -> ReplayPolicy:
        """A bag directory, or `DATASET_DIR#EPISODE_INDEX[,calibration=FILE]` (module docstring);
        `simulated`: the follower is a simulator (a dataset may then be replayed without FILE)."""
        if not args:
            raise ValueError("replay policy needs policy_args = a bag directory or DATASET_DIR#EPISODE_INDEX")
        target, options = split_args(args, DATASET_KEYS)
        root, sep, episode = target.partition("#")
        if sep:
            return cls.from_dataset(root, episode, checkpoint_id, options.get("calibration", ""), simulated)
        if (Path(root) / "meta" / "info.json").is_file():
            raise ValueError(f"{root}: a LeRobot dataset; name the episode to replay as {root}#EPISODE_INDEX")
        if options:
            raise ValueError(f"{root}: options {sorted(options)} apply to dataset replay only (DIR#EPISODE)")
        return cls.from_bag(root, checkpoint_id)

    @classmethod
    def from_bag(cls, path: str, checkpoint_id: str, topic: str = FOLLOWER_COMMAND) -> ReplayPolicy:
        bag = open_bag(path)
        if not bag.has(topic):
            raise ValueError(f"{path}: bag has no {topic} to replay")
        js = bag.joint_state(topic)
        missing = [n for n in JOINT_NAMES if n not in js.names]
        if missing:
            raise ValueError(f"{path}: {topic} lacks joints {missing}")
        cols = [js.names.index(n) for n in JOINT_NAMES]
        return cls(checkpoint_id or f"replay:{bag.episode_id[:12]}", js.stamps_ns - js.stamps_ns[0],
                   np.asarray(js.position)[:, cols])

    @classmethod
    def from_dataset(cls, root: str, episode: str, checkpoint_id: str, calibration: str,
                     simulated: bool) -> ReplayPolicy:
        """One episode's `action` of a LeRobot v3.0 dataset, in radians through `calibration` (the
        follower's; `follower_calibration` decides when it may be left empty), on the dataset's
        frame grid."""
        from teleop_flywheel.data.lerobot.dataset import ACTION, LeRobotDataset, episode_spans

        path = Path(root)
        if not path.is_dir():
            raise ValueError(f"{path}: no such dataset directory")
        try:
            index = int(episode)
        except ValueError:
            raise ValueError(f"{path}#{episode}: the episode must be an integer episode_index") from None
        cal = follower_calibration(calibration, simulated)
        ds = LeRobotDataset.open(path)
        if ACTION not in ds.features:
            raise ValueError(f"{path}: dataset has no {ACTION!r} feature to replay")
        cols = _action_columns(ds.features[ACTION], f"{path}: {ACTION}")
        known = ds.episodes["episode_index"].astype(int).tolist()
        if index not in known:
            raise ValueError(f"{path}: episode {index} out of range (the dataset has {len(known)} episodes, "
                             f"episode_index {min(known)}..{max(known)})")
        data = ds.columns(["episode_index", "frame_index", ACTION])
        spans = episode_spans(data["episode_index"], data["frame_index"])
        at = np.flatnonzero(spans.episode_index == index)
        if len(at) == 0:
            raise ValueError(f"{path}: episode {index} is listed in meta/episodes but has no data rows")
        rows = slice(int(spans.start[at[0]]), int(spans.stop[at[0]]))
        frames = spans.take(data["frame_index"])[rows].astype(np.int64)
        action = spans.take(data[ACTION])[rows][:, cols]
        stamps = np.round((frames - frames[0]) * (1e9 / ds.fps)).astype(np.int64)
        row = ds.episodes.loc[ds.episodes["episode_index"] == index].iloc[0]
        eid = row.get("episode_id")
        source = eid[:12] if isinstance(eid, str) and eid else f"{path.name}#{index}"
        return cls(checkpoint_id or f"replay:{source}", stamps, cal.lerobot_to_rad(action))

    def reset(self, state: Sequence[float] | None, t_ns: int) -> None:
        self._t0 = t_ns

    def act(self, state: Sequence[float] | None, t_ns: int, images: Images = NO_IMAGES) -> list[float] | None:
        if self._t0 is None:
            self.reset(state, t_ns)
        k = int(np.searchsorted(self.stamps_ns, t_ns - (self._t0 or 0), side="right")) - 1
        return [float(v) for v in self.positions[max(k, 0)]]



def make_policy(args: str, checkpoint_id: str, *, simulated: bool) -> ReplayPolicy:
    """Entry point `replay` (teleop_flywheel.policies): its timeline goes on through a takeover."""
    return ReplayPolicy.from_args(args, checkpoint_id, simulated)

def _action_columns(feature: Feature, where: str) -> list[int]:
    """Columns of the six SO-101 joints in JOINT_NAMES order, from LeRobot's `<joint>.pos` names."""
    if feature.names is None and feature.width == len(JOINT_NAMES):  # unnamed: trust the order
        return list(range(len(JOINT_NAMES)))
    names = list(feature.names or ())
    for candidate in ([f"{j}.pos" for j in JOINT_NAMES], list(JOINT_NAMES)):
        if all(c in names for c in candidate):
            return [names.index(c) for c in candidate]
    raise ValueError(f"{where}: names {names} are not the SO-101 joints {[f'{j}.pos' for j in JOINT_NAMES]}")
