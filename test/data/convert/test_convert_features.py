"""What convert writes per frame and per append: every intervention frame carries its final
label, corrections are a frame flag, observation.effort is a declared feature with stats, appends
agree with the dataset (codec, fps, feature set) before anything is encoded, the card/weights/
validation record follow every append, and --trim-dead-air trims instead of rejecting."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from teleop_flywheel.cli import main as cli_main
from teleop_flywheel.cli.verbs import convert as convert_verb
from teleop_flywheel.core.bag_topics import AUTHORITY, FOLLOWER_STATE
from teleop_flywheel.core.errors import UsageError
from teleop_flywheel.core.labels import trigger_code
from teleop_flywheel.core.so101 import JOINT_NAMES
from teleop_flywheel.data.convert import converter as conv
from teleop_flywheel.data.curation.weights import read_weights
from teleop_flywheel.data.lerobot import v3_layout
from teleop_flywheel.data.lerobot.flywheel_schema import LEADER_STATE, SCHEMA_KEY, SCHEMA_VERSION
from teleop_flywheel.data.reports.card import write_card
from teleop_flywheel.data.validate.dataset_record import Record
from teleop_flywheel.recording.mcap.reader import open_bag
from teleop_flywheel.testing.dataset_files import layout_1_copy, read_frames, stack
from teleop_flywheel.testing.synthetic_session import SessionSpec, write_session


def _data(root: Path) -> pd.DataFrame:
    return pd.concat([pq.read_table(p).to_pandas() for p in sorted((root / "data").rglob("*.parquet"))])


def _episodes(root: Path) -> pd.DataFrame:
    return pq.read_table(root / "meta/episodes/chunk-000/file-000.parquet").to_pandas()


def _convert(bags: list[Path], out: Path, **kw: object) -> conv.ConvertResult:
    return conv.convert(bags, out, workers=1, progress=False, codec=str(kw.pop("codec", "h264")), **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("delay", [0.5, 2.5])
def test_every_intervention_frame_carries_its_final_label(tmp_path: Path, delay: float) -> None:
    """Labelled half a second in (its first frames read 0 on the authority stream), or after the
    hand-back (0 throughout): the dataset has the final label on every frame of the takeover."""
    bag = write_session(tmp_path / "late", SessionSpec(duration_s=6.0, session_kind="policy", seed=2,
                                                        interventions=((2.0, 3.5, "wrong_grasp"),),
                                                        label_delay_s=delay)).bag
    auth = open_bag(bag).authority(AUTHORITY).position
    inside = auth[:, 2] > 0
    assert (auth[inside, 3] == 0).any()  # the bag keeps when the label arrived
    _convert([bag], tmp_path / "ds")
    d = _data(tmp_path / "ds")
    iv = d.intervention.to_numpy()
    assert iv.sum() >= 40
    assert set(d["complementary_info.trigger"][iv]) == {trigger_code("wrong_grasp")}
    assert set(d["complementary_info.trigger"][~iv]) == {0}


def test_corrections_become_a_frame_flag_with_their_label(tmp_path: Path) -> None:
    bag = write_session(tmp_path / "corr", SessionSpec(duration_s=6.0, seed=3, corrections=((2.0, 3.0, "other"),),
                                                        label_delay_s=0.4)).bag
    _convert([bag], tmp_path / "ds")
    info = json.loads((tmp_path / "ds/meta/info.json").read_text())
    assert info["features"]["complementary_info.correction"] == {"dtype": "bool", "shape": [1], "names": None}
    d = _data(tmp_path / "ds")
    c = d["complementary_info.correction"].to_numpy()
    assert 28 <= c.sum() <= 32 and not d.intervention.any()  # 1 s at 30 fps; authority never changed
    assert set(d["complementary_info.trigger"][c]) == {trigger_code("other")} and set(
        d["complementary_info.trigger"][~c]
    ) == {0}
    eps = _episodes(tmp_path / "ds")
    assert json.loads(eps.corrections[0])[0]["trigger"] == "other"


def test_effort_is_a_declared_feature_with_stats(tmp_path: Path) -> None:
    bag = write_session(tmp_path / "eff", SessionSpec(duration_s=4.0, seed=4)).bag
    _convert([bag], tmp_path / "ds")
    info = json.loads((tmp_path / "ds/meta/info.json").read_text())
    assert info["features"]["observation.effort"] == {
        "dtype": "float32", "shape": [6], "names": ["shoulder_pan.effort", "shoulder_lift.effort", "elbow_flex.effort",
                                                     "wrist_flex.effort", "wrist_roll.effort", "gripper.effort"]}
    stats = json.loads((tmp_path / "ds/meta/stats.json").read_text())["observation.effort"]
    d = _data(tmp_path / "ds")
    effort = np.stack(d["observation.effort"]).astype(np.float64)
    np.testing.assert_allclose(stats["max"], effort.max(0), rtol=1e-6)
    np.testing.assert_allclose(stats["mean"], effort.mean(0), rtol=1e-6, atol=1e-7)
    js = open_bag(bag).joint_state(FOLLOWER_STATE)
    assert js.effort.shape == js.position.shape  # held at t_k, never interpolated:
    assert np.isin(effort.astype(np.float32), js.effort.astype(np.float32)).all()
    old = write_session(tmp_path / "old", SessionSpec(duration_s=4.0, seed=5, effort=False)).bag
    _convert([old], tmp_path / "ds_old")
    assert "observation.effort" not in json.loads((tmp_path / "ds_old/meta/info.json").read_text())["features"]


def test_append_refuses_codec_fps_and_feature_changes_before_encoding(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    ds = tmp_path / "ds"
    first = write_session(tmp_path / "a", SessionSpec(duration_s=3.0, seed=6)).bag
    _convert([first], ds, codec="libsvtav1")
    before = {p: p.stat().st_mtime_ns for p in ds.rglob("*") if p.is_file()}
    encodes: list[Path] = []
    real = v3_layout.VideoEncoder.__init__

    def counting(self: v3_layout.VideoEncoder, path: Path, *a: object, **k: object) -> None:
        encodes.append(path)
        real(self, path, *a, **k)  # type: ignore[arg-type]

    monkeypatch.setattr(v3_layout.VideoEncoder, "__init__", counting)
    second = write_session(tmp_path / "b", SessionSpec(duration_s=3.0, seed=7)).bag
    with pytest.raises(UsageError, match="dataset videos are av1, this run would encode h264") as err:
        _convert([second], ds, codec="h264")
    assert "--codec libsvtav1" in err.value.fix
    with pytest.raises(UsageError, match="dataset is at 30 fps, this run at 15"):
        _convert([second], ds, codec="libsvtav1", fps=15)
    no_effort = write_session(tmp_path / "c", SessionSpec(duration_s=3.0, seed=8, effort=False)).bag
    res = _convert([no_effort], ds, codec="libsvtav1")
    assert res.converted == {} and len(res.refused) == 1 and "feature-set change is a new dataset" in res.refused[0]
    assert "observation.effort" in res.refused[0]
    assert encodes == []  # nothing was encoded for any of them
    derived = ("record.json", "README.md", "sample_weights.parquet")  # refreshed: the record's index, card, weights
    assert {p: p.stat().st_mtime_ns for p in ds.rglob("*") if p.is_file() and p.name not in derived} == \
        {p: t for p, t in before.items() if p.name not in derived}
    parser = argparse.ArgumentParser()
    convert_verb.add_arguments(parser)
    assert convert_verb.run(parser.parse_args([str(no_effort), "--dataset", str(ds), "--workers", "1"])) == 1
    ok = _convert([second], ds, codec="libsvtav1")
    assert len(ok.converted[str(ds)]) == 1 and len(encodes) == 1


def test_the_leader_state_is_complementary_info_with_its_stats(tmp_path: Path) -> None:
    """The leader's reading at t_k, written where LeRobot gives it to no policy (layout 2): the
    leader at t_{k+1} is the human action of frame k (both zero-order holds of the same stream)."""
    bag = write_session(tmp_path / "a", SessionSpec(duration_s=3.0, seed=13)).bag
    _convert([bag], tmp_path / "ds")
    info = json.loads((tmp_path / "ds/meta/info.json").read_text())
    assert info[SCHEMA_KEY] == SCHEMA_VERSION and "observation.leader_state" not in info["features"]
    assert info["features"][LEADER_STATE] == info["features"]["complementary_info.human_action"]
    d = _data(tmp_path / "ds")
    leader = np.stack(d[LEADER_STATE]).astype(np.float64)
    np.testing.assert_array_equal(leader[1:], np.stack(d["complementary_info.human_action"])[:-1])
    stats = json.loads((tmp_path / "ds/meta/stats.json").read_text())[LEADER_STATE]
    np.testing.assert_allclose(stats["mean"], leader.mean(0), rtol=1e-6)
    np.testing.assert_allclose(_episodes(tmp_path / "ds")[f"stats/{LEADER_STATE}/max"][0], leader.max(0))


def test_an_old_layout_dataset_is_never_appended_to(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Layout 1 (`observation.leader_state`) and layout 2 never mix in one dataset: one line naming
    `teleop-flywheel migrate`, nothing written, nothing encoded; its migrated copy takes the append."""
    first = write_session(tmp_path / "a", SessionSpec(duration_s=3.0, seed=14)).bag
    _convert([first], tmp_path / "new")
    old = layout_1_copy(tmp_path / "new", tmp_path / "old")
    before = {p: p.read_bytes() for p in old.rglob("*") if p.is_file()}
    second = write_session(tmp_path / "b", SessionSpec(duration_s=3.0, seed=15)).bag
    assert cli_main(["convert", str(second), "--dataset", str(old), "--codec", "h264", "--workers", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("teleop-flywheel convert: error: dataset is in layout 1")
    assert "observation.leader_state" in err[0] and f"run `teleop-flywheel migrate {old}`" in err[0]
    assert {p: p.read_bytes() for p in old.rglob("*") if p.is_file()} == before
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix != ".lock") == ["a", "b", "new", "new.versions", "old"]
    assert cli_main(["migrate", str(old)]) == 0
    res = _convert([second], tmp_path / "old.migrated")
    assert len(res.converted[str(tmp_path / "old.migrated")]) == 1
    assert stack(read_frames(tmp_path / "old.migrated")[LEADER_STATE]).shape[0] == \
        json.loads((tmp_path / "old.migrated/meta/info.json").read_text())["total_frames"]


def test_weights_and_validation_record_follow_every_append_and_the_card_says_it_is_behind(tmp_path: Path) -> None:
    ds = tmp_path / "ds"
    a = write_session(tmp_path / "a", SessionSpec(duration_s=3.0, seed=9)).bag
    bad = write_session(tmp_path / "bad", SessionSpec(duration_s=3.0, seed=10, outcome="unset")).bag
    _convert([a, bad], ds)
    weights, _ = read_weights(ds)
    assert list(weights) == [0] and "| 2 | 1 | 1 | 1 |" in (ds / "README.md").read_text()
    b = write_session(tmp_path / "b", SessionSpec(duration_s=3.0, seed=11, session_kind="policy",
                                                   interventions=((1.0, 2.0, "too_slow"),))).bag
    _convert([b], ds)
    weights, rule = read_weights(ds)
    assert sorted(weights) == [0, 1] and weights[1] > weights[0] and rule["intervention_weight"] == 2.5
    card = (ds / "README.md").read_text()
    assert "now holds 2 episodes" in card and "| 2 | 1 | 1 | 1 |" in card  # behind, and says so
    write_card(ds)
    card = (ds / "README.md").read_text()
    assert "| 3 | 1 | 2 | 2 |" in card and "OUTCOME_UNSET" in card and "behind its dataset" not in card
    record = Record.read(ds)
    assert record.summary is not None and record.summary["episodes"] == 3 and record.summary["rejected"] == 1
    assert {e["name"] for e in record.verdicts()} == {"a", "bad", "b"}


def test_trim_dead_air_instead_of_rejecting(tmp_path: Path) -> None:
    bag = write_session(tmp_path / "dead", SessionSpec(duration_s=9.0, dead_air=(0.0, 2.5), seed=12)).bag
    res = _convert([bag], tmp_path / "rejected")
    assert res.rejected == {"DEAD_AIR": ["dead"]}
    res = _convert([bag], tmp_path / "trimmed", trim_dead_air=True)
    assert len(res.converted[str(tmp_path / "trimmed")]) == 1
    eps = _episodes(tmp_path / "trimmed")
    assert 2.3 <= eps.dead_air_trimmed_leading_s[0] <= 2.6 and eps.dead_air_trimmed_trailing_s[0] == 0.0
    action = np.stack(_data(tmp_path / "trimmed").action)
    assert not np.array_equal(action[0], action[1])  # the first frame's command is already moving
    assert "dead air trimmed" in (tmp_path / "trimmed/README.md").read_text().lower()


def test_audit_shows_camera_lag_tracking_lag_and_effort(tmp_path: Path) -> None:
    from teleop_flywheel.data.lerobot.dataset import LeRobotDataset
    from teleop_flywheel.data.reports.audit import audit, format_text, write_html

    bags = [write_session(tmp_path / f"ep{i}", SessionSpec(duration_s=10.0, motion="reach", stamp_clock="ros",
                                                           seed=40 + i)).bag for i in range(2)]
    _convert(bags, tmp_path / "ds")
    report = audit(LeRobotDataset.open(tmp_path / "ds"))
    lags = report.content.camera_lag_ms["wrist"]
    assert len(lags) == 2 and all(v is not None and abs(v) <= 5 for v in lags)
    assert all(40 <= v <= 60 for row in report.content.tracking_lag_ms for v in row if v is not None)
    assert [e.joint for e in report.content.effort][0] == "shoulder_pan" and report.content.effort[0].max > 0
    text = format_text(report)
    assert "camera lag wrist" in text and "the follower against the command" in text and "effort" in text
    assert report.to_dict()["content"]["camera_lag_ms"]["wrist"] == lags
    write_html(report, tmp_path / "audit.html")
    assert (tmp_path / "audit_files/effort_ranges.png").is_file() and "Effort per joint" in (
        tmp_path / "audit.html"
    ).read_text()


FEEDBACK_NAMES = [f"{j}.offset_rad" for j in JOINT_NAMES] + [f"{j}.ceiling" for j in JOINT_NAMES]


def test_feedback_is_what_the_leader_rendered_at_each_frame(tmp_path: Path) -> None:
    """complementary_info.feedback: the leader's /leader/feedback held at each frame's observation
    time (six goal offsets, six ceilings), declared with names and stats; a bag without the topic
    gives a dataset without the feature — absent, never a column of NaN or made-up zeros."""
    bag = write_session(tmp_path / "fb", SessionSpec(duration_s=4.0, seed=4, motion="reach", grip_object=0.3,
                                                     gripper_torque=0.5, feedback="gripper")).bag
    _convert([bag], tmp_path / "ds")
    info = json.loads((tmp_path / "ds/meta/info.json").read_text())
    assert info["features"]["complementary_info.feedback"] == {"dtype": "float32", "shape": [12],
                                                               "names": FEEDBACK_NAMES}
    d = _data(tmp_path / "ds")
    fb = np.stack(d["complementary_info.feedback"]).astype(np.float64)
    js = open_bag(bag).joint_state("/leader/feedback")
    state = open_bag(bag).joint_state(FOLLOWER_STATE)
    t0 = int(_episodes(tmp_path / "ds").recorded_wall_ns[0])
    t_obs = t0 + np.round(np.arange(len(fb)) * 1e9 / 30).astype(np.int64)
    held = np.searchsorted(js.stamps_ns, t_obs, side="right") - 1  # the last message at or before t_k
    assert (held >= 0).all() and t0 >= state.stamps_ns[0]
    np.testing.assert_array_equal(fb, np.concatenate([js.position, js.effort], axis=1)[held].astype(np.float32))
    gripping = fb[:, 11] > 0
    assert 10 < gripping.sum() < len(fb) and (fb[~gripping] == 0).all()  # rendered during the grasps only
    stats = json.loads((tmp_path / "ds/meta/stats.json").read_text())["complementary_info.feedback"]
    np.testing.assert_allclose(stats["max"], fb.max(0), rtol=1e-6)
    old = write_session(tmp_path / "old", SessionSpec(duration_s=4.0, seed=5)).bag
    _convert([old], tmp_path / "ds_old")
    assert "complementary_info.feedback" not in json.loads((tmp_path / "ds_old/meta/info.json").read_text())["features"]
    assert "complementary_info.feedback" not in _data(tmp_path / "ds_old").columns


def test_feedback_and_its_absence_never_mix_in_one_dataset(tmp_path: Path) -> None:
    """A bag recorded before /leader/feedback into a dataset that has the feature, or the reverse, is
    refused before encoding; a new dataset takes what most of its batch has and refuses the rest."""
    with_fb = [write_session(tmp_path / f"fb{i}", SessionSpec(duration_s=3.0, seed=20 + i, feedback="off")).bag
               for i in range(2)]
    without = write_session(tmp_path / "old", SessionSpec(duration_s=3.0, seed=30)).bag
    res = _convert([*with_fb, without], tmp_path / "ds")
    assert [len(ids) for ids in res.converted.values()] == [2] and len(res.refused) == 1
    assert "lacks complementary_info.feedback" in res.refused[0] and "new dataset" in res.refused[0]
    res = _convert([without], tmp_path / "ds")
    assert res.converted == {} and "episode has no complementary_info.feedback" in res.refused[0]
    _convert([without], tmp_path / "ds_old")
    res = _convert([with_fb[0]], tmp_path / "ds_old")
    assert res.converted == {} and "episode carries complementary_info.feedback" in res.refused[0]
