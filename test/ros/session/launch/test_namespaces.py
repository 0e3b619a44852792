"""Two rigs in one ROS domain: `namespace:=rig_a` puts a rig's nodes, topics
and services under `/rig_a`, so two rigs record separately, and the data engine reads both with the
unchanged config/validate.yaml (the reader strips the namespace the episode metadata names). One
`ingest` watching both rigs' output folders while they record takes both episodes into one dataset.

The rigs are `sim` session graphs with the namespace argument, started by the supervisor one
process per node, as `teleop-flywheel run sim --arg namespace=rig_a` starts them. To keep two rigs
affordable on a 2-core machine each runs its teleop node, camera and recorder; the test stands in
for the arm drivers, the policy and the pedal (it publishes their streams, under relative names,
from a node in the rig's namespace) and drives the recorder through its relative service names.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import warnings
from dataclasses import replace
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from support.paths import ROOT
from support.procs import HostClockWatch, wait_for

rclpy = pytest.importorskip("rclpy")

from mcap.reader import make_reader  # noqa: E402
from support.rig_feed import FeedRig, feed  # noqa: E402

from teleop_flywheel.core import bag_topics  # noqa: E402
from teleop_flywheel.core.episode import METADATA_RECORD, EpisodeMeta  # noqa: E402
from teleop_flywheel.data.convert.converter import convert  # noqa: E402
from teleop_flywheel.data.convert.ingest_loop import read_state, state_path  # noqa: E402
from teleop_flywheel.data.validate.reasons import ValidateConfig  # noqa: E402
from teleop_flywheel.data.validate.validator import validate_bag  # noqa: E402
from teleop_flywheel.recording.mcap.reader import open_bag  # noqa: E402
from teleop_flywheel.ros.session.launch.graph import CameraSpec, SessionConfig, build_graph, config_from_arguments  # noqa: E402
from teleop_flywheel.ros.session.launch.supervisor import Session, node_argv  # noqa: E402

RIGS = {"rig_a": 0.2, "rig_b": 0.5}  # namespace -> amplitude of its arm's motion (tells the bags apart)
KEPT = ("teleop", "camera_front", "recorder")
LOAD_CODES = {"FRAME_GAP", "CLOCK_OFFSET"}  # what a starved process can cause, namespaces or not



def test_the_namespace_argument_puts_every_node_of_the_graph_under_it() -> None:
    graph = build_graph("sim", config_from_arguments({"namespace": "rig_a"}))
    assert {n.namespace for n in graph.nodes} == {"/rig_a"}
    argv = node_argv(graph.node("recorder"), "/tmp/p.yaml")
    assert argv[argv.index("__ns:=/rig_a") - 1] == "-r"  # as ros2 launch passes a node's namespace
    recorded = graph.node("recorder").parameters["topics"]
    assert "follower/joint_states" in recorded and "/diagnostics" in recorded  # relative, except the global one
    assert {n.namespace for n in build_graph("sim").nodes} == {""}
    with pytest.raises(ValueError, match="not a ROS namespace"):
        build_graph("sim", SessionConfig(namespace="rig a"))


def test_two_rigs_in_one_domain_record_separately_and_validate_with_the_unchanged_config(tmp_path: Path) -> None:
    sessions: list[Session] = []
    stop = threading.Event()
    clock = HostClockWatch().__enter__()  # the host's own clock steps are CLOCK_STEP, rightly
    fleet = tmp_path / "fleet"
    for ns in RIGS:
        (tmp_path / ns).mkdir()
    # One ingest for both rigs, as a fleet runs it (nice 10, encoding ahead while they record).
    watched = [str(tmp_path / ns) for ns in RIGS]
    ingest = subprocess.Popen([sys.executable, "-m", "teleop_flywheel.cli", "ingest", *watched, "--dataset", str(fleet),
                               "--grace", "0", "--poll", "0.2", "--codec", "h264", "--no-quarantine", "--no-audit"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        rigs: dict[str, FeedRig] = {}
        for ns, amplitude in RIGS.items():
            cfg = SessionConfig(namespace=ns, output_dir=str(tmp_path / ns), task="pick",
                                cameras=(CameraSpec("front", width=320, height=240),))
            graph = build_graph("sim", cfg)
            graph = replace(graph, nodes=tuple(n for n in graph.nodes if n.name in KEPT), sim_arms=(), pedal_fifo="")
            session = Session(graph, ready_timeout_s=120)
            sessions.append(session)
            session.start()  # returns once /<ns>/teleop, /<ns>/camera_front and /<ns>/recorder are on the graph
            rigs[ns] = FeedRig(session, f"/{ns}", amplitude)

        feed(rigs.values(), stop)
        names = {ns: rig.node.get_topic_names_and_types for ns, rig in rigs.items()}
        wait_for(
            lambda: all(f"/{ns}/follower/joint_command" in dict(names[ns]()) for ns in RIGS), 60, "teleop commands"
        )
        for rig in rigs.values():
            rig.call("start")
        time.sleep(1.0)
        for rig in rigs.values():  # the pedal publishes edges; a recorded topic needs 2 messages
            rig.press(False)
            rig.press(False)
        time.sleep(3.0)  # the episode: min_duration_s is 2 s
        bags = {}
        for ns, rig in rigs.items():
            rig.set_outcome()
            saved = rig.call("stop")
            bags[ns] = Path(saved.split()[1].rstrip(":"))
        stop.set()
        taken = wait_for(lambda: _taken(fleet), 180, "the ingest taking both rigs' episodes", poll_s=0.5)
    finally:
        stop.set()
        clock.__exit__()
        for session in sessions:
            session.stop()
        ingest.send_signal(signal.SIGTERM)
        ingest_log = ingest.communicate(timeout=60)[0]

    for ns, bag in bags.items():
        assert bag.parent == tmp_path / ns
        with open(bag / f"{bag.name}_0.mcap", "rb") as f:
            reader = make_reader(f)
            recorded = {c.topic for c in reader.get_summary().channels.values()}  # type: ignore[union-attr]
            meta = EpisodeMeta.from_strings(next(dict(r.metadata) for r in reader.iter_metadata()
                                                 if r.name == METADATA_RECORD))
        # Fully qualified in the bag, as ROS named them; nothing of the other rig; /diagnostics is global.
        own = {t for t in recorded if t.startswith(f"/{ns}/")}
        assert {f"/{ns}/follower/joint_states", f"/{ns}/follower/joint_command", f"/{ns}/teleop/authority",
                f"/{ns}/leader/joint_states", f"/{ns}/policy/joint_command",
                f"/{ns}/cameras/front/image/compressed"} <= own
        assert recorded - own <= {"/diagnostics"}, recorded
        assert meta.namespace == f"/{ns}" and meta.stamp_clock == "ros"
        # The reader strips the namespace: the streams by the names config/validate.yaml uses.
        read = open_bag(bag)
        assert bag_topics.FOLLOWER_COMMAND in read.topics and read.camera_topics() == {
            "front": bag_topics.camera_image("front")}
        position = read.joint_state(bag_topics.FOLLOWER_STATE).position
        assert abs(position).max() == pytest.approx(RIGS[ns], abs=0.02), "each bag holds its own rig's arm"

    cfg = ValidateConfig.load()  # config/validate.yaml as shipped: namespace-free topic names
    reports = {ns: validate_bag((str(bag), cfg)) for ns, bag in bags.items()}
    for ns, report in reports.items():
        # Every stream is found and checked under the config's names (no MISSING_STREAM, no schema
        # or camera-set mismatch). Only a loaded machine can fail these bags: a node starved for
        # over 2/fps is a FRAME_GAP (or late delivery a CLOCK_OFFSET), a verdict on the timing of
        # a stream the validator did find.
        allowed = LOAD_CODES | ({"CLOCK_STEP"} if clock.stepped else set())
        assert set(report.codes) <= allowed, f"{ns}: {report.line()} (host clock: largest step {clock.max_jump_ns} ns)"
        if not report.passed:
            warnings.warn(f"{ns}: {report.line()} (machine load: {os.getloadavg()[0]:.1f})", stacklevel=1)
    # The one ingest judged each rig's episode as the validator does, and appended the passing ones.
    for ns, report in reports.items():
        assert taken[ns]["episode_id"] == report.episode_id and taken[ns]["codes"] == report.codes, (ns, ingest_log)
        assert taken[ns]["outcome"] == ("converted" if report.passed else "rejected"), (ns, ingest_log)
    passed = sorted(r.episode_id for r in reports.values() if r.passed)
    if passed:
        table = pq.read_table(fleet / "meta/episodes/chunk-000/file-000.parquet").to_pydict()
        assert sorted(table["episode_id"]) == passed and table["episode_index"] == list(range(len(passed)))
        assert sorted(table["source_bag"]) == sorted(bags[ns].name for ns, r in reports.items() if r.passed)
    result = convert(list(bags.values()), tmp_path / "dataset", codec="h264", workers=1, progress=False,
                     include_failed=not all(r.passed for r in reports.values()))
    assert not result.errors and not result.rejected, result
    (ids,) = result.converted.values()
    assert sorted(ids) == sorted(r.episode_id for r in reports.values())
    info = json.loads((tmp_path / "dataset" / "meta" / "info.json").read_text())
    assert info["total_episodes"] == 2 and info["total_frames"] > 2 * 60


def _taken(dataset: Path) -> dict[str, dict[str, object]] | None:
    """{rig: what ingest made of its bag} once it has taken one bag of each rig (its state file)."""
    if not state_path(dataset).exists():
        return None
    got = {Path(bag).parent.name: entry for bag, entry in read_state(dataset)["bags"].items()}
    return got if len(got) == len(RIGS) else None
