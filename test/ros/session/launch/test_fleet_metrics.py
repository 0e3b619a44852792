"""Two rigs' sessions scraped by a real Prometheus (Debian's `prometheus` package; skipped where it
is not installed): its query API returns, per rig, the interventions and verdicts that the rigs'
bags and verdict.json files say.

The rigs are `sim` session graphs with `namespace:=rig_a` / `rig_b` and a metrics port each, started
by the supervisor one process per node, as `teleop-flywheel run sim --arg namespace=rig_a --arg
metrics=127.0.0.1:PORT` starts them. To keep two rigs affordable on a 2-core machine each runs its
teleop node, recorder and metrics node; the test stands in for the arm drivers, the policy and the
pedal (as test_namespaces.py does) and takes over a different number of times on each rig.
"""
from __future__ import annotations

import json
import shutil
import socket
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from support.paths import ROOT
from support.procs import wait_for

rclpy = pytest.importorskip("rclpy")
PROMETHEUS = shutil.which("prometheus")
pytestmark = [pytest.mark.timeout(400),
              pytest.mark.skipif(PROMETHEUS is None, reason="prometheus is not installed (Debian: apt-get install "
                                                            "prometheus)")]

from support.rig_feed import FeedRig, feed  # noqa: E402

from teleop_flywheel.recording.mcap.reader import open_bag  # noqa: E402
from teleop_flywheel.recording.recorder.verdict import read_verdict  # noqa: E402
from teleop_flywheel.ros.session.launch.graph import SessionConfig, build_graph  # noqa: E402
from teleop_flywheel.ros.session.launch.supervisor import Session  # noqa: E402

TAKEOVERS = {"rig_a": 2, "rig_b": 3}
KEPT = ("teleop", "recorder", "metrics")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def query(port: int, promql: str, by: str = "rig") -> dict[str, float]:
    """{value of label `by`: value} of an instant query through Prometheus's HTTP API."""
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(url, timeout=10) as answer:
        doc = json.loads(answer.read())
    assert doc["status"] == "success", doc
    return {r["metric"].get(by, ""): float(r["value"][1]) for r in doc["data"]["result"]}


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


def test_prometheus_scrapes_two_rigs_and_counts_what_their_bags_say(tmp_path: Path) -> None:
    ports = {rig: free_port() for rig in TAKEOVERS}
    sessions: list[Session] = []
    stop = threading.Event()
    prometheus, api = start_prometheus(tmp_path, ports)
    try:
        rigs: dict[str, FeedRig] = {}
        for ns in TAKEOVERS:
            cfg = SessionConfig(namespace=ns, output_dir=str(tmp_path / ns), task="pick", cameras=(),
                                metrics=f"127.0.0.1:{ports[ns]}")
            graph = build_graph("sim", cfg)
            graph = replace(graph, nodes=tuple(n for n in graph.nodes if n.name in KEPT), sim_arms=(), pedal_fifo="")
            session = Session(graph, ready_timeout_s=120)
            sessions.append(session)
            session.start()
            rigs[ns] = FeedRig(session, f"/{ns}", checkpoint="ckpt-fleet")
        feed(rigs.values(), stop)
        wait_for(lambda: query(api, 'up{job="teleop_flywheel"} == 1').keys() == set(TAKEOVERS), 120,
                 "Prometheus scraping both rigs", poll_s=0.5)
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
        bags = {ns: Path(rig.call("stop").split()[1].rstrip(":")) for ns, rig in rigs.items()}
        verdicts = {ns: wait_for(lambda b=bag: read_verdict(b), 180, f"{ns}'s verdict", poll_s=0.5)
                    for ns, bag in bags.items()}
        in_bags = {ns: float(len(open_bag(bag).episode.interventions)) for ns, bag in bags.items()}  # type: ignore[union-attr]
        assert in_bags == {ns: float(n) for ns, n in TAKEOVERS.items()}

        def scraped() -> dict[str, Any] | None:
            found = {
                "interventions": query(api, 'sum by (rig) (teleop_interventions_total{kind="intervention"})'),
                "verdicts": query(api, "sum by (rig) (teleop_verdicts_total)"),
                "policy_s": query(api, "sum by (rig) (teleop_policy_seconds_total)"),
            }
            return found if found["interventions"] == in_bags and found["verdicts"] == {
                ns: 1.0 for ns in TAKEOVERS} else None

        found = wait_for(scraped, 60, "the bags' interventions and verdicts in Prometheus", poll_s=1.0)
        for ns, doc in verdicts.items():
            verdict = doc["verdict"] or "not_validated"
            assert query(api, f'sum by (rig) (teleop_verdicts_total{{rig="{ns}",verdict="{verdict}"}})') == {ns: 1.0}
            codes = query(api, f'sum by (code) (teleop_verdict_reasons_total{{rig="{ns}"}}) > 0', by="code")
            assert codes == {code: 1.0 for code in doc["codes"]}
        assert found["policy_s"].keys() == set(TAKEOVERS) and all(v > 0 for v in found["policy_s"].values()), found
        # the checkpoint the policy commands carried labels what the policy did
        assert set(query(api, 'sum by (rig) (teleop_policy_seconds_total{checkpoint="ckpt-fleet"})')) == set(TAKEOVERS)
    finally:
        stop.set()
        for session in sessions:
            session.stop()
        prometheus.terminate()
        prometheus.wait(30)
