"""A camera's lag pooled over the episodes of one camera instance (`lag_pool`), on the motion the rig
produces (`motion="rig"`: the demo's policy and takeover, the speed limit, the simulated servos):
clean episodes pass and their 95 % intervals hold the truth; a 35 ms late camera is rejected by each
episode alone; a 25 ms one, which no single episode can prove, by the pool; a camera restarting
with a 30 ms shift before episode 6 rejects 6–10 and keeps 1–5, with the instance id in the frames
and, for a foreign driver without one, through the change point."""
from __future__ import annotations

import copy
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from teleop_flywheel.core.bag_topics import FOLLOWER_STATE
from teleop_flywheel.core.episode import CAMERA_PUBLISHERS, EpisodeMeta
from teleop_flywheel.data.validate import validator as val
from teleop_flywheel.data.validate.camera_lag import motion_events
from teleop_flywheel.data.validate.lag_pool import apply_lag_pools, camera_instances, change_points, pool
from teleop_flywheel.data.validate.reasons import CLOCK_DRIFT, CLOCK_OFFSET, Reason, ValidateConfig
from teleop_flywheel.recording.mcap.reader import open_bag
from teleop_flywheel.testing.synthetic_session import SessionSpec, write_session

CFG = ValidateConfig()  # the shipped defaults (config/validate.yaml holds the same)


def _rig(root: Path, name: str, seed: int, skew: float, index: int, instance: str, seconds: float = 7.0,
         size: tuple[int, int] = (320, 240)) -> Path:
    spec = SessionSpec(duration_s=seconds, motion="rig", seed=seed, camera_clock_skew_ms=skew, cameras=("front",),
                       session_kind="policy", interventions=((2.4, 4.4, "wrong_grasp"),),
                       session_time_s=60.0 + 20.0 * index, rig_id=name, camera_instance=instance,
                       width=size[0], height=size[1])
    return write_session(root / f"{name}_{index:02d}", spec).bag


@pytest.fixture(scope="module")
def restart(tmp_path_factory: pytest.TempPathFactory) -> list[val.EpisodeReport]:
    """10 episodes; the camera restarts before the 6th, 30 ms late from then on (the seeds' case)."""
    root = tmp_path_factory.mktemp("restart")
    bags = [_rig(root, "restart", 300 + i, 30.0 if i >= 5 else 0.0, i, "cam-b" if i >= 5 else "cam-a")
            for i in range(10)]
    reports, _fits = val.validate_batch(bags, CFG, workers=1)
    return reports


def test_restart_rejects_the_episodes_after_it_and_keeps_those_before(restart: list[val.EpisodeReport]) -> None:
    rejected = [r.name for r in restart if CLOCK_OFFSET in r.codes]
    assert rejected == [f"restart_{i:02d}" for i in range(5, 10)], [r.line() for r in restart]
    assert all(r.passed for r in restart[:5]), [r.line() for r in restart[:5]]
    # a step in the lag is a new instance, not a drift: CLOCK_DRIFT stays out of it
    assert not any(CLOCK_DRIFT in r.codes for r in restart), [r.line() for r in restart]
    after = restart[9].camera_pool["front"]
    # the pool's N counts the estimates that could tell (an episode whose best fit jumps to another
    # peak when one second is left out cannot: camera_lag's module doc, 6.)
    assert after["instance"] == "cam-b" and after["members"] == 5 and after["episodes"] >= 3 and after["rejected"]
    assert abs(after["lag_ms"] - 30.0) <= 1.96 * after["stderr_ms"] + 5.0, after
    before = restart[0].camera_pool["front"]
    assert before["instance"] == "cam-a" and not before["rejected"] and abs(before["lag_ms"]) < 10.0
    pooled = [x for r in restart[5:] for x in r.reasons if x.code == CLOCK_OFFSET and "pool" in x.numbers]
    for x in pooled:  # the pooled figure and the N behind it
        assert f"({after['episodes']} episodes)" in x.detail and "pooled over the session of instance cam-b" in x.detail


