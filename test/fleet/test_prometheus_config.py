"""The shipped Prometheus files (config/prometheus/) judged by Prometheus's own promtool where it is
installed (Debian's `prometheus` package), and checked against the metrics the exporter serves in
every run."""
from __future__ import annotations

import re
import shutil
import subprocess

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families
from support.paths import ROOT

from teleop_flywheel.fleet.session_metrics import SessionMetrics

PROMETHEUS = ROOT / "config" / "prometheus"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed (Debian: apt-get install "
                                                              "prometheus)")


def promtool(*args: str) -> str:
    assert PROMTOOL is not None
    done = subprocess.run([PROMTOOL, *args], cwd=PROMETHEUS, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


@needs_promtool
def test_promtool_accepts_the_scrape_config_and_its_rules() -> None:
    assert "SUCCESS" in promtool("check", "config", "prometheus.yml")
    assert "SUCCESS" in promtool("check", "rules", "rules.yml")


@needs_promtool
def test_each_alert_fires_where_it_should_and_nowhere_else() -> None:
    out = promtool("test", "rules", "tests/rules_test.yml", "tests/rules_week_test.yml")
    assert out.count("SUCCESS") == 2, out


def test_every_alert_has_a_test_that_fires_it() -> None:
    alerts = {r["alert"] for g in yaml.safe_load((PROMETHEUS / "rules.yml").read_text())["groups"]
              for r in g["rules"] if "alert" in r}
    fired = set()
    for name in ("rules_test.yml", "rules_week_test.yml"):
        for test in yaml.safe_load((PROMETHEUS / "tests" / name).read_text())["tests"]:
            fired |= {t["alertname"] for t in test["alert_rule_test"] if t["exp_alerts"]}
    assert alerts == fired


def test_every_metric_the_rules_name_is_one_the_exporter_serves() -> None:
    """A renamed metric would leave an alert silently watching nothing."""
    served = {f.name for f in text_string_to_metric_families(SessionMetrics("rig_a").exposition().decode())}
    served |= {f"{name}_total" for name in served} | {f"{name}_{s}" for name in served for s in ("bucket", "sum",
                                                                                                    "count")}
    exprs = [r["expr"] for g in yaml.safe_load((PROMETHEUS / "rules.yml").read_text())["groups"] for r in g["rules"]]
    named = {name for expr in exprs for name in re.findall(r"(?<![:\w])(teleop_\w+)", re.sub(r"\"[^\"]*\"", "", expr))}
    assert named and named <= served, named - served
