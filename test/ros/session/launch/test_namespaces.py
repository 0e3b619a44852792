"""Two rigs in one ROS domain: `namespace:=rig_a` puts a rig's nodes, topics
and services under `/rig_a`, so two rigs record separately, and the data engine reads both with the
unchanged config/validate.yaml (the reader strips the namespace the episode metadata names). One
`ingest` watching both rigs' output folders while they record takes both episodes into one dataset.
A real Prometheus (Debian's `prometheus` package; skipped where it is not installed) scraping both
rigs' metrics endpoints: its query API returns, per rig, the interventions and verdicts that the
rigs' bags and verdict.json files say.

The rigs are `sim` session graphs with the namespace argument and a metrics port each, started by
the supervisor one process per node, as `teleop-flywheel run sim --arg namespace=rig_a --arg
metrics=127.0.0.1:PORT` starts them, once for the module: each test records its own episode on both
(a clean one for the data engine; then one with a different number of takeovers on each rig, which
the validator rejects as unlabelled, for Prometheus to count). To keep two rigs affordable on a
2-core machine each runs its teleop node, camera, recorder and metrics node; the test stands in for
the arm drivers, the policy and the pedal (it publishes their streams, under relative names, from a
node in the rig's namespace) and drives the recorder through its relative service names.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import warnings
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from support.paths import ROOT
from support.procs import HostClockWatch, wait_for

rclpy = pytest.importorskip("rclpy")
PROMETHEUS = shutil.which("prometheus")

from mcap.reader import make_reader  # noqa: E402
from support.rig_feed import FeedRig, feed  # noqa: E402

from teleop_flywheel.core import bag_topics  # noqa: E402
from teleop_flywheel.core.episode import METADATA_RECORD, EpisodeMeta  # noqa: E402
from teleop_flywheel.data.convert.converter import convert  # noqa: E402
from teleop_flywheel.data.convert.ingest_loop import read_state, state_path  # noqa: E402
from teleop_flywheel.data.validate.reasons import ValidateConfig  # noqa: E402
from teleop_flywheel.data.validate.validator import validate_bag  # noqa: E402
from teleop_flywheel.recording.mcap.reader import open_bag  # noqa: E402
from teleop_flywheel.recording.recorder.verdict import read_verdict  # noqa: E402
from teleop_flywheel.ros.session.launch.graph import CameraSpec, SessionConfig, build_graph, config_from_arguments  # noqa: E402
from teleop_flywheel.ros.session.launch.supervisor import Session, node_argv  # noqa: E402

RIGS = {"rig_a": 0.2, "rig_b": 0.5}  # namespace -> amplitude of its arm's motion (tells the bags apart)
KEPT = ("teleop", "camera_front", "recorder", "metrics")
# What a starved process can cause, namespaces or not: a stream's gap, late delivery, and the stand-in
# follower (published on time by this process, tracking nothing) "outrun" by the commands a starved
# teleop node sends in a bunch (seen at load 12-14).
LOAD_CODES = {"FRAME_GAP", "CLOCK_OFFSET", "FOLLOWER_OUTRUN"}
TAKEOVERS = {"rig_a": 2, "rig_b": 3}


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


@dataclass
class TwoRigs:
    """The module's two rigs, as their tests drive them."""

    root: Path  # each rig's output_dir is root/<namespace>
    rigs: dict[str, FeedRig]
    ports: dict[str, int]  # each rig's metrics endpoint


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def two_rigs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TwoRigs]:
    """Both rigs' sessions, their arms fed from the first teleop command to the module's end."""
    root = tmp_path_factory.mktemp("rigs")
    ports = {ns: free_port() for ns in RIGS}
    sessions: list[Session] = []
    stop = threading.Event()
    try:
        rigs: dict[str, FeedRig] = {}
        for ns, amplitude in RIGS.items():
            (root / ns).mkdir()
            cfg = SessionConfig(namespace=ns, output_dir=str(root / ns), task="pick",
                                cameras=(CameraSpec("front", width=320, height=240),),
                                metrics=f"127.0.0.1:{ports[ns]}")
            graph = build_graph("sim", cfg)
            graph = replace(graph, nodes=tuple(n for n in graph.nodes if n.name in KEPT), sim_arms=(), pedal_fifo="")
            session = Session(graph, ready_timeout_s=120)
            sessions.append(session)
            session.start()  # returns once every kept node of /<ns> is on the graph
            rigs[ns] = FeedRig(session, f"/{ns}", amplitude, checkpoint="ckpt-fleet")
        feed(rigs.values(), stop)
        names = {ns: rig.node.get_topic_names_and_types for ns, rig in rigs.items()}
        wait_for(
            lambda: all(f"/{ns}/follower/joint_command" in dict(names[ns]()) for ns in RIGS), 60, "teleop commands"
        )
        yield TwoRigs(root, rigs, ports)
    finally:
        stop.set()
        for session in sessions:
            session.stop()


