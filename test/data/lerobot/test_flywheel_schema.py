"""Our layout's versions: the leader arm's reading is `complementary_info.leader_state` (layout 2),
which LeRobot loads with every frame and gives no policy; datasets converted before have it as
`observation.leader_state` (layout 1), and every reader of the project reads both.

The layout-1 dataset is the converter's own output with the feature renamed back and the version
key removed (`testing.dataset_files.layout_1_copy`), which is byte for byte what the converter
wrote before layout 2 apart from parquet file framing. LeRobot's own loader and its policy-feature
extraction are the oracle where LeRobot is installed (skipped with that reason elsewhere).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from teleop_flywheel.data.convert import converter as conv
from teleop_flywheel.data.convert.frames import JOINT_FEATURE_NAMES
from teleop_flywheel.data.curation.curate import curate
from teleop_flywheel.data.lerobot.consistency import problems
from teleop_flywheel.data.lerobot.dataset import LeRobotDataset
from teleop_flywheel.data.lerobot.flywheel_schema import (
    LEADER_STATE,
    SCHEMA_KEY,
    SCHEMA_VERSION,
    names_of,
    renames_since,
    resolve,
    schema_version,
)
from teleop_flywheel.data.reports.audit import audit
from teleop_flywheel.policies.recorded import ReplayPolicy
from teleop_flywheel.testing.dataset_files import layout_1_copy, read_frames, stack
from teleop_flywheel.testing.synthetic_session import SessionSpec, write_session

OLD = "observation.leader_state"


@pytest.fixture(scope="module")
def layouts(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    """{layout: dataset}: two episodes converted now (layout 2), and the same as layout 1."""
    root = tmp_path_factory.mktemp("layouts")
    bags = [write_session(root / f"ep{i}", SessionSpec(duration_s=3.0, seed=20 + i, session_kind="policy",
                                                         interventions=((1.0, 2.0, "too_slow"),))).bag
            for i in range(2)]
    conv.convert(bags, root / "ds", workers=1, progress=False, codec="h264")
    return {2: root / "ds", 1: layout_1_copy(root / "ds", root / "ds_layout1")}


def test_versions_and_names() -> None:
    assert schema_version({SCHEMA_KEY: SCHEMA_VERSION, "features": {}}) == 2
    assert schema_version({"features": {OLD: {}, "action": {}}}) == 1  # ours, from before the key
    assert schema_version({"features": {"observation.state": {}, "action": {}}}) is None  # not ours
    assert renames_since(1) == {OLD: LEADER_STATE} and renames_since(SCHEMA_VERSION) == {}
    assert names_of(OLD) == names_of(LEADER_STATE) == (LEADER_STATE, OLD)
    assert resolve(LEADER_STATE, ["action", OLD]) == OLD and resolve(OLD, [LEADER_STATE]) == LEADER_STATE
    assert resolve("action", ["action"]) == "action" and resolve(LEADER_STATE, ["action"]) is None


def test_the_layout_1_fixture_is_layout_1(layouts: dict[int, Path]) -> None:
    """The fixture the readers and `migrate` are tested on says the old name everywhere the
    converter used to write it, and the new one nowhere."""
    old = layouts[1]
    info = json.loads((old / "meta/info.json").read_text())
    assert SCHEMA_KEY not in info and schema_version(info) == 1
    assert list(info["features"]).index(OLD) == 2  # where the converter put it: after state and action
    assert OLD in json.loads((old / "meta/stats.json").read_text()) and OLD in read_frames(old).columns
    text = "".join(p.read_bytes().decode("latin-1") for p in (old / "meta").rglob("*") if p.is_file()) + \
        "".join(p.read_bytes().decode("latin-1") for p in (old / "data").rglob("*.parquet"))
    assert LEADER_STATE not in text and f"stats/{OLD}/mean" in text


def test_the_converter_writes_layout_2(layouts: dict[int, Path]) -> None:
    info = json.loads((layouts[2] / "meta/info.json").read_text())
    assert info[SCHEMA_KEY] == SCHEMA_VERSION == 2 and OLD not in info["features"]
    assert info["features"][LEADER_STATE] == {"dtype": "float32", "shape": [6], "names": JOINT_FEATURE_NAMES}
    assert not [k for k in info["features"] if k.startswith("observation.") and "leader" in k]


def test_every_reader_reads_both_layouts(layouts: dict[int, Path]) -> None:
    frames = read_frames(layouts[2])
    leader = stack(frames[LEADER_STATE]).astype(np.float32)
    assert np.isfinite(leader).all() and leader.std(0).min() > 0  # the leader moved
    audits, curations, replays = [], [], []
    for layout, root in layouts.items():
        assert problems(root) == [], layout  # doctor: nothing to repair in either
        ds = LeRobotDataset.open(root)
        assert ds.feature_name(LEADER_STATE) == ds.feature_name(OLD) == {1: OLD, 2: LEADER_STATE}[layout]
        assert ds.joint_names(LEADER_STATE) == JOINT_FEATURE_NAMES and ds.has_column(OLD)
        for name in (LEADER_STATE, OLD):
            np.testing.assert_array_equal(LeRobotDataset.open(root).column(name), leader)
        report = audit(ds).to_dict()
        report.pop("dataset")
        audits.append(report)
        by_leader = audit(ds, state=OLD if layout == 2 else LEADER_STATE)
        assert by_leader.state_feature == ds.feature_name(LEADER_STATE)
        starts = np.flatnonzero(np.diff(frames["episode_index"].to_numpy(), prepend=-1))
        np.testing.assert_allclose(by_leader.start_states, leader[starts], rtol=1e-6)
        curations.append([(s.episode_index, s.jerk, s.coverage_gap, s.weight) for s in curate(ds).episodes])
        replays.append(ReplayPolicy.from_args(f"{root}#1", "", simulated=True).positions)
    assert audits[0] == audits[1] and curations[0] == curations[1]
    np.testing.assert_array_equal(replays[0], replays[1])


def test_lerobot_loads_the_leader_state_per_frame_and_gives_it_to_no_policy(layouts: dict[int, Path]) -> None:
    lerobot_dataset = pytest.importorskip("lerobot.datasets.lerobot_dataset",
                                          reason="LeRobot not installed (too heavy for CI)")
    from lerobot.datasets.utils import dataset_to_policy_features
    from lerobot.policies.act.configuration_act import ACTConfig
    from lerobot.policies.factory import make_policy

    leader = stack(read_frames(layouts[2])[LEADER_STATE]).astype(np.float32)
    inputs = {}
    for layout, root in layouts.items():
        ds = lerobot_dataset.LeRobotDataset(f"local/{root.name}", root=root, video_backend="pyav")
        name = {1: OLD, 2: LEADER_STATE}[layout]
        for i in (0, len(ds) // 2, len(ds) - 1):
            np.testing.assert_array_equal(ds[i][name].numpy(), leader[i])
        inputs[layout] = set(dataset_to_policy_features(ds.meta.features))
        config = ACTConfig(pretrained_backbone_weights=None, device="cpu", dim_model=32, n_heads=2,
                           dim_feedforward=64, n_encoder_layers=1, n_decoder_layers=1, n_vae_encoder_layers=1)
        policy = make_policy(config, ds_meta=ds.meta)
        inputs[layout] |= {f"make_policy:{k}" for k in policy.config.input_features}
    assert {OLD, f"make_policy:{OLD}"} <= inputs[1]  # the flaw layout 2 fixes: LeRobot trains on the leader
    assert not [k for k in inputs[2] if "leader" in k]
    assert {"observation.state", "make_policy:observation.state", "make_policy:observation.images.wrist"} <= inputs[2]
