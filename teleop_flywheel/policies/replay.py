"""`replay` policy: play back the commands a recorded episode sent, on their original timing."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from teleop_flywheel.so101 import JOINT_NAMES


@dataclass
class ReplayPolicy:
    checkpoint_id: str
    stamps_ns: np.ndarray
    positions: np.ndarray  # (N, 6), JOINT_NAMES order
    _t0: int | None = None

    @classmethod
    def from_bag(cls, path: str, checkpoint_id: str, topic: str = "/follower/joint_command") -> "ReplayPolicy":
        from teleop_flywheel.data.bag import open_bag

        if not path:
            raise ValueError("replay policy needs policy_args = a bag directory to replay")
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

    def reset(self, state: Sequence[float] | None, t_ns: int) -> None:
        self._t0 = t_ns

    def act(self, state: Sequence[float] | None, t_ns: int) -> list[float] | None:
        if self._t0 is None:
            self.reset(state, t_ns)
        k = int(np.searchsorted(self.stamps_ns, t_ns - (self._t0 or 0), side="right")) - 1
        return [float(v) for v in self.positions[max(k, 0)]]