def test_without_instance_ids_the_change_point_splits_the_session(restart: list[val.EpisodeReport]) -> None:
    foreign = [copy.deepcopy(r) for r in restart]
    for r in foreign:
        r.reasons = [x for x in r.reasons if "pool" not in x.numbers]
        r.camera_instance, r.camera_pool = {"front": ""}, {}
    apply_lag_pools(foreign, CFG)
    assert [CLOCK_OFFSET in r.codes for r in foreign] == [False] * 5 + [True] * 5, [r.line() for r in foreign]


def test_clean_rig_episodes_pass_and_35ms_is_rejected_alone(tmp_path: Path) -> None:
    """Two episodes whose estimates are close to the truth (the rates over many are bench/camera_lag.py's:
    seed 3's clean estimate is 9 ms off, and its +35 ms skew is left to the pool)."""
    for seed in (1, 5):
        for skew in (0.0, 35.0, -35.0):
            bag = _rig(tmp_path, f"s{seed}{skew:+.0f}", seed, skew, 0, "")
            r = val.validate_bag((str(bag), CFG))
            est = r.camera_lag["front"]
            assert not est["note"] and est["events"] >= 2, est
            assert abs(est["lag_ms"] - skew) <= 1.96 * est["stderr_ms"], est  # the 95 % interval holds the truth
            if skew == 0.0:
                assert r.status == "PASS", r.line()
            else:
                assert r.codes == [CLOCK_OFFSET] and "95 %" in r.reasons[0].detail, r.line()


def test_image_motion_that_saturates_does_not_pull_the_lag(tmp_path: Path) -> None:
    """A thin link moving further in a frame than it is wide changes no more pixels: the image motion
    bends below the joint speed, and a fit linear in speed read that as a lag: seed 10 at the camera's
    640×480, true lag 0, said −15.3 ± 7.3 ms (its 95 % interval missed the truth)."""
    for skew in (0.0, 35.0):
        bag = _rig(tmp_path, f"sat{skew:+.0f}", 10, skew, 0, "", seconds=8.0, size=(640, 480))
        r = val.validate_bag((str(bag), CFG))
        est = r.camera_lag["front"]
        assert not est["note"] and abs(est["lag_ms"] - skew) <= 1.96 * est["stderr_ms"], est
        assert r.codes == ([CLOCK_OFFSET] if skew else []), r.line()


def test_a_clock_in_the_picture_does_not_drown_the_arm(tmp_path: Path) -> None:
    """The synthetic camera's timecode strip is a clock in the picture, as a real camera's on-screen time
    is. At the demo's 320×240 one of its cells changes almost only where its digits roll over; in this
    episode that one frame lines up with a fast move at some searched lag, the cell passed the chance
    bound and its spike was most of the image motion the joints could not explain: clean, it said
    +105.8 ms at R² 0.78, cannot tell; 35 ms late, the same (+140.8 ms), where it must be rejected.
    A cell whose change is one frame's is no evidence that it follows the arm."""
    for skew in (0.0, 35.0):
        r = val.validate_bag((str(_rig(tmp_path, f"clock{skew:+.0f}", 1005, skew, 5, "", seconds=8.0)), CFG))
        est = r.camera_lag["front"]
        assert not est["note"] and est["r2"] >= 0.85, est
        assert abs(est["lag_ms"] - skew) <= 1.96 * est["stderr_ms"], est  # the 95 % interval holds the truth
        assert r.codes == ([CLOCK_OFFSET] if skew else []) and not r.warnings, r.line()


