"""The only floor that imports rclpy and ROS messages.

- `nodes/`: thin nodes over the ROS-free classes (parameters, topics, services);
- `session/`: how a session starts (`launch/`: graph description, supervisor, launch files'
  description) and what Foxglove sees of it (`foxglove/`: live view, 3D arms, layout);
- `commands/`: the verbs a user runs — `run`, `demo`, `mirror`, `console`, `replay`, the
  evaluation walk;
- `params`: every node's parameters, declared once; `reference`: the generated reference docs.
"""
