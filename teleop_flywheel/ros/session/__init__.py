"""A session's machinery: `launch/` starts its graph (one description for `ros2 launch` and the
supervisor), `foxglove/` shows it live (WebSocket server, 3D arms, the layout), `trials` walks an
evaluation protocol on it (`TrialDriver`, attended or unattended), `clients` are the service and
status clients of its nodes, `console_view` the operator console's screen (no ROS)."""