def test_joints_turning_about_parallel_axes_together_are_timed(tmp_path: Path) -> None:
    """Seed 13 of the bench's policy motion at 640×480: shoulder_lift, elbow_flex and wrist_flex turn
    about parallel axes, so the links after them sweep the image by their combined turn. Fitted as six
    separate joints its squared error had two minima of the same depth (−20 and 0 ms, 0.1 % apart): clean
    it said −18.8 ± 12.1 ms and 35 ms early −53.8 ± 12.1 ms, both over the 12 ms cap, cannot tell. That
    fit, which cannot tell, now tries the pairs |Δq_a ± Δq_b|; they predict the seconds left out of
    their fit better, and with them the minimum at the truth wins."""
    for skew in (0.0, -35.0):
        bag = _rig(tmp_path, f"pairs{skew:+.0f}", 13, skew, 3, "cam-x", seconds=8.0, size=(640, 480))
        r = val.validate_bag((str(bag), CFG))
        est = r.camera_lag["front"]
        assert not est["note"] and est["stderr_ms"] <= CFG.camera_lag_max_stderr_ms, est
        assert abs(est["lag_ms"] - skew) <= 1.96 * est["stderr_ms"], est  # the 95 % interval holds the truth
        assert r.codes == ([CLOCK_OFFSET] if skew else []) and not r.warnings, r.line()


def _report(i: int, lag: float, stderr: float = 6.2, instance: str = "x") -> val.EpisodeReport:
    return val.EpisodeReport(f"/b/{i}", f"ep{i}", f"id{i}", session="rig 2026-01-01",
                             camera_lag={"front": {"lag_ms": lag, "stderr_ms": stderr, "note": ""}},
                             clock_points={"camera_lag/front": [[1e18 + i * 1e10, lag, stderr]]},
                             camera_instance={"front": instance})


def test_a_25ms_lag_no_episode_can_prove_is_rejected_by_its_pool() -> None:
    lags = [25.0 + d for d in (-6.0, 4.0, -2.0, 7.0, 1.0, -5.0, 3.0, 0.0, -3.0, 5.0)]
    reports = [_report(i, lag) for i, lag in enumerate(lags)]
    assert not any(r.reasons for r in reports)  # alone, within 1.645 standard errors of the 15 ms bound
    pools = apply_lag_pools(reports, CFG)
    assert len(pools) == 1 and pools[0].rejected and pools[0].episodes == 10
    assert all(r.codes == [CLOCK_OFFSET] for r in reports)
    assert str(pools[0]) == "camera front lag +26 ± 2 ms (10 episodes)"  # the median, 25.5
    assert "10 of its 10 estimates agree, 10 episodes" in reports[0].reasons[0].detail
    clean = [_report(i, lag - 25.0) for i, lag in enumerate(lags)]
    assert not apply_lag_pools(clean, CFG)[0].rejected and not any(r.reasons for r in clean)


def test_a_pool_is_the_middle_of_its_middle_two_estimates() -> None:
    """The ten estimates of the bench's 25 ms late 320x240 camera (policy motion, seeds 0-9). Their
    weights differ by 2 % at most; the pool took the estimate where the weight first passed half,
    +19.5 ms, the lower of the middle two (+19.5, +23.1), and was not beyond 15 ms (it needs 15 + 1.645
    x 2.9): no episode of that camera was rejected. Read between the middle two it is +21.0."""
    ests = [(23.11, 7.13), (18.62, 7.13), (26.71, 7.49), (19.49, 7.38), (30.85, 7.06), (18.91, 7.23),
            (23.83, 7.06), (29.03, 7.59), (17.79, 7.04), (18.15, 7.05)]
    lag, stderr = pool(ests) or (0.0, 0.0)
    assert 19.49 < lag < 23.11 and abs(lag - 21.0) < 0.1, lag
    reports = [_report(i, x, se) for i, (x, se) in enumerate(ests)]
    assert not any(r.reasons for r in reports)
    assert apply_lag_pools(reports, CFG)[0].rejected and all(r.codes == [CLOCK_OFFSET] for r in reports)
    assert (pool([(1.0, 2.0), (3.0, 2.0)]) or (0.0, 0.0))[0] == 2.0  # equal weights: the usual median
    assert (pool([(1.0, 2.0), (2.0, 2.0), (30.0, 2.0)]) or (0.0, 0.0))[0] == 2.0


