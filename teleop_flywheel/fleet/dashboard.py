"""The fleet's Grafana dashboard, made with grafanalib: `config/grafana/dashboard.json` is `render()`.

    python -m teleop_flywheel.fleet.dashboard            # rewrite config/grafana/dashboard.json
    python -m teleop_flywheel.fleet.dashboard --check    # exit 1 if the shipped file is stale

Rows, top to bottom: what the fleet produces (episodes kept, rejection rate, reason codes), what
the policies need (disengagements per policy-hour per rig and per checkpoint, takeovers by trigger),
how the stations work (episode and reset time), and the rigs' health (loop rate and overruns, bus
latency, camera fps and lag, recorder drops, disk hours left). Every panel reads the metrics of
`session_metrics` or the recording rules of config/prometheus/rules.yml; `$datasource` and `$rig`
are the dashboard's variables (a Prometheus and any set of rigs).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

SHIPPED = Path(__file__).resolve().parents[2] / "config" / "grafana" / "dashboard.json"
UID = "teleop-flywheel-fleet"
DS = "${datasource}"
RIGS = 'rig=~"$rig"'
WIDTH = 24  # Grafana's grid


def _panels() -> list[tuple[str, list[Any]]]:
    """(row title, panels) of the dashboard, top to bottom."""
    from grafanalib.core import Stat, Target, TimeSeries

    def ts(title: str, unit: str, *exprs: tuple[str, str], description: str = "") -> TimeSeries:
        return TimeSeries(title=title, dataSource=DS, unit=unit, description=description or None,
                          targets=[Target(expr=e, legendFormat=legend, refId=chr(ord("A") + i), datasource=DS)
                                   for i, (e, legend) in enumerate(exprs)])

    def stat(title: str, unit: str, expr: str, description: str) -> Stat:
        return Stat(title=title, dataSource=DS, format=unit, description=description, reduceCalc="lastNotNull",
                    targets=[Target(expr=expr, legendFormat="{{rig}}", refId="A", datasource=DS)])

    return [
        ("Data: what the fleet produces", [
            stat("Episodes kept, last hour", "none", f"rig:teleop_episodes_kept:increase1h{{{RIGS}}}",
                 "Episodes that passed the validator and were not discarded"),
            ts("Rejection rate (1 h)", "percentunit", (f"rig:teleop_rejection_ratio:1h{{{RIGS}}}", "{{rig}}"),
               description="Alert TeleopRejectionRateHigh above 20 %"),
            ts("Rejections by reason code (1 h)", "none",
               (f"sum by (code) (increase(teleop_verdict_reasons_total{{{RIGS}}}[1h])) > 0", "{{code}}"),
               description="Alert TeleopReasonCodeDominant when one code suddenly takes over"),
        ]),
        ("Policy: how often the human steps in", [
            ts("Disengagements per policy-hour, by rig (1 h)", "none",
               (f"rig:teleop_disengagements_per_policy_hour:1h{{{RIGS}}}", "{{rig}}")),
            ts("Disengagements per policy-hour, by checkpoint (1 d), against last week", "none",
               ("checkpoint:teleop_disengagements_per_policy_hour:1d", "{{checkpoint}}"),
               ("checkpoint:teleop_disengagements_per_policy_hour:1d offset 1w", "{{checkpoint}} last week"),
               description="Alert TeleopInterventionRateUp at 1.5x last week for the checkpoint on the rigs now"),
            ts("Takeovers by trigger label (1 h)", "none",
               (f'sum by (trigger) (increase(teleop_intervention_triggers_total{{{RIGS},kind="intervention"}}[1h]))',
                "{{trigger}}"),
               (f'sum(increase(teleop_interventions_total{{{RIGS},kind="intervention"}}[1h])) - '
                f'sum(increase(teleop_intervention_triggers_total{{{RIGS},kind="intervention"}}[1h]))',
                "unlabelled")),
        ]),
        ("Stations: where the operators' time goes", [
            ts("Episode duration, median (1 h)", "s", (f"rig:teleop_episode_duration_seconds:p50_1h{{{RIGS}}}",
                                                       "{{rig}}")),
            ts("Reset duration, median (1 h)", "s", (f"rig:teleop_reset_duration_seconds:p50_1h{{{RIGS}}}",
                                                     "{{rig}}")),
            ts("Recording", "none", (f"teleop_recorder_recording{{{RIGS}}}", "{{rig}}")),
        ]),
        ("Rigs: health", [
            ts("Arm loop rate", "hertz", (f"teleop_driver_loop_rate_hz{{{RIGS}}}", "{{rig}} {{role}}"),
               (f"teleop_driver_target_rate_hz{{{RIGS}}}", "{{rig}} {{role}} target")),
            ts("Loop overruns (share of ticks, 5 m)", "percentunit",
               (f"rig_role:teleop_driver_overrun_ratio:5m{{{RIGS}}}", "{{rig}} {{role}}"),
               description="Alert TeleopLoopOverruns above 5 %"),
            ts("Bus read latency, p99 (5 m)", "s",
               (f"rig_role:teleop_bus_read_latency_seconds:p99_5m{{{RIGS}}}", "{{rig}} {{role}}")),
            ts("Camera fps", "fps", (f"teleop_camera_fps{{{RIGS}}}", "{{rig}} {{camera}}")),
            ts("Camera lag (content) and latency", "s",
               (f"teleop_camera_lag_seconds{{{RIGS}}}", "{{rig}} {{camera}} lag"),
               (f"teleop_camera_latency_seconds{{{RIGS}}}", "{{rig}} {{camera}} latency"),
               description="Alert TeleopCameraLagDrift when the lag moves over 10 ms in 2 h"),
            ts("Messages lost before the recorder (5 m)", "none",
               (f"sum by (rig, topic) (increase(teleop_recorder_dropped_messages_total{{{RIGS}}}[5m])) > 0",
                "{{rig}} {{topic}}")),
            ts("Disk: hours of recording left", "h",
               (f"teleop_disk_free_bytes{{{RIGS}}} / on (rig) "
                f"max_over_time(rig:teleop_recorder_write_rate_bytes:5m{{{RIGS}}}[1d]) / 3600", "{{rig}}"),
               description="Alert TeleopDiskBelowOneHourOfRecording below 1 h"),
        ]),
    ]


def build() -> Any:
    """The dashboard (a grafanalib `Dashboard`)."""
    from grafanalib.core import Dashboard, GridPos, RowPanel, Template, Templating, Time

    panels: list[Any] = []
    y = 0
    for title, row in _panels():
        panels.append(RowPanel(title=title, gridPos=GridPos(h=1, w=WIDTH, x=0, y=y)))
        y += 1
        width = WIDTH // min(len(row), 3)
        for i, panel in enumerate(row):
            panel.gridPos = GridPos(h=8, w=width, x=(i % 3) * width, y=y + (i // 3) * 8)
        panels += row
        y += 8 * ((len(row) + 2) // 3)
    templating = Templating(list=[
        Template(name="datasource", label="Prometheus", type="datasource", query="prometheus"),
        Template(name="rig", label="Rig", type="query", dataSource=DS, query="label_values(teleop_session_info, rig)",
                 includeAll=True, multi=True, default="$__all"),
    ])
    return Dashboard(title="teleop_flywheel fleet", uid=UID, tags=["teleop_flywheel"], timezone="browser",
                     refresh="30s", time=Time("now-24h", "now"), panels=panels, templating=templating,
                     description="Generated by teleop_flywheel.fleet.dashboard (docs/fleet.md)").auto_panel_ids()


def render() -> str:
    """The dashboard's JSON, as Grafana imports it."""
    from grafanalib._gen import DashboardEncoder

    return json.dumps(build().to_json_data(), cls=DashboardEncoder, indent=2, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="write (or check) the fleet's Grafana dashboard JSON")
    parser.add_argument("--out", type=Path, default=SHIPPED, help=f"where (default {SHIPPED})")
    parser.add_argument("--check", action="store_true", help="exit 1 if the file differs from what would be written")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = args.out.read_text(encoding="utf-8") if args.out.is_file() else ""
        if current != text:
            print(f"{args.out} is stale: run python -m teleop_flywheel.fleet.dashboard", file=sys.stderr)
            return 1
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_name(args.out.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(args.out)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