def _stop(rigs: dict[str, FeedRig]) -> dict[str, Path]:
    """Stop the episode each rig records: {rig: its bag}."""
    return {ns: Path(rig.call("stop").split()[1].rstrip(":")) for ns, rig in rigs.items()}


@pytest.mark.timeout(400)
def test_two_rigs_in_one_domain_record_separately_and_validate_with_the_unchanged_config(two_rigs: TwoRigs,
                                                                                        tmp_path: Path) -> None:
    rigs, root = two_rigs.rigs, two_rigs.root
    clock = HostClockWatch().__enter__()  # the host's own clock steps are CLOCK_STEP, rightly
    fleet = tmp_path / "fleet"
    # One ingest for both rigs, as a fleet runs it (nice 10, encoding ahead while they record).
    watched = [str(root / ns) for ns in RIGS]
    ingest = subprocess.Popen([sys.executable, "-m", "teleop_flywheel.cli", "ingest", *watched, "--dataset", str(fleet),
                               "--grace", "0", "--poll", "0.2", "--codec", "h264", "--no-quarantine", "--no-audit"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        for rig in rigs.values():
            rig.call("start")
        time.sleep(1.0)
        for rig in rigs.values():  # the pedal publishes edges; a recorded topic needs 2 messages
            rig.press(False)
            rig.press(False)
        time.sleep(3.0)  # the episode: min_duration_s is 2 s
        for rig in rigs.values():
            rig.set_outcome()
        bags = _stop(rigs)
        taken = wait_for(lambda: _taken(fleet, bags), 180, "the ingest taking both rigs' episodes", poll_s=0.5)
    finally:
        clock.__exit__()
        ingest.send_signal(signal.SIGTERM)
        ingest_log = ingest.communicate(timeout=60)[0]

    for ns, bag in bags.items():
        assert bag.parent == root / ns
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


def _taken(dataset: Path, bags: dict[str, Path]) -> dict[str, dict[str, object]] | None:
    """{rig: what ingest made of its bag in `bags`} once it has taken both (its state file)."""
    if not state_path(dataset).exists():
        return None
    names = {bag.name for bag in bags.values()}
    got = {Path(bag).parent.name: entry for bag, entry in read_state(dataset)["bags"].items()
           if Path(bag).name in names}
    return got if len(got) == len(RIGS) else None


def query(port: int, promql: str, by: str = "rig") -> dict[str, float]:
    """{value of label `by`: value} of an instant query through Prometheus's HTTP API."""
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(url, timeout=10) as answer:
        doc = json.loads(answer.read())
    assert doc["status"] == "success", doc
    return {r["metric"].get(by, ""): float(r["value"][1]) for r in doc["data"]["result"]}


def scraping(api: int) -> set[str]:
    """The rigs Prometheus scrapes now; none while it is still starting (not yet listening)."""
    try:
        return set(query(api, 'up{job="teleop_flywheel"} == 1'))
    except urllib.error.URLError:
        return set()


def start_prometheus(tmp_path: Path, targets: dict[str, int]) -> tuple[subprocess.Popen[bytes], int]:
    """A Prometheus scraping `targets` ({rig: port}) every second, with the shipped rules loaded."""
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(ROOT / "config" / "prometheus" / "rules.yml")],
        "scrape_configs": [{"job_name": "teleop_flywheel", "honor_labels": True, "static_configs": [
            {"targets": [f"127.0.0.1:{port}"], "labels": {"rig": rig}} for rig, port in targets.items()]}],
    }
    (tmp_path / "prometheus.yml").write_text(json.dumps(config))  # JSON is YAML
    port = free_port()
    proc = subprocess.Popen([str(PROMETHEUS), f"--config.file={tmp_path / 'prometheus.yml'}",
                             f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=(tmp_path / "prometheus.log").open("wb"))
    return proc, port


@pytest.mark.timeout(400)
@pytest.mark.skipif(PROMETHEUS is None, reason="prometheus is not installed (Debian: apt-get install prometheus)")
def test_prometheus_scrapes_two_rigs_and_counts_what_their_bags_say(two_rigs: TwoRigs, tmp_path: Path) -> None:
    rigs, root = two_rigs.rigs, two_rigs.root
    prometheus, api = start_prometheus(tmp_path, two_rigs.ports)
    try:
        wait_for(lambda: scraping(api) == set(TAKEOVERS), 120, "Prometheus scraping both rigs", poll_s=0.5)
        for rig in rigs.values():
            rig.press(False)
            rig.call("start")
        time.sleep(1.0)
        for step in range(max(TAKEOVERS.values())):
            for ns, rig in rigs.items():
                if step < TAKEOVERS[ns]:
                    rig.press(True)
            time.sleep(0.6)
            for rig in rigs.values():
                rig.press(False)
            time.sleep(0.6)
        bags = _stop(rigs)
        assert {ns: len(open_bag(bag).episode.interventions) for ns, bag in bags.items()} == TAKEOVERS  # type: ignore[union-attr]
        # The counters run over each rig's session: every bag its recorder saved (this module's other test
        # records one too), each with its verdict.
        saved = {ns: sorted(p.parent for p in (root / ns).glob("*/metadata.yaml")) for ns in RIGS}
        verdicts = {ns: [wait_for(lambda b=bag: read_verdict(b), 180, f"{bag}'s verdict", poll_s=0.5)
                         for bag in saved[ns]] for ns in RIGS}
        in_bags = {ns: float(sum(len(open_bag(bag).episode.interventions) for bag in saved[ns]))  # type: ignore[union-attr]
                   for ns in RIGS}

        def scraped() -> dict[str, Any] | None:
            found = {
                "interventions": query(api, 'sum by (rig) (teleop_interventions_total{kind="intervention"})'),
                "verdicts": query(api, "sum by (rig) (teleop_verdicts_total)"),
                "policy_s": query(api, "sum by (rig) (teleop_policy_seconds_total)"),
            }
            return found if found["interventions"] == in_bags and found["verdicts"] == {
                ns: float(len(saved[ns])) for ns in RIGS} else None

        found = wait_for(scraped, 60, "the bags' interventions and verdicts in Prometheus", poll_s=1.0)
        for ns, docs in verdicts.items():
            for verdict, n in Counter(doc["verdict"] or "not_validated" for doc in docs).items():
                assert query(api, f'sum by (rig) (teleop_verdicts_total{{rig="{ns}",verdict="{verdict}"}})') == {
                    ns: float(n)}
            codes = query(api, f'sum by (code) (teleop_verdict_reasons_total{{rig="{ns}"}}) > 0', by="code")
            assert codes == {code: float(n) for code, n in Counter(c for doc in docs for c in doc["codes"]).items()}
        assert found["policy_s"].keys() == set(TAKEOVERS) and all(v > 0 for v in found["policy_s"].values()), found
        # the checkpoint the policy commands carried labels what the policy did
        assert set(query(api, 'sum by (rig) (teleop_policy_seconds_total{checkpoint="ckpt-fleet"})')) == set(TAKEOVERS)
    finally:
        prometheus.terminate()
        prometheus.wait(30)