def test_a_pool_rejects_only_when_most_of_its_estimates_agree() -> None:
    # two sharp estimates beyond the bound carry the weighted median, five vaguer ones say 0 ms: the
    # pooled +40 ms lies outside those five's intervals, so two episodes do not speak for the camera
    ests = [(40.0, 3.0), (40.0, 3.0)] + [(0.0, 11.0)] * 5
    reports = [_report(i, lag, se) for i, (lag, se) in enumerate(ests)]
    pools = apply_lag_pools(reports, CFG)
    assert pools[0].lag_ms == 40.0 and pools[0].agreeing == 2 and not pools[0].rejected, pools[0]
    assert not any(r.reasons for r in reports)


def test_an_episode_its_cameras_pool_contradicts_is_a_warning_not_a_rejection() -> None:
    """A false peak rejected alone (+70 ± 6 ms) among episodes of the same instance that prove the
    camera on time is the estimator's outlier: a warning naming both figures, never a rejection."""
    ests = [(2.0, 6.0), (-3.0, 6.0), (1.0, 6.0), (-1.0, 6.0), (70.0, 6.0)]
    reports = [_report(i, lag, se) for i, (lag, se) in enumerate(ests)]
    reports[4].reasons.append(Reason(CLOCK_OFFSET, "camera front lags the joints by 70.0 ± 6.0 ms (from its content)",
                                     {"camera": "front", "lag_ms": 70.0, "stderr_ms": 6.0}))
    pools = apply_lag_pools(reports, CFG)
    assert not pools[0].rejected and pools[0].agreeing == 4
    assert reports[4].passed and [w.code for w in reports[4].warnings] == ["CAMERA_LAG_UNKNOWN"]
    assert "+70 ± 6 ms set against the camera front lag +1 ± 3 ms" in reports[4].warnings[0].detail
    # a pool that cannot prove the camera on time (too few agreeing estimates) overrules nothing
    few = [_report(0, 1.0), _report(1, 70.0)]
    few[1].reasons.append(Reason(CLOCK_OFFSET, "late", {"camera": "front", "lag_ms": 70.0, "stderr_ms": 6.0}))
    apply_lag_pools(few, CFG)
    assert few[1].codes == [CLOCK_OFFSET]


def test_one_camera_instance_is_one_pool_across_midnight_utc() -> None:
    """An evening session that crosses 00:00 UTC is one camera process: its episodes pool together
    (split by the UTC day, the outlier's side held two estimates and could prove nothing)."""
    ests = [(2.0, 6.0), (-3.0, 6.0), (1.0, 6.0), (-1.0, 6.0), (70.0, 6.0)]
    reports = [_report(i, lag, se) for i, (lag, se) in enumerate(ests)]
    for r in reports[3:]:
        r.session = "rig 2026-01-02"
    reports[4].reasons.append(Reason(CLOCK_OFFSET, "late", {"camera": "front", "lag_ms": 70.0, "stderr_ms": 6.0}))
    pools = apply_lag_pools(reports, CFG)
    assert len(pools) == 1 and pools[0].episodes == 5 and reports[4].passed, pools


def test_an_instance_whose_estimates_scatter_beyond_their_errors_decides_nothing() -> None:
    """The simulator's sinusoidal operator: clean 8 s teleop episodes estimated from -175 to +152 ms,
    each at ± 6 ms (scatter ~3x their errors). Two were rejected alone; none may be, and the pool
    (+38 ms by its median here) rejects nothing: the camera's lag cannot be told from this motion."""
    ests = [(-175.0, 6.0), (-69.0, 6.0), (-14.0, 6.0), (38.0, 6.0), (40.0, 6.0), (45.0, 6.0), (152.0, 6.0)]
    reports = [_report(i, lag, se) for i, (lag, se) in enumerate(ests)]
    for r, (lag, se) in zip(reports, ests, strict=True):
        if abs(lag) > 40:
            r.reasons.append(Reason(CLOCK_OFFSET, "late", {"camera": "front", "lag_ms": lag, "stderr_ms": se}))
    pools = apply_lag_pools(reports, CFG)
    assert pools[0].scatter > 2.5 and not pools[0].rejected, pools[0]
    assert all(r.passed for r in reports), [r.line() for r in reports]
    assert all("scatter" in w.detail for r in reports for w in r.warnings)
    assert sum(bool(r.warnings) for r in reports) == 4


