"""WeightedFrameSampler: frames drawn in proportion to the episodes' sample weights, over the
manifest's episodes only, reproducibly.

The statistical bounds, stated: with N draws, an episode of probability p_e is drawn n_e ~
Binomial(N, p_e) times; every episode must satisfy |n_e - N p_e| <= 4 sqrt(N p_e (1 - p_e))
(two-sided 4 sigma: a false alarm per episode about 6e-5, about 5e-4 over the episodes here). Over
single frames (each episode's weight spread evenly over its frames), Pearson's chi-square of the
frame counts must stay below its critical value at p = 0.001 (Wilson–Hilferty's approximation of
the chi-square quantile, exact to a few tenths of a percent at these degrees of freedom). Draws are
seeded, so each test is deterministic; the bound is what makes it meaningful: uniform frame
sampling (LeRobot's default shuffle) fails the per-episode bound on the same data.
"""
from __future__ import annotations

import importlib.util
import math

import numpy as np
import pytest

from teleop_flywheel.cli import main as cli_main
from teleop_flywheel.data.lerobot.dataset import LeRobotDataset
from teleop_flywheel.testing.synthetic_dataset import SyntheticSpec, write
from teleop_flywheel.training import WeightedFrameSampler
from teleop_flywheel.training.training_set import TrainingSet, load_training_set

N = 60_000
Z_999 = 3.0902  # the standard normal's 0.999 quantile


@pytest.fixture(scope="module")
def tset(tmp_path_factory: pytest.TempPathFactory) -> TrainingSet:
    """8 episodes of 20-60 frames, 10 days apart, some with interventions; the manifest leaves out episode 2."""
    tmp = tmp_path_factory.mktemp("weighted")
    root = write(tmp / "ds", SyntheticSpec(episodes=8, min_length=20, max_length=60, seed=11,
                                           intervention_share=0.5, days_between_episodes=10.0)).root
    assert cli_main(["curate", str(root)]) == 0
    manifest = tmp / "run.json"
    assert cli_main(["manifest", "create", str(root), "--out", str(manifest), "--filter", "episode_index!=2"]) == 0
    return load_training_set(manifest)


def frame_episodes(tset: TrainingSet) -> np.ndarray:
    """The episode of each row of the manifest's episodes, in file order (as LeRobot loads a subset)."""
    ep = LeRobotDataset.open(tset.root).column("episode_index").astype(np.int64)
    return ep[np.isin(ep, tset.episodes)]


def per_episode_bound_violations(counts: dict[int, int], p: dict[int, float], n: int) -> list[int]:
    return [e for e, pe in p.items() if abs(counts.get(e, 0) - n * pe) > 4 * math.sqrt(n * pe * (1 - pe))]


def chi_square_critical(df: int) -> float:
    """Wilson–Hilferty: the chi-square quantile at 1 - 0.001."""
    return df * (1 - 2 / (9 * df) + Z_999 * math.sqrt(2 / (9 * df))) ** 3


def test_frames_are_drawn_by_episode_weight_and_evenly_within_an_episode(tset: TrainingSet) -> None:
    rows = frame_episodes(tset)
    sampler = WeightedFrameSampler(rows, tset.weights, num_samples=N, seed=5)
    drawn = np.fromiter(sampler, dtype=np.int64)
    assert len(drawn) == len(sampler) == N and drawn.min() >= 0 and drawn.max() < len(rows)
    assert set(rows[drawn].tolist()) == set(tset.episodes)  # the manifest's episodes, and only those
    weights = np.array([tset.weights[e] for e in tset.episodes])
    assert len(set(np.round(weights / weights.min(), 3))) >= 4, "weights too alike for the test to mean much"

    counts = dict(zip(*np.unique(rows[drawn], return_counts=True), strict=True))
    assert per_episode_bound_violations(counts, tset.weights, N) == []

    lengths = {e: int((rows == e).sum()) for e in tset.episodes}
    expected = np.array([N * tset.weights[int(e)] / lengths[int(e)] for e in rows])
    observed = np.bincount(drawn, minlength=len(rows))
    chi2 = float(((observed - expected) ** 2 / expected).sum())
    assert chi2 < chi_square_critical(len(rows) - 1), (chi2, chi_square_critical(len(rows) - 1))


