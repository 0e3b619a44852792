"""`ingest:=true`: a session with ingest on keeps a dataset current from its own output folder
while it goes on recording — real processes (the supervisor, a synthetic camera, the recorder, the ingest
node and the low-priority ingest process it runs), real rclpy; a failure of that process is reported as a
node's; and the option names no path outside the session's output_dir (the graph refuses it, the node
refuses a symlink leading out)."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from support.cli import run_cli
from support.procs import wait_for

from teleop_flywheel.recording.recorder.output_layout import dataset_in
from teleop_flywheel.recording.recorder.verdict import KEEP, mark_decision, verdict_doc, write_verdict
from teleop_flywheel.ros.session.launch.graph import CameraSpec, Graph, SessionConfig, build_graph, with_parameters
from teleop_flywheel.testing.synthetic_session import SessionSpec, write_session


def taken(out: Path) -> dict[str, dict[str, Any]]:
    """Ingest's state file in a session's output_dir: bag name -> what became of it."""
    try:
        return {v["name"]: v for v in json.loads((out / "dataset.ingest.json").read_text())["bags"].values()}
    except (OSError, ValueError):
        return {}


def kept_bag(staging: Path, name: str, seed: int) -> Path:
    """A short clean episode, closed, judged and kept — as a stopped episode is when ingest may take it."""
    bag = write_session(staging / name, SessionSpec(duration_s=3.0, seed=seed, width=320, height=240)).bag
    write_verdict(bag, verdict_doc(bag.name, {"report": {"reasons": []}, "seconds": 0.1}))
    mark_decision(bag, KEEP)
    return bag


def _stat(pid: int) -> list[str]:
    text = Path(f"/proc/{pid}/stat").read_text()
    return text[text.rindex(")") + 2:].split()


@pytest.mark.timeout(900)
def test_a_session_with_ingest_keeps_its_dataset_current_while_it_records(tmp_path: Path) -> None:
    pytest.importorskip("rclpy")
    from std_msgs.msg import String
    from support.procs import wait_gone

    from teleop_flywheel.ros.nodes.common import LATCHED_QOS
    from teleop_flywheel.ros.nodes.recorder_client import RecorderClient
    from teleop_flywheel.ros.session.clients import RecorderStatus
    from teleop_flywheel.ros.session.launch.supervisor import CLEAN_STOP, Session

    out, staging = tmp_path / "bags", tmp_path / "staging"
    cfg = SessionConfig(cameras=(CameraSpec("front", source="synthetic", device="synthetic", width=320, height=240),),
                        output_dir=str(out), ingest=True, metrics="off")
    graph = build_graph("record", cfg)
    assert [n.name for n in graph.nodes] == ["camera_front", "recorder", "ingest"]
    assert graph.node("ingest").parameters == {"watch_dir": str(out), "dataset": "dataset"}
    statuses: list[dict[str, Any]] = []
    with Session(graph) as session:
        operator = RecorderClient(session.context, "ingest_operator")
        recorder = RecorderStatus(operator.node)
        operator.node.create_subscription(String, "/ingest/status", lambda m: statuses.append(json.loads(m.data)),
                                          LATCHED_QOS)
        session.add_node(operator.node)
        assert operator.ready(120)
        operator.call("start")  # the session records while ingest works beside it
        recording = Path(recorder.wait(lambda s: s["state"] == "recording", 60, "recording")["bag"])
        pid = wait_for(lambda: statuses and statuses[-1].get("pid"), 120, "/ingest/status")
        # Low priority, in a session of its own (its autogroup niced too): the recorder keeps its CPU share.
        wait_for(lambda: int(_stat(pid)[16]) == 10 and int(_stat(pid)[3]) == pid, 120, "nice 10, own session")
        for i in range(2):  # episodes added while the session runs: each lands in the dataset
            bag = kept_bag(staging, f"kept_{i}", 20 + i)
            os.rename(bag, out / bag.name)  # it appears as a stopped, judged and kept episode does
            wait_for(lambda name=bag.name: taken(out).get(name), 300, f"ingest taking {bag.name}")
            assert taken(out)[bag.name]["outcome"] == "converted", taken(out)
            info = json.loads((out / "dataset" / "meta" / "info.json").read_text())
            assert info["total_episodes"] == i + 1, info
            # ... while the session kept recording, its open episode untouched (no metadata.yaml: not taken)
            assert recorder.latest["state"] == "recording" and recorder.latest["bag"] == str(recording)
            assert recording.is_dir() and not (recording / "metadata.yaml").exists()
            assert recording.name not in taken(out)
        # The dataset's record, card and sample weights refreshed, the audit page beside it: all inside output_dir.
        for part in ("dataset/README.md", "dataset/meta/sample_weights.parquet", "dataset/meta/validation/record.json",
                     "dataset_audit.html"):
            assert (out / part).is_file(), part
        before = recorder.last_saved()
        operator.call("stop")
        saved = Path(recorder.saved_after(before))
        assert saved == recording
        operator.call("keep")
        # The session's own episode is taken once judged and kept: this rig has no arms (kind record), so it
        # is rejected and moved to the session's quarantine — inside output_dir too.
        wait_for(lambda: taken(out).get(saved.name), 300, "ingest taking the session's own episode")
        entry = taken(out)[saved.name]
        assert entry["outcome"] == "rejected" and "MISSING_STREAM" in entry["codes"], entry
        assert (
            Path(entry["quarantined_to"]).is_dir() and Path(entry["quarantined_to"]).parent.parent == out / "quarantine"
        )
        last = wait_for(lambda: statuses and statuses[-1]["taken"] == {"converted": 2, "rejected": 1}
                        and statuses[-1], 60, "/ingest/status after the third bag")
        assert last["episodes"] == 2 and last["frames"] > 0 and last["dataset"] == str(out / "dataset")
        session.remove_node(operator.node)
    # Started and stopped with the session: a clean stop, its ingest process gone too.
    assert not session.failed.is_set() and session.problems == [], session.problems
    assert session.exit_codes["ingest"] in CLEAN_STOP
    assert wait_gone([pid], 10) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bags", "staging"]  # nothing written outside the session's


@pytest.mark.timeout(600)
def test_a_failing_ingest_process_is_reported_as_a_nodes_failure(tmp_path: Path) -> None:
    """The ingest process refuses a dataset it cannot append to (another fps) and exits; the node reports it
    the way the supervisor reports any node: the session fails, naming `ingest` and its exit code."""
    pytest.importorskip("rclpy")
    from teleop_flywheel.ros.errors import SessionError
    from teleop_flywheel.ros.session.launch.supervisor import Session

    out = tmp_path / "bags"
    (out / "dataset" / "meta").mkdir(parents=True)
    (out / "dataset" / "meta" / "info.json").write_text(json.dumps({"codebase_version": "v3.0", "fps": 15,
                                                                     "features": {}}))
    # The ingest node alone (nothing else is under test), at nice 0: what fails need not wait its turn.
    full = with_parameters(build_graph("record", SessionConfig(cameras=(), output_dir=str(out), ingest=True)),
                           {"ingest": {"nice": 0}})
    graph = Graph("record", (full.node("ingest"),))
    reports: list[str] = []
    session = Session(graph, log=reports.append)
    try:
        try:
            session.start()
        except SessionError as exc:  # the process can fail before the node is seen on the graph
            reports.append(str(exc))
        wait_for(lambda: session.failed.is_set(), 300, "the failure reported")
    finally:
        session.stop()
    assert any(r.startswith("ingest (pid ") and "exited unexpectedly: exit code 1" in r for r in reports), reports


@pytest.mark.parametrize("dataset", ["/elsewhere/ds", "../ds", "dataset/../../ds", ".", "quarantine/ds", "discarded"])
def test_the_ingest_dataset_must_lie_inside_the_session_output(tmp_path: Path, dataset: str) -> None:
    out = tmp_path / "bags"
    with pytest.raises(ValueError, match="ingest dataset"):
        dataset_in(out, dataset)
    with pytest.raises(ValueError, match="ingest dataset"):  # the graph refuses it before anything starts
        build_graph("record", SessionConfig(output_dir=str(out), ingest=True, ingest_dataset=dataset))
    assert not out.exists()


def test_inside_the_session_output_is_where_it_may_go(tmp_path: Path) -> None:
    out = tmp_path / "bags"
    assert dataset_in(out) == out / "dataset"
    assert dataset_in(out, "sets/pick") == out / "sets" / "pick"
    assert dataset_in(out, str(out / "abs")) == out / "abs"
    graph = build_graph("sim", SessionConfig(output_dir=str(out), ingest=True, ingest_dataset="sets/pick"))
    assert graph.node("ingest").parameters == {"watch_dir": str(out), "dataset": "sets/pick"}
    assert "ingest" not in {n.name for n in build_graph("sim", SessionConfig(output_dir=str(out))).nodes}
    with pytest.raises(ValueError, match="needs the recorder"):
        build_graph("sim", SessionConfig(output_dir=str(out), ingest=True, record=False))


def test_run_refuses_an_ingest_dataset_outside_the_output_dir(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    # In this process: the refusal comes before any session starts.
    code, out, err = run_cli(capsys, "run", "record", "--arg", "ingest=true",
                             "--arg", f"output_dir={tmp_path / 'bags'}", "--arg", f"ingest_dataset={tmp_path / 'ds'}")
    assert code == 2, out + err
    assert "not inside the session's output_dir" in err and "Traceback" not in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.timeout(600)
def test_the_node_refuses_a_symlink_leading_out_of_the_output_dir(tmp_path: Path, capfd: pytest.CaptureFixture[str]
                                                                  ) -> None:
    """`link/ds` reads as inside output_dir (the graph's check is lexical); the node resolves it at start."""
    pytest.importorskip("rclpy")
    from teleop_flywheel.ros.errors import SessionError
    from teleop_flywheel.ros.session.launch.supervisor import Session

    out, outside = tmp_path / "bags", tmp_path / "outside"
    out.mkdir()
    outside.mkdir()
    (out / "link").symlink_to(outside)
    full = build_graph("record", SessionConfig(cameras=(), output_dir=str(out), ingest=True, ingest_dataset="link/ds"))
    with (pytest.raises(SessionError, match=r"ingest \(pid \d+\) exited unexpectedly: exit code 1"),
          Session(Graph("record", (full.node("ingest"),)), log=lambda _t: None)):
        pass
    err = capfd.readouterr().err
    assert "/ingest: parameter dataset = 'link/ds' is not allowed" in err and str(outside / "ds") in err, err
    assert list(outside.iterdir()) == []
