"""`export --to mcap`: a dataset's episodes as bags that Foxglove, `validate` and `convert` read back.

Oracles independent of the exporter: Foxglove's own npm parsers decode every message of every
exported bag (`support/foxglove_npm.py`); the `mcap` package's reader gives the metadata records;
the project's `validate` judges the bags and its `convert` turns them back into a dataset, which
pyarrow and PyAV read (`support/aloha_data.py`) and compare with the source: every numeric column
bit for bit, every frame within JPEG tolerance. The source is two recorded (synthetic) sessions
converted the ordinary way: a teleop episode with a correction and a policy episode with a
takeover labelled late, so the labels, the leader, what it rendered (`/leader/feedback`) and the
policy stream all make the trip.
"""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from mcap.reader import make_reader
from support import aloha_data as ad
from support.cli import run_cli
from support.foxglove_npm import decode_bag

from teleop_flywheel.cli import main as cli_main
from teleop_flywheel.core.calibration import load_calibration, sim_calibration_file
from teleop_flywheel.data.convert import converter as conv
from teleop_flywheel.data.lerobot.consistency import problems
from teleop_flywheel.recording.mcap.reader import open_bag
from teleop_flywheel.testing.synthetic_dataset import SyntheticSpec, write
from teleop_flywheel.testing.synthetic_session import SessionSpec, write_session

JPEG_TOLERANCE = 3.0  # mean absolute difference per pixel, 0..255: one JPEG (q90) + one h264 encode (measured 0.9)
SPECS = [SessionSpec(seed=40, task="stack", corrections=((0.8, 1.4, "other"),), **ad.SPEC),
         SessionSpec(seed=41, task="unstack", session_kind="policy", interventions=((0.6, 1.5, "wrong_grasp"),),
                     label_delay_s=0.2, **ad.SPEC)]
NEEDS_LEROBOT = pytest.mark.skipif(importlib.util.find_spec("lerobot") is None,
                                   reason="LeRobot (torch, ~8 GB) is not installed here; run in /work/lrenv/venv "
                                          "(pip install '.[lerobot]') for the loader check")
DEGREE_JOINTS = 5  # the body joints: radians are exactly the degrees' radians, whatever the calibration


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("mcap_export")
    bags = [write_session(root / "recorded" / f"ep{i}", spec).bag for i, spec in enumerate(SPECS)]
    ds = root / "ds"
    res = conv.convert(bags, ds, codec="h264", workers=1, progress=False)
    assert sum(len(v) for v in res.converted.values()) == 2, res
    manifest = root / "m1.json"
    assert cli_main(["manifest", "create", str(ds), "--out", str(manifest), "--filter", "episode_index==1"]) == 0
    assert cli_main(["export", str(ds), "--to", "mcap", str(root / "mcap")]) == 0
    assert cli_main(["export", str(manifest), "--to", "mcap", str(root / "from_manifest")]) == 0
    assert cli_main(["export", str(ds), "--to", "mcap", str(root / "calibrated"), "--calibration",
                     f"leader={sim_calibration_file('leader')}", "--calibration",
                     f"follower={sim_calibration_file('follower')}"]) == 0
    back = conv.convert(sorted((root / "mcap").iterdir()), root / "back", codec="h264", workers=1, progress=False)
    assert sum(len(v) for v in back.converted.values()) == 2, back
    return {"root": root, "ds": ds, "mcap": root / "mcap", "manifest": manifest, "calibrated": root / "calibrated",
            "recorded": root / "recorded",
            "from_manifest": root / "from_manifest", "back": root / "back"}


def _mcap(bag_dir: Path) -> Path:
    return bag_dir / f"{bag_dir.name}_0.mcap"


def _records(bag_dir: Path) -> dict[str, dict[str, str]]:
    with open(_mcap(bag_dir), "rb") as f:
        return {m.name: dict(m.metadata) for m in make_reader(f).iter_metadata()}


def _stamp(message: dict) -> int:
    return int(message["header"]["stamp"]["sec"]) * 10**9 + int(message["header"]["stamp"]["nanosec"])


