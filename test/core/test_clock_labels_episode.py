"""Core contracts: one monotonic clock, label codes, episode metadata round trip."""
from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from teleop_flywheel.core import clock, labels
from teleop_flywheel.core.episode import METADATA_RECORD, EpisodeMeta, Intervention


def test_now_is_monotonic_clock() -> None:
    before = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    mid = clock.now_ns()
    after = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    assert before <= mid <= after


def test_stamp_round_trip() -> None:
    stamp = clock.fill_stamp(SimpleNamespace(sec=0, nanosec=0), 12_345_678_901)
    assert (stamp.sec, stamp.nanosec) == (12, 345_678_901)
    assert clock.stamp_to_ns(stamp) == 12_345_678_901
    with pytest.raises(ValueError):
        clock.split_ns(-1)


def test_mapping_brackets_wall_clock() -> None:
    m = clock.sample_mapping()
    assert m.uncertainty_ns >= 0
    assert abs((time.time_ns() - clock.now_ns()) - m.offset_ns) < 50_000_000
    assert clock.ClockMapping.from_dict(m.to_dict()) == m


def test_label_codes() -> None:
    assert labels.trigger_code(None) == 0
    assert labels.trigger_name(labels.trigger_code("too_slow")) == "too_slow"
    assert labels.mode_name(labels.mode_code("policy")) == "policy"
    with pytest.raises(ValueError, match="unknown trigger label"):
        labels.trigger_code("bored")


def test_episode_meta_round_trip() -> None:
    meta = EpisodeMeta(
        episode_name="ep_0001",
        task="pick the cube",
        outcome="success",
        attempts=2,
        interventions=[Intervention(1, 10, 20, "wrong_grasp"), Intervention(2, 30, None, None)],
        drops={"/cameras/wrist/image/compressed": 3},
        ptp_offset_ns=None,
    )
    strings = meta.to_strings()
    assert all(isinstance(v, str) for v in strings.values())
    back = EpisodeMeta.from_strings(strings)
    assert back == meta
    assert [i.id for i in back.unlabelled_interventions] == [2]


def test_episode_outcome_is_never_invented() -> None:
    assert EpisodeMeta(episode_name="x").outcome == "unset"
    with pytest.raises(ValueError):
        EpisodeMeta(episode_name="x", outcome="probably")


def test_metadata_record_names_are_a_frozen_format() -> None:
    """Bags already recorded carry these MCAP metadata record names; a module move must not rename them."""
    from teleop_flywheel.recording.mcap.writer import START_RECORD

    assert METADATA_RECORD == "teleop_flywheel.episode"
    assert START_RECORD == "teleop_flywheel.episode.start"


def test_ros_time_conversion_round_trips_on_this_host() -> None:
    mono = clock.now_ns()
    ros = clock.to_ros_ns(mono)
    assert abs(ros - time.time_ns()) < 50_000_000  # ROS time is the system clock
    assert abs(clock.from_ros_ns(ros) - mono) < 100_000  # two offset samples apart


def test_clock_steps_beyond_slewing_are_found() -> None:
    def sample(mono_s: float, offset_ns: int) -> clock.ClockMapping:
        mono = int(mono_s * 1e9)
        return clock.ClockMapping(mono, mono + offset_ns, 1_000)

    base = 1_700_000_000 * 10**9
    # 60 s apart: slewing may move the offset by 30 ms + 1 ms; 20 ms is a slew, 40 ms a step.
    slewed = [sample(100, base), sample(160, base + 20_000_000), sample(220, base + 40_000_000)]
    assert clock.clock_steps(slewed) == []
    stepped = [sample(100, base), sample(101, base - 5_000_000), sample(102, base - 5_000_000)]
    (step,) = clock.clock_steps(stepped)
    assert step.drift_ns == -5_000_000 and step.at_mono_ns == 101 * 10**9
    assert step.bound_ns == 500_000 + 1_000_000 + 2_000  # 500 ppm of 1 s + 1 ms + both uncertainties
