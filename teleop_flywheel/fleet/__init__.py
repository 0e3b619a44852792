"""A fleet's live health (docs/fleet.md): `session_metrics` turns what one rig's session publishes
into Prometheus metrics (no ROS), `endpoint` serves them, `dashboard` generates the Grafana dashboard
in config/grafana/."""
