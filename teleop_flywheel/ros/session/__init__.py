"""A session's machinery: `launch/` starts its graph (one description for `ros2 launch` and the
supervisor), `foxglove/` shows it (the live session, a bag's playback, 3D arms, the layout),
`trials` walks an evaluation protocol on it (`TrialDriver`, attended or unattended), `republish`
puts a bag back onto its graph, `clients` are its nodes' service and status clients and
`console_view` the operator console's screen (no ROS)."""
