"""The verbs a user runs on ROS (docs/cli.md): `run` (a session), `demo` (the main job on simulated
hardware, with `demo_outputs`), `mirror`, `console` (with `console_view`), `replay` (a bag to
Foxglove, or to the ROS graph through `replay_ros`), `evaluation_walk` (a protocol on a session) and
`eval_watch` (every new checkpoint evaluated in the simulator); `clients` are their service clients."""
