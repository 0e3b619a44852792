"""`WeightedFrameSampler`: training frames drawn in proportion to their episode's sample weight.

Each draw picks an episode with probability w_e / Σw (the weights of `meta/sample_weights.parquet`:
interventions 2–3×, a recency half-life), then one of its frames uniformly: a frame of episode e is
drawn with probability w_e / (Σw · n_e), the rule `data/curation/weights.py` states (w_e / length_e
per frame). Drawn with replacement, `num_samples` indices per pass, so a short episode is not
over-weighted by its length nor a long one by its frame count. `drop_last_frames` leaves the last
frames of each episode out, as LeRobot's `EpisodeAwareSampler` does for policies that read frames
ahead (diffusion's `drop_n_last_frames`).

Indices are positions in the dataset the sampler feeds: `frame_episodes[i]` is the episode of item
i (for a LeRobot dataset loaded with `episodes=[...]`, its rows in load order). Reproducible: the
same seed gives the same sequence of passes. A `torch.utils.data.Sampler` where torch is installed
(the `lerobot` extra); without torch the same class is a plain iterable of ints, so the base
install can import this module and check a draw.
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

import numpy as np


def _sampler_base() -> type:
    try:
        from torch.utils.data import Sampler
    except ModuleNotFoundError:
        return object
    return Sampler


class WeightedFrameSampler(_sampler_base()):  # type: ignore[misc]
    """Frame indices, drawn with replacement, episode by weight, frame uniformly within it."""

    def __init__(self, frame_episodes: Sequence[int] | np.ndarray, weights: Mapping[int, float], num_samples: int,
                 seed: int = 0, drop_last_frames: int = 0) -> None:
        super().__init__()
        if num_samples < 1:
            raise ValueError(f"num_samples must be >= 1, got {num_samples}")
        if drop_last_frames < 0:
            raise ValueError(f"drop_last_frames must be >= 0, got {drop_last_frames}")
        rows = np.asarray(frame_episodes, dtype=np.int64)
        order = np.argsort(rows, kind="stable")  # rows of one episode together, in dataset order
        episodes, starts, counts = np.unique(rows[order], return_index=True, return_counts=True)
        held = {int(e) for e in episodes}
        unweighted = sorted(held - set(weights))
        absent = sorted(set(weights) - held)
        if unweighted or absent:
            raise ValueError("weights and frames name different episodes: "
                             f"frames without a weight {unweighted[:10]}, weights without frames {absent[:10]}")
        w = np.array([float(weights[int(e)]) for e in episodes])
        if not (np.isfinite(w).all() and (w >= 0).all() and w.sum() > 0):
            raise ValueError(f"weights must be finite, >= 0 and not all 0, got {w.tolist()[:10]}")
        eligible = counts - drop_last_frames
        short = [int(e) for e, n, x in zip(episodes, eligible, w, strict=True) if n < 1 and x > 0]
        if short:
            raise ValueError(f"episode(s) {short[:10]} have no frame left after dropping the last "
                             f"{drop_last_frames} of each")
        self.episodes: list[int] = [int(e) for e in episodes]
        self.probabilities: np.ndarray = w / w.sum()  # per episode, in `episodes` order
        self.num_samples = int(num_samples)
        self.seed = int(seed)
        self._order = order
        self._starts = starts
        self._eligible = np.maximum(eligible, 1)
        self._rng = np.random.default_rng(self.seed)

    def __len__(self) -> int:
        return self.num_samples

    def __iter__(self) -> Iterator[int]:
        k = self._rng.choice(len(self.episodes), size=self.num_samples, p=self.probabilities)
        offset = (self._rng.random(self.num_samples) * self._eligible[k]).astype(np.int64)
        yield from self._order[self._starts[k] + offset].tolist()
