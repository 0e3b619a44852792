"""The follower against its command: a grasp at the force limit is no lag; a command that outruns the
follower is FOLLOWER_OUTRUN, naming the joint and its share."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from teleop_flywheel.core.so101 import GRIPPER, JOINT_NAMES
from teleop_flywheel.data.validate import validator as val
from teleop_flywheel.data.validate.reasons import FOLLOWER_OUTRUN, TRACKING_LAG, ValidateConfig
from teleop_flywheel.data.validate.tracking import BLOCKS, JointTracking, _block_products, tracking_reasons
from teleop_flywheel.testing.synthetic_session import SessionSpec, write_session

# The demo's follower: an STS3215's top speed, the gripper held on the brick at the driver's grasp load (0.16).
DEMO_LIKE = {"motion": "reach", "follower_max_speed": 4.7, "grip_object": 0.5, "gripper_torque": 0.16,
             "cameras": ()}


def _check(bag: Path) -> val.EpisodeReport:
    return val.validate_bag((str(bag), val.ValidateConfig.load()))


def test_a_held_grasp_is_no_tracking_lag(tmp_path: Path) -> None:
    """Before: the gripper, closed on an object and slowed by its torque limit, read as 159-174 ms of lag
    (TRACKING_LAG on every one of these episodes)."""
    for seed in range(3):
        r = _check(write_session(tmp_path / f"grasp{seed}", SessionSpec(duration_s=12.0, seed=seed, **DEMO_LIKE)).bag)
        assert r.passed, r.line()
        assert TRACKING_LAG not in [w.code for w in r.warnings], r.line()
        assert all(40 <= x <= 60 for x in r.tracking_lag_ms[:5]), r.tracking_lag_ms
        assert max(s for s in r.tracking_outrun_share if s is not None) < 0.01, r.tracking_outrun_share


def test_a_gripper_without_a_force_limit_keeps_its_lag(tmp_path: Path) -> None:
    """No cap on the load: nothing is taken for a grasp, the gripper's lag is measured like any joint's."""
    r = _check(write_session(tmp_path / "plain", SessionSpec(duration_s=12.0, motion="reach", seed=1,
                                                              cameras=())).bag)
    assert r.tracking_lag_ms[5] is not None and 40 <= r.tracking_lag_ms[5] <= 60, r.tracking_lag_ms


def test_a_command_that_outruns_the_follower_is_rejected(tmp_path: Path) -> None:
    """The leader shaken at up to 6.3 rad/s for 3 s of 12 against a follower held to 2 rad/s."""
    spec = SessionSpec(duration_s=12.0, seed=0, human_fast=(3.0, 3.0), **{**DEMO_LIKE, "follower_max_speed": 2.0})
    r = _check(write_session(tmp_path / "fast", spec).bag)
    assert FOLLOWER_OUTRUN in r.codes, r.line()
    reason = next(x for x in r.reasons if x.code == FOLLOWER_OUTRUN)
    assert set(reason.numbers["joints"]) == {"shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll"}
    assert all(0.2 <= s <= 0.3 for s in reason.numbers["joints"].values()), reason.numbers
    assert "the command outran the follower on" in reason.detail and "% of the episode" in reason.detail


def test_a_gripper_whose_command_outruns_its_jaws_is_measured_not_rejected() -> None:
    """An open or close commanded as a step outruns the jaws by design (a demo episode: 22 % of its
    samples); FOLLOWER_OUTRUN is for the arm's trajectory, so only the body joints are judged."""
    cfg = ValidateConfig()
    gripper = JointTracking(GRIPPER, lag_ms=None, lag_stderr_ms=None, outrun_share=0.22)
    body = [JointTracking(name, lag_ms=40.0, lag_stderr_ms=5.0, outrun_share=0.01)
            for name in JOINT_NAMES if name != GRIPPER]
    rejected, _ = tracking_reasons([*body, gripper], cfg)
    assert rejected == []
    rejected, _ = tracking_reasons([*body[:-1], JointTracking(body[-1].joint, 40.0, 5.0, 0.22), gripper], cfg)
    assert [r.code for r in rejected] == [FOLLOWER_OUTRUN] and body[-1].joint in rejected[0].detail


@pytest.mark.parametrize("n", [1003, 1600])
def test_block_products_are_the_sums_they_define(n: int) -> None:
    """lag_fit's per-shift, per-block sums, against their definition (blocks of len(core) // BLOCKS, the
    remainder left out; row k of the follower shifted by k)."""
    rng = np.random.default_rng(n)
    vf = rng.normal(size=n)
    core = rng.normal(size=n - 300)
    cross, lead_e, follow_e = _block_products(core, vf)
    size = len(core) // BLOCKS
    for k in (0, 1, 150, 300):
        row = vf[k:k + len(core)]
        for b in range(BLOCKS):
            part = slice(b * size, (b + 1) * size)
            assert cross[k, b] == pytest.approx(core[part] @ row[part], rel=1e-12, abs=1e-9)
            assert follow_e[k, b] == pytest.approx(row[part] @ row[part], rel=1e-12)
    assert lead_e == pytest.approx([core[b * size:(b + 1) * size] @ core[b * size:(b + 1) * size]
                                    for b in range(BLOCKS)], rel=1e-12)
    assert cross.shape == follow_e.shape == (301, BLOCKS)