def test_foxglove_decodes_every_message_of_every_bag(made: dict[str, Path]) -> None:
    table = ad.episodes_table(made["ds"])
    assert sorted(p.name for p in made["mcap"].iterdir()) == ["episode_0", "episode_1"]
    for e in (0, 1):
        bag = made["mcap"] / f"episode_{e}"
        assert sorted(p.name for p in bag.iterdir()) == [f"episode_{e}_0.mcap", "metadata.yaml"]
        topics = decode_bag(_mcap(bag))
        for topic, entry in topics.items():
            assert entry["errors"] == [] and entry["encoding"] == "ros2msg", (topic, entry["errors"][:1])
        state, action = ad.column(made["ds"], "observation.state", e), ad.column(made["ds"], "action", e)
        n = len(state)
        follower, command = topics["/follower/joint_states"], topics["/follower/joint_command"]
        assert follower["schema"] == "sensor_msgs/msg/JointState" and follower["count"] == n + 1
        assert command["count"] == n + 2  # t_0, t_1..t_n, and the one after the last frame
        image = topics[f"/cameras/{ad.CAMERA}/image/compressed"]
        assert image["schema"] == "sensor_msgs/msg/CompressedImage" and image["count"] == n + 1
        assert image["messages"][0]["format"] == "jpeg" and image["messages"][0]["data"]["head"][:2] == [255, 216]
        assert topics["/leader/joint_states"]["count"] == n + 1 and topics["/teleop/authority"]["count"] == n
        # header stamps: the converter's grid from the episode's recorded start
        t0 = int(table.loc[table["episode_index"] == e, "recorded_wall_ns"].iloc[0])
        stamps = [_stamp(m) for m in follower["messages"][:n]]
        assert stamps == [t0 + round(k * 1e9 / 30) for k in range(n)]
        positions = np.array([m["position"] for m in follower["messages"][:n]])  # radians, via the steps: 1 ulp
        np.testing.assert_allclose(positions[:, :DEGREE_JOINTS], np.deg2rad(state[:, :DEGREE_JOINTS].astype(float)),
                                   rtol=1e-14, atol=1e-15)
        np.testing.assert_allclose(np.array(command["messages"][n]["position"])[:DEGREE_JOINTS],
                                   np.deg2rad(action[n - 1, :DEGREE_JOINTS].astype(float)), rtol=1e-14, atol=1e-15)
        assert follower["messages"][0]["name"] == ["shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex",
                                                   "wrist_roll", "gripper"]
        authority = topics["/teleop/authority"]["messages"]
        assert authority[0]["name"] == ["alpha", "mode", "intervention_id", "trigger"]
        np.testing.assert_array_equal([m["position"][0] for m in authority],
                                      ad.column(made["ds"], "complementary_info.blend_weight", e))
        events = [json.loads(m["data"]) for m in topics["/teleop/intervention"]["messages"]]
        assert [ev["kind"] for ev in events] == [["correction"], ["intervention"]][e] * 2


def test_episode_metadata_and_provenance_are_in_the_bag(made: dict[str, Path]) -> None:
    table = ad.episodes_table(made["ds"])
    for e in (0, 1):
        row = table[table["episode_index"] == e].iloc[0]
        records = _records(made["mcap"] / f"episode_{e}")
        episode = records["teleop_flywheel.episode"]
        assert episode["task"] == SPECS[e].task and episode["operator"] == row["operator"]
        assert episode["outcome"] == row["outcome"] and episode["session_kind"] == row["session_kind"]
        assert episode["policy_checkpoint"] == row["policy_checkpoint"] and episode["stamp_clock"] == "ros"
        assert json.loads(episode["interventions"]) == json.loads(row["interventions"])  # the recorded spans
        assert json.loads(episode.get("corrections", "[]")) == json.loads(row["corrections"])  # omitted when none
        export = records["teleop_flywheel.export"]
        assert export["episode_id"] == row["episode_id"] and export["source_episode_index"] == str(e)
        assert export["source_dataset"] == os.path.abspath(made["ds"]) and export["format"] == "mcap"
        assert "rosbag2" in records  # rosbag2's own serialized metadata, as the recorder writes it
    manifest = json.loads(made["manifest"].read_text())
    assert sorted(p.name for p in made["from_manifest"].iterdir()) == ["episode_0"]
    export = _records(made["from_manifest"] / "episode_0")["teleop_flywheel.export"]
    assert export["episode_id"] == manifest["episodes"][0]["episode_id"] and export["source_episode_index"] == "1"
    assert export["manifest_fingerprint"] == manifest["fingerprint"]
    assert export["manifest"] == str(made["manifest"].resolve())


