"""A small converted dataset with the labels robomimic's filter keys are made from.

Four episodes, h264: 0 teleop and a success; 1 a policy session with a labelled takeover, a
failure; 2 a policy session with a takeover, a success; 3 a teleop success whose camera stalls, so
the validator rejects it (FRAME_GAP) and `convert --include-failed` keeps it. Each recorded the
leader's rendered feedback (`complementary_info.feedback`). The readers of its
frames and rows are `support/aloha_data.py`'s (PyAV and pyarrow, none of the exporter's code).
"""
from __future__ import annotations

from pathlib import Path

from teleop_flywheel.data.convert import converter as conv
from teleop_flywheel.testing.synthetic_session import SessionSpec, write_session

SPECS = (
    dict(outcome="success"),
    dict(session_kind="policy", interventions=((0.6, 0.7, "wrong_grasp"),), outcome="failure"),
    dict(session_kind="policy", interventions=((0.4, 0.6, "too_slow"),), outcome="success"),
    dict(outcome="success", camera_stall=(0.8, 0.5)),
)
SUCCESS, FAILURE, INTERVENTION, REJECTED = [0, 2, 3], [1], [1, 2], [3]


def converted(root: Path) -> Path:
    bags = [write_session(root / "bags" / f"ep{i}", SessionSpec(duration_s=2.5, width=256, height=192, seed=60 + i,
                                                                 task=f"task {i}", feedback="gripper", **spec)).bag
            for i, spec in enumerate(SPECS)]
    ds = root / "ds"
    conv.convert(bags, ds, codec="h264", workers=1, progress=False, include_failed=True)
    return ds
