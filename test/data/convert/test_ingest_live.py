"""`ingest` beside a recording: while it converts (at its low priority, in its own
process), the recorder node — in its own process, as deployed — records an episode with 0 drops
and no stall; that episode, once the recorder's verdict and the operator's keep are there, is
ingested too — by the same watcher resumed at the machine's priority, since at nice 10 beside
other load finishing would take minutes, which is its job (yielding), not this test's."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("rclpy")

from support import procs, recorder_rig  # noqa: E402

from teleop_flywheel.core.calibration import sim_calibration_file  # noqa: E402
from teleop_flywheel.core.episode import EpisodeMeta  # noqa: E402
from teleop_flywheel.data.convert.ingest_loop import read_state  # noqa: E402
from teleop_flywheel.recording.mcap.metadata import read_metadata_yaml  # noqa: E402
from teleop_flywheel.recording.mcap.reader import open_bag  # noqa: E402
from teleop_flywheel.recording.recorder.verdict import KEEP, mark_decision, verdict_doc, write_verdict  # noqa: E402
from teleop_flywheel.testing.synthetic_session import SessionSpec, write_session  # noqa: E402


@pytest.fixture
def rig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    cals = f"[leader={sim_calibration_file('leader')},follower={sim_calibration_file('follower')}]"
    node_cmd = procs.node_cmd
    monkeypatch.setattr(recorder_rig, "node_cmd", lambda name, **p: node_cmd(name, calibration_files=cals, **p))
    r = recorder_rig.Rig(tmp_path / "bags")
    try:
        procs.wait_for(lambda: r.statuses and not r.statuses[-1]["missing_topics"], 90,
                              "the recorder finding every stream")
        yield r
    finally:
        r.close()


@pytest.mark.timeout(900)
def test_a_recording_made_while_ingest_converts_has_no_drops(rig: Any, tmp_path: Path) -> None:
    watch, ds = tmp_path / "bags", tmp_path / "ds"
    for i in range(2):  # work for the converter: two kept 10 s episodes, without efforts as the rig's below
        bag = write_session(watch / f"backlog_{i}", SessionSpec(duration_s=10.0, seed=50 + i, width=640,
                                                                 height=480, effort=False)).bag
        write_verdict(bag, verdict_doc(bag.name, {"report": {"reasons": []}, "seconds": 1.0}))
        mark_decision(bag, KEEP)
    log = open(tmp_path / "ingest.log", "w")  # noqa: SIM115 - the process writes to it until terminated
    ingest = subprocess.Popen([sys.executable, "-m", "teleop_flywheel.cli", "ingest", str(watch), "--dataset", str(ds),
                               "--poll", "0.5", "--grace", "0"], stdout=log, stderr=subprocess.STDOUT,
                              env=os.environ.copy(), start_new_session=True)
    try:
        procs.wait_for(lambda: "watching" in (tmp_path / "ingest.log").read_text(), 120, "ingest up")
        time.sleep(2.0)
        assert not state_path_has(ds, "backlog_0"), "the converter must still be at work when recording starts"
        assert rig.call("start")[0]
        time.sleep(8.0)
        rig.label(outcome="success", attempts=1)
        ok, saved, _ = rig.call("stop")
        assert ok, saved
        episode = Path(saved.split()[1].rstrip(":"))
        # The recorder lost nothing (drops = publication-sequence gaps per publisher). The generator runs
        # in this test process on a shared machine: a pause of its own shows as a gap, never as a drop.
        meta = EpisodeMeta.from_strings(read_metadata_yaml(episode)["custom_data"])
        assert meta.drops and not any(meta.drops.values()), meta.drops
        assert len(open_bag(episode).stamps("/follower/joint_states")) > 8 * 200 * 0.8
        procs.wait_for(lambda: (episode / "verdict.json").is_file(), 120, "the recorder's verdict")
        assert rig.call("keep")[0]
    finally:
        ingest.terminate()  # mid-conversion, perhaps: a resumed ingest finishes what it began
        ingest.wait(60)
        log.close()
    resumed = subprocess.run([sys.executable, "-m", "teleop_flywheel.cli", "ingest", str(watch), "--dataset", str(ds),
                              "--once", "--grace", "0", "--nice", "0"], capture_output=True, text=True, timeout=600,
                             env=os.environ.copy())
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-2000:]
    state = {v["name"]: v["outcome"] for v in read_state(ds)["bags"].values()}
    assert state["backlog_0"] == "converted" and state["backlog_1"] == "converted", state
    # Taken once judged and kept: converted, or — the generator in this process stalls on a loaded machine,
    # which the validator must reject (FRAME_GAP) — quarantined; either way never left behind.
    outcome = state[episode.name]
    assert outcome in ("converted", "rejected"), (state, resumed.stdout[-2000:])
    assert (outcome == "rejected") == (not episode.exists()) == any((tmp_path / "quarantine").rglob(episode.name))
    info = json.loads((ds / "meta/info.json").read_text())
    assert info["total_episodes"] == 2 and (ds / "README.md").is_file()
    # The rig's camera is 320x240, the backlog's 640x480: a converted episode of the rig goes to the
    # camera-set sibling beside the dataset (`<DS>__front320x240`), never into the 640x480 one.
    siblings = sorted(p for p in ds.parent.glob(ds.name + "__*") if not p.name.endswith(".versions"))
    assert [p.name for p in siblings] == ([f"{ds.name}__front320x240"] if outcome == "converted" else [])
    for sibling in siblings:
        assert json.loads((sibling / "meta/info.json").read_text())["total_episodes"] == 1


def state_path_has(ds: Path, name: str) -> bool:
    path = ds.with_name(ds.name + ".ingest.json")
    return path.is_file() and name in path.read_text()