def test_validate_passes_the_exported_episodes(made: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "validate", str(made["mcap"]), "--json")
    assert code == 0, err
    reports = json.loads(out)["episodes"]
    assert len(reports) == 2 and all(r["reasons"] == [] for r in reports), out
    for r in reports:  # and it says what it could not check
        assert "EXPORTED" in r["warning_codes"] and os.path.abspath(made["ds"]) in json.dumps(r["warnings"])


def test_round_trip_keeps_every_column_exactly_and_frames_within_jpeg_tolerance(made: dict[str, Path]) -> None:
    src, back = made["ds"], made["back"]
    assert problems(back) == []
    a, b = ad.rows(src), ad.rows(back)
    assert list(a.columns) == list(b.columns) and len(a) == len(b)
    for name in a.columns:
        x, y = np.stack(a[name].map(np.asarray)), np.stack(b[name].map(np.asarray))
        assert x.dtype == y.dtype, name
        np.testing.assert_array_equal(x, y, err_msg=name)  # NaN (no policy command yet) equal to NaN
    assert a["intervention"].any() and a["complementary_info.correction"].any()  # the labels made the trip
    assert np.stack(a["complementary_info.feedback"].map(np.asarray))[:, 6:].any()  # and what the leader rendered
    for e in (0, 1):
        original, returned = ad.frames(src, ad.VIDEO, e), ad.frames(back, ad.VIDEO, e)
        assert original.shape == returned.shape
        assert np.abs(original.astype(int) - returned).mean() < JPEG_TOLERANCE
    ta, tb = ad.episodes_table(src), ad.episodes_table(back)
    for name in ("operator", "outcome", "attempts", "policy_checkpoint", "session_kind", "rig_id", "recorded_wall_ns",
                 "interventions", "corrections"):
        assert list(ta[name]) == list(tb[name]), name
    assert [list(t) for t in ta["tasks"]] == [list(t) for t in tb["tasks"]]


