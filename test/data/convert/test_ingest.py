"""`teleop-flywheel ingest`: every closed bag with a verdict and the operator's keep (or a grace period
without a discard) is validated, quarantined or converted, once; the card, weights, validation
record and audit follow; a crash at any write step is resumed to the crash-free result."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from support.paths import ROOT
from support.procs import wait_for
from support.zygote import DATA_STACK, Child, Zygote

from teleop_flywheel.data.convert.ingest_loop import IngestConfig, ingest_once, read_state, ready
from teleop_flywheel.data.lerobot import commit
from teleop_flywheel.data.validate.dataset_record import read_verdicts
from teleop_flywheel.recording.recorder.verdict import DISCARD, KEEP, mark_decision, verdict_doc, write_verdict
from teleop_flywheel.testing.synthetic_session import SessionSpec, write_session


def judged(bag: Path, action: str | None = None, age_s: float = 0.0) -> Path:
    """A verdict.json as the recorder writes it (validated `age_s` ago), and the operator's decision."""
    doc = verdict_doc(bag.name, {"report": {"episode_id": "x", "reasons": []}, "seconds": 1.0})
    doc["validated"]["wall_ns"] = time.time_ns() - int(age_s * 1e9)
    write_verdict(bag, doc)
    if action is not None:
        mark_decision(bag, action)
    return bag


def _episodes(ds: Path) -> list[str]:
    return [str(x) for x in pq.read_table(ds / "meta/episodes/chunk-000/file-000.parquet").column("source_bag")
            .to_pylist()]


def test_ingest_takes_kept_and_graced_bags_once(tmp_path: Path) -> None:
    watch, ds = tmp_path / "bags", tmp_path / "ds"
    def bag(name: str, seed: int, **kw: object) -> Path:
        return write_session(watch / name, SessionSpec(duration_s=3.0, seed=seed, **kw)).bag  # type: ignore[arg-type]

    judged(bag("kept", 1), KEEP)
    judged(bag("graced", 2), None, age_s=60)
    fresh = judged(bag("fresh", 3), None, age_s=1)
    gone = judged(bag("gone", 4), DISCARD)
    unjudged = bag("unjudged", 5)
    bad = judged(bag("bad", 6, outcome="unset"), KEEP)
    recording = watch / "recording"
    recording.mkdir()
    (recording / "recording_0.mcap").write_bytes(b"\x89MCAP0\r\n")  # still being written: no metadata.yaml
    cfg = IngestConfig([watch], ds, tmp_path / "quarantine", grace_s=30.0, codec="h264", audit_html=tmp_path / "a.html")
    assert ready(fresh, cfg)[1].startswith("grace period") and ready(unjudged, cfg) == (False, "no verdict yet")
    assert ready(gone, cfg) == (False, "discarded by the operator") and not ready(recording, cfg)[0]
    lines: list[str] = []
    out = ingest_once(cfg, lines.append)
    assert {Path(k).name: v for k, v in out.items()} == {"kept": "converted", "graced": "converted", "bad": "rejected"}
    assert sorted(_episodes(ds)) == ["graced", "kept"]
    assert (tmp_path / "quarantine/OUTCOME_UNSET/bad").is_dir() and not bad.exists()
    where = {e["name"]: e["quarantined_to"] for e in read_verdicts(ds)}
    assert where["bad"] == str(tmp_path / "quarantine/OUTCOME_UNSET/bad") and where["kept"] is None
    assert (ds / "README.md").is_file() and (ds / "meta/sample_weights.parquet").is_file()
    assert (tmp_path / "a.html").is_file() and any("bad: rejected OUTCOME_UNSET ->" in x for x in lines)
    assert ingest_once(cfg, lines.append) == {}  # idempotent: nothing new
    # the fresh bag's grace period passes; the unjudged one is taken only when asked to
    doc = json.loads((fresh / "verdict.json").read_text())
    doc["validated"]["wall_ns"] -= 60 * 10**9
    (fresh / "verdict.json").write_text(json.dumps(doc))
    os.utime(unjudged / "metadata.yaml", (time.time() - 60, time.time() - 60))
    cfg.without_verdict = True
    assert sorted(Path(k).name for k in ingest_once(cfg, lines.append)) == ["fresh", "unjudged"]
    assert sorted(_episodes(ds)) == ["fresh", "graced", "kept", "unjudged"]
    state = read_state(ds)["bags"]
    assert {v["name"]: v["outcome"] for v in state.values()} == {
        "kept": "converted", "graced": "converted", "bad": "rejected", "fresh": "converted", "unjudged": "converted"}


