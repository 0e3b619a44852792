"""Training on a frozen manifest with LeRobot's own machinery, frames weighted (docs/training.md).

`training_set`: the manifest's episodes, verified, at their current indices, with their sample
weights; `sampler`: `WeightedFrameSampler`; `loop`: `teleop-flywheel train` (LeRobot's training
pieces on those episodes, the checkpoint registered in lineage).

torch and LeRobot come with the `lerobot` extra and are imported only when a run starts or a
sampler is used: importing this package (and `teleop-flywheel train --help`) needs neither.
"""
from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    """`teleop_flywheel.training.WeightedFrameSampler`, imported when first asked for (it imports torch)."""
    if name == "WeightedFrameSampler":
        from teleop_flywheel.training.sampler import WeightedFrameSampler

        return WeightedFrameSampler
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