def test_the_bound_rejects_uniform_frame_sampling(tset: TrainingSet) -> None:
    """The same check on what LeRobot's shuffle draws (every frame alike) fails: the bound has power."""
    rows = frame_episodes(tset)
    uniform = rows[np.random.default_rng(5).integers(0, len(rows), N)]
    counts = dict(zip(*np.unique(uniform, return_counts=True), strict=True))
    assert len(per_episode_bound_violations(counts, tset.weights, N)) >= 3


def test_same_seed_same_order(tset: TrainingSet) -> None:
    rows = frame_episodes(tset)
    a = WeightedFrameSampler(rows, tset.weights, num_samples=500, seed=1)
    b = WeightedFrameSampler(rows, tset.weights, num_samples=500, seed=1)
    first_a, first_b = list(a), list(b)
    assert first_a == first_b
    assert list(a) == list(b) != first_a  # a second pass is new draws, the same for the same seed
    assert list(WeightedFrameSampler(rows, tset.weights, num_samples=500, seed=2)) != first_a


def test_the_last_frames_can_be_left_out(tset: TrainingSet) -> None:
    """As LeRobot's EpisodeAwareSampler does for `drop_n_last_frames` (diffusion reads frames ahead)."""
    rows = frame_episodes(tset)
    drawn = np.fromiter(WeightedFrameSampler(rows, tset.weights, num_samples=20_000, seed=3, drop_last_frames=5),
                        dtype=np.int64)
    last = {i for e in tset.episodes for i in np.flatnonzero(rows == e)[-5:].tolist()}
    assert last and not last & set(drawn.tolist())
    assert set(rows[drawn].tolist()) == set(tset.episodes)
    with pytest.raises(ValueError, match=r"episode\(s\) \[.*\] have no frame left after dropping the last 1000"):
        WeightedFrameSampler(rows, tset.weights, num_samples=10, drop_last_frames=1000)


def test_weights_and_frames_must_name_the_same_episodes(tset: TrainingSet) -> None:
    rows = frame_episodes(tset)
    missing = dict(tset.weights)
    del missing[tset.episodes[0]]
    with pytest.raises(ValueError, match=rf"frames without a weight \[{tset.episodes[0]}\]"):
        WeightedFrameSampler(rows, missing, num_samples=10)
    with pytest.raises(ValueError, match=r"weights without frames \[2\]"):
        WeightedFrameSampler(rows, {**tset.weights, 2: 0.1}, num_samples=10)
    with pytest.raises(ValueError, match="not all 0"):
        WeightedFrameSampler(rows, dict.fromkeys(tset.weights, 0.0), num_samples=10)


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed here (the lerobot "
                                                                       "extra brings it): the sampler is a plain "
                                                                       "iterable without it")
def test_a_torch_sampler_that_a_prepared_dataloader_keeps(tset: TrainingSet) -> None:
    """`train` hands the sampler to a DataLoader that accelerate prepares: the batches are its draws, in order."""
    import torch
    from accelerate import Accelerator

    rows = frame_episodes(tset)
    sampler = WeightedFrameSampler(rows, tset.weights, num_samples=40, seed=9)
    assert isinstance(sampler, torch.utils.data.Sampler)
    expected = list(WeightedFrameSampler(rows, tset.weights, num_samples=40, seed=9))
    loader = Accelerator(cpu=True).prepare(torch.utils.data.DataLoader(list(range(len(rows))), batch_size=8,
                                                                       sampler=sampler))
    assert [int(i) for batch in loader for i in batch] == expected