def test_short_smooth_episodes_cannot_tell_and_no_pool_rejects_them(tmp_path: Path) -> None:
    """3 s of the synthetic `smooth` motion, true lag 0: seed 2's fit fell on +52 ± 6 ms (three one-second
    blocks gave its sandwich), rejecting it alone and, pooled with its stalled twin, every episode."""
    specs = [SessionSpec(duration_s=3.0, seed=seed, camera_stall=stall, rig_id="short")
             for seed in (1, 2, 3) for stall in (None, (1.0, 0.8))]
    bags = [write_session(tmp_path / f"s{i}", spec).bag for i, spec in enumerate(specs)]
    reports, _fits = val.validate_batch(bags, CFG, workers=1)
    for r, spec in zip(reports, specs, strict=True):
        assert CLOCK_OFFSET not in r.codes, r.line()
        assert r.codes == (["FRAME_GAP"] if spec.camera_stall else []), r.line()
    seed2 = reports[2].camera_lag["wrist"]
    assert "too short" in seed2["note"] and seed2["stderr_ms"] == CFG.camera_lag_search_ms, seed2


def test_pool_widens_with_scatter_and_one_outlier_is_no_restart() -> None:
    # the seeds' restart as the rig's motion measured it: one episode on a false peak (+7.3) does not
    # pull the pool of a 30 ms late camera back inside the bound
    late = pool([(23.75, 6.38), (7.3, 6.3), (22.62, 6.03), (28.6, 6.09)])
    assert late is not None and late[0] - 15.0 > 1.645 * late[1], late
    tight = pool([(0.0, 6.0)] * 9)
    scattered = pool([(x, 6.0) for x in (-30.0, 30.0, -30.0, 30.0, -30.0, 30.0, -30.0, 30.0, 0.0)])
    assert tight is not None and scattered is not None and scattered[1] > 2.5 * tight[1]
    ests: list[tuple[float, float] | None] = [(0.0, 6.0)] * 9 + [(40.0, 6.0)]
    assert change_points(ests) == [0]  # a lone outlier at the end
    # an episode that could not tell between the two: on neither side (it may have been either)
    assert change_points([(0.0, 6.0)] * 4 + [None] + [(30.0, 6.0)] * 4) == [0, 4, 5]
    assert change_points([(0.0, 6.0)] * 4 + [None, (30.0, 6.0), None] + [(30.0, 6.0)] * 3) == [0, 4, 5]


def test_episodes_that_cannot_tell_just_before_a_restart_are_not_judged_by_its_pool() -> None:
    """The bench's 320x240 policy restart session without instance ids: episodes 4 and 5 could not
    tell, the camera restarted 30 ms late before episode 6. The change point put them with the late
    run, and its pool rejected two clean episodes."""
    lags = [1.0, -2.0, 3.0, None, None, 31.0, 28.0, 33.0, 29.0, 30.0]
    reports = [_report(i, 0.0 if lag is None else lag, 6.5, instance="") for i, lag in enumerate(lags)]
    for i in (3, 4):
        reports[i].camera_lag["front"] = {"lag_ms": 12.0, "stderr_ms": 200.0, "note": "another lag fits as well"}
    pools = apply_lag_pools(reports, CFG)
    assert [(p.members, p.rejected) for p in pools] == [(3, False), (2, False), (5, True)]
    assert [bool(r.codes) for r in reports] == [False] * 5 + [True] * 5


