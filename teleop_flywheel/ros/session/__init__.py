"""A session's machinery: `launch/` starts its graph (one description for `ros2 launch` and the
supervisor), `foxglove/` shows it live (WebSocket server, 3D arms, the layout)."""