@pytest.fixture(scope="module")
def zygote() -> Iterator[Zygote]:
    with Zygote((*DATA_STACK, "teleop_flywheel.data.convert.ingest_loop")) as z:
        yield z


def _run_ingest(zygote: Zygote, watch: Path, ds: Path, env: dict[str, str], name: str) -> Child:
    """A real `ingest --once` process (forked from a zygote that imported the data stack once), ended."""
    child = zygote.start(["ingest", str(watch), "--dataset", str(ds), "--once", "--grace", "0", "--codec", "h264",
                          "--nice", "0"], env, watch.with_name(f"{name}.stderr"))
    child.wait(300)
    return child


@pytest.mark.parametrize("step", [3, 10, 14])
def test_ingest_resumes_after_a_crash(zygote: Zygote, tmp_path: Path, step: int) -> None:
    """kill -9 at a write step of the converter (while it stages, with the version made but the pointer
    not moved to it, while it refreshes after the commit):
    the next ingest leaves what a crash-free one leaves."""
    watch, ds = tmp_path / "bags", tmp_path / "ds"
    for i in range(2):
        judged(write_session(watch / f"ep{i}", SessionSpec(duration_s=3.0, seed=20 + i)).bag, KEEP)
    log = {"TELEOP_FLYWHEEL_FAULT_LOG": str(tmp_path / "log")}
    crashed = _run_ingest(zygote, watch, ds, {"TELEOP_FLYWHEEL_FAULT_AT": str(step), **log}, "crashed")
    assert crashed.returncode == -9, crashed.stderr()[-2000:]
    again = _run_ingest(zygote, watch, ds, log, "again")
    assert again.returncode == 0, again.stderr()[-2000:]
    assert sorted(_episodes(ds)) == ["ep0", "ep1"]
    info = json.loads((ds / "meta/info.json").read_text())
    assert info["total_episodes"] == 2
    assert {v["outcome"] for v in read_state(ds)["bags"].values()} <= {"converted", "duplicate"}
    assert not os.path.lexists(ds.with_name(ds.name + ".versions") / ".staging")


def test_ingest_waits_for_a_dataset_another_command_holds(tmp_path: Path) -> None:
    """A convert, curate or doctor of the dataset holds its lock: ingest (in a session: a node whose
    exit ends the session) waits its turn and then appends, instead of dying on a busy dataset."""
    watch, ds = tmp_path / "bags", tmp_path / "ds"
    judged(write_session(watch / "ep0", SessionSpec(duration_s=3.0, seed=30)).bag, KEEP)
    with commit.locked_dataset(ds):
        proc = subprocess.Popen([sys.executable, "-m", "teleop_flywheel.cli", "ingest", str(watch), "--dataset",
                                 str(ds), "--once", "--grace", "0", "--codec", "h264", "--nice", "0", "--no-audit"],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env={**os.environ, "PYTHONPATH": str(ROOT)})
        wait_for(lambda: proc.poll() is not None or _blocked_on_lock(proc.pid), 60, "ingest at the dataset's lock",
                 poll_s=0.05)
        assert proc.poll() is None, proc.communicate()[0]  # waiting, not dead
        assert not (ds / "meta/info.json").exists()
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    assert _episodes(ds) == ["ep0"]


def _blocked_on_lock(pid: int) -> bool:
    """The process sleeps waiting for a file lock (its kernel wait channel)."""
    try:
        return Path(f"/proc/{pid}/wchan").read_text().startswith("locks_")
    except OSError:
        return False