def test_other_joint_names_are_refused_naming_the_file(made: dict[str, Path], tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    ds = tmp_path / "foreign"
    shutil.copytree(made["ds"], ds)
    info_path = ds / "meta" / "info.json"
    info = json.loads(info_path.read_text())
    info["features"]["observation.state"]["names"] = [f"joint_{i}" for i in range(6)]
    info_path.write_text(json.dumps(info))
    code, _, err = run_cli(capsys, "export", str(ds), "--to", "mcap", str(tmp_path / "out"))
    lines = err.strip().splitlines()
    assert code == 1 and len(lines) == 1 and str(info_path) in lines[0] and "joint_0" in lines[0], err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["foreign"]  # no OUT, no temporary


def test_two_workers_write_the_bytes_one_writes(made: dict[str, Path], tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """The bags come from worker processes (`formats.common.episode_export`): bag k is episode k, byte for byte."""
    ids = []
    for workers in ("1", "2"):
        code, out, err = run_cli(capsys, "export", str(made["ds"]), "--to", "mcap", str(tmp_path / workers),
                                 "--workers", workers)
        assert code == 0, err
        ids.append(out.split("lineage export ")[-1].strip())
    serial, parallel = ({p.relative_to(tmp_path / w).as_posix(): p.read_bytes()
                         for p in sorted((tmp_path / w).rglob("*")) if p.is_file()} for w in ("1", "2"))
    assert list(serial) == [f"episode_{e}/{name}" for e in (0, 1) for name in (f"episode_{e}_0.mcap", "metadata.yaml")]
    assert parallel == serial
    assert ids[0] == ids[1]  # the same content is the same export in lineage
    for e in (0, 1):  # each bag is its own episode, not a neighbour's
        assert _records(tmp_path / "2" / f"episode_{e}")["teleop_flywheel.export"]["source_episode_index"] == str(e)


def test_an_export_that_fails_midway_leaves_nothing(made: dict[str, Path], tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    ds = tmp_path / "ds"
    ad.truncated_video_copy(made["ds"], ds)
    code, _, err = run_cli(capsys, "export", str(ds), "--to", "mcap", str(tmp_path / "out"))
    assert code == 1 and "nothing was written" in err.strip().splitlines()[-1], err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds"]


def test_a_dataset_another_writer_made_round_trips_its_columns(tmp_path: Path) -> None:
    """No video, no leader, policy or trigger columns, intervention records without times: the spans
    come from the columns, the stamps from the recorded start, and convert gives the columns back."""
    ds = write(tmp_path / "syn", SyntheticSpec(episodes=2, lengths=(70, 80), seed=3, intervention_share=1.0)).root
    assert cli_main(["export", str(ds), "--to", "mcap", str(tmp_path / "out")]) == 0
    records = _records(tmp_path / "out" / "episode_0")["teleop_flywheel.episode"]
    assert json.loads(records["interventions"]) and json.loads(records["cameras"]) == []
    bags = sorted((tmp_path / "out").iterdir())
    res = conv.convert(bags, tmp_path / "back", workers=1, progress=False, include_failed=True)  # no labels: rejected
    assert sum(len(v) for v in res.converted.values()) == 2, res
    a, b = ad.rows(ds), ad.rows(tmp_path / "back")
    assert a["intervention"].any() and len(a) == len(b)
    for name in a.columns:
        np.testing.assert_array_equal(np.stack(a[name].map(np.asarray)), np.stack(b[name].map(np.asarray)),
                                      err_msg=name)


def test_policy_commands_that_start_late_or_never_come_back_as_nan(made: dict[str, Path], tmp_path: Path) -> None:
    """A teleop episode without a policy node (NaN throughout) and one whose policy starts 10 frames in."""
    ds = tmp_path / "ds"
    shutil.copytree(made["ds"], ds)
    path = next((ds / "data").rglob("*.parquet"))
    table = pq.read_table(path)
    policy = np.stack(table["complementary_info.policy_action"].to_pylist()).astype(np.float32)
    episode, frame = table["episode_index"].to_numpy(), table["frame_index"].to_numpy()
    policy[(episode == 0) | ((episode == 1) & (frame < 10))] = np.nan
    column = pa.FixedSizeListArray.from_arrays(pa.array(policy.reshape(-1)), 6)
    i = table.column_names.index("complementary_info.policy_action")
    pq.write_table(table.set_column(i, table.field(i).with_type(column.type), column), path)
    assert cli_main(["export", str(ds), "--to", "mcap", str(tmp_path / "out")]) == 0
    assert "/policy/joint_command" not in decode_bag(_mcap(tmp_path / "out" / "episode_0"))
    res = conv.convert(sorted((tmp_path / "out").iterdir()), tmp_path / "back", codec="h264", workers=1, progress=False)
    assert sum(len(v) for v in res.converted.values()) == 2, res
    a, b = ad.rows(ds), ad.rows(tmp_path / "back")
    for name in ("complementary_info.policy_action", "action", "observation.state"):
        np.testing.assert_array_equal(np.stack(a[name].map(np.asarray)), np.stack(b[name].map(np.asarray)),
                                      err_msg=name)


@NEEDS_LEROBOT
def test_lerobot_loads_the_dataset_the_bags_convert_back_to(made: dict[str, Path]) -> None:
    ad.assert_lerobot_reads(made["back"], made["ds"])


def test_with_the_arms_calibrations_the_radians_are_the_recorded_ones(made: dict[str, Path]) -> None:
    """Exported through the calibrations the episodes were recorded with, every joint's radians (the
    gripper's too) are the follower's recorded samples held at each frame, as the converter read them."""
    table = ad.episodes_table(made["ds"])
    gripper = load_calibration(sim_calibration_file("follower"))["gripper"]
    for e in (0, 1):
        recorded = open_bag(made["recorded"] / f"ep{e}").joint_state("/follower/joint_states").stream()
        exported = open_bag(made["calibrated"] / f"episode_{e}").joint_state("/follower/joint_states").stream()
        t0 = int(table.loc[table["episode_index"] == e, "recorded_wall_ns"].iloc[0])
        n = len(ad.column(made["ds"], "observation.state", e))
        grid = t0 + np.round(np.arange(n) * (1e9 / 30)).astype(np.int64)
        held = recorded.values[np.searchsorted(recorded.stamps_ns, grid, side="right") - 1]
        held[:, 5] = np.clip(held[:, 5], *gripper.rad_range())  # the dataset's 0..100 is the calibrated range
        np.testing.assert_array_equal(exported.stamps_ns[:n], grid)
        np.testing.assert_allclose(exported.values[:n], held, rtol=0, atol=1e-6)  # float32 in the dataset between
