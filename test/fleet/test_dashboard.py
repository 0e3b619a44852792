"""The shipped Grafana dashboard (config/grafana/dashboard.json) is what grafanalib generates from
`fleet/dashboard.py`, and it plots only what the exporter serves and the rules record."""
from __future__ import annotations

import json
import re
from pathlib import Path

import yaml
from prometheus_client.parser import text_string_to_metric_families
from support.paths import ROOT

from teleop_flywheel.fleet import dashboard
from teleop_flywheel.fleet.session_metrics import SessionMetrics


def test_the_shipped_dashboard_is_the_generated_one() -> None:
    assert (ROOT / "config" / "grafana" / "dashboard.json").read_text() == dashboard.render(), (
        "stale: run python -m teleop_flywheel.fleet.dashboard")
    assert dashboard.main(["--check", "--out", str(ROOT / "config" / "grafana" / "dashboard.json")]) == 0


def test_a_stale_dashboard_is_reported(tmp_path: Path) -> None:
    out = tmp_path / "dashboard.json"
    out.write_text("{}\n")
    assert dashboard.main(["--check", "--out", str(out)]) == 1
    assert dashboard.main(["--out", str(out)]) == 0 and json.loads(out.read_text())["uid"] == dashboard.UID


def test_every_series_the_dashboard_plots_exists() -> None:
    served = {f.name for f in text_string_to_metric_families(SessionMetrics("rig_a").exposition().decode())}
    served |= {f"{n}_{s}" for n in served for s in ("total", "bucket", "sum", "count")}
    recorded = {r["record"] for g in yaml.safe_load((ROOT / "config" / "prometheus" / "rules.yml").read_text())[
        "groups"] for r in g["rules"] if "record" in r}
    doc = json.loads(dashboard.render())
    exprs = [t["expr"] for p in doc["panels"] for t in p.get("targets", [])]
    assert exprs
    for expr in exprs:
        bare = re.sub(r'"[^"]*"', "", expr)
        names = set(re.findall(r"[a-z_]+:[a-z_0-9]+:[a-z_0-9]+|(?<![:\w])teleop_\w+", bare))
        assert names and names <= served | recorded, (expr, names - served - recorded)


def test_panels_tile_the_grid_without_overlap() -> None:
    doc = json.loads(dashboard.render())
    cells: set[tuple[int, int]] = set()
    for p in doc["panels"]:
        g = p["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= dashboard.WIDTH, p["title"]
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not mine & cells, p["title"]
        cells |= mine
