"""The bodies of the verbs a user runs on ROS (docs/cli.md), one module per verb, each imported by
its door in `cli/verbs/` only when the verb runs: `run` (a session), `demo` (the main job on
simulated hardware, with `demo_outputs`), `mirror`, `console`, `replay` (a bag to Foxglove or onto
the ROS graph), `view` (the live session to Foxglove) and `eval_watch` (every new checkpoint
evaluated in the simulator). What they share is `ros/session/`'s machinery."""