def test_instance_ids_are_data_checked_against_a_pattern() -> None:
    ep = EpisodeMeta("ep", extra={CAMERA_PUBLISHERS: {"front": ["0a1b2c"], "side": ["../../etc"], "top": "nope"}})
    no_frames = SimpleNamespace(data=[])  # frames without our camera's instance: the GIDs decide
    ims = {c: no_frames for c in ("front", "side", "top")}
    assert camera_instances(ims, ep) == {"front": "gid:0a1b2c", "side": "", "top": ""}  # type: ignore[arg-type]


def test_a_still_arm_has_no_corners(tmp_path: Path) -> None:
    bag = _rig(tmp_path, "corners", 3, 0.0, 0, "")
    js = open_bag(bag).joint_state(FOLLOWER_STATE)
    assert motion_events(js.stamps_ns, js.position) >= 6  # the moves' starts, stops and the takeover
    assert motion_events(js.stamps_ns, np.zeros_like(js.position)) == 0


@pytest.mark.parametrize("kind", ["policy", "teleop"])
def test_the_task_specs_clock_probe_is_a_corner_the_camera_check_counts(tmp_path: Path, kind: str) -> None:
    """The probe at the reset (wrist_flex ±0.1 rad in 300 ms, within the 2 rad/s limit) moves the
    simulated follower and adds to the episode's timing events: played by the policy, or on the
    leader's command in a teleop session."""
    from teleop_flywheel.core.task_spec import parse_task_spec

    spec = parse_task_spec({"instruction": "slow task", "clock_probe": {"joint": "wrist_flex", "amplitude_rad": 0.1,
                                                                        "duration_s": 0.3}})
    counts, positions = [], []
    for task in (None, spec):
        bag = write_session(tmp_path / f"probe{task is not None}", SessionSpec(
            duration_s=2.0, motion="rig", seed=3, cameras=("front",), session_kind=kind, task_spec=task)).bag
        js = open_bag(bag).joint_state(FOLLOWER_STATE)
        counts.append(motion_events(js.stamps_ns, js.position))
        positions.append(np.asarray(js.position))
        t = (np.asarray(js.stamps_ns) - js.stamps_ns[0]) / 1e9
    probe = positions[1] - positions[0]  # the same session with and without it
    assert np.abs(probe[t < 0.45]).max() < 1e-9  # it starts 0.5 s after the reset
    assert 0.08 < np.abs(probe[:, 3]).max() < 0.12, np.abs(probe[:, 3]).max()  # wrist_flex out by 0.1 rad
    assert np.abs(probe[:, [0, 1, 2, 4, 5]]).max() < 1e-9  # and nothing else
    if kind == "policy":  # the teleop operator's catch-up at the start already has corners there
        assert counts[1] > counts[0], counts  # its corners lie within 300 ms: they count as one event or two


@pytest.mark.parametrize("seed", (0, 1))
def test_a_reaching_teleop_operator_is_timed_at_the_demos_camera(tmp_path: Path, seed: int) -> None:
    """Teleoperation by a hand at work (`rig_human="reach"`: point-to-point moves with pauses, the gripper
    closing and opening, through the speed guard and the simulated servos) at the demo's 320×240: every
    start and stop is a corner, so a clean camera passes and ±35 ms is rejected on its own — where the
    simulator's sinusoidal operator mostly cannot tell (bench/camera_lag.py, the `teleop` motion)."""
    for skew in (0.0, 35.0, -35.0):
        spec = SessionSpec(duration_s=8.0, motion="rig", seed=seed, camera_clock_skew_ms=skew, cameras=("front",),
                           session_kind="teleop", rig_human="reach")
        r = val.validate_bag((str(write_session(tmp_path / f"reach{seed}{skew:+.0f}", spec).bag), CFG))
        est = r.camera_lag["front"]
        assert not est["note"] and est["events"] >= 4, est
        assert abs(est["lag_ms"] - skew) <= 1.96 * est["stderr_ms"], est
        assert r.codes == ([CLOCK_OFFSET] if skew else []), r.line()


def test_the_rig_motion_names_its_operator(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="rig_human"):
        write_session(tmp_path / "wave", SessionSpec(duration_s=1.0, motion="rig", rig_human="wave"))
