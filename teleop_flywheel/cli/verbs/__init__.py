"""One door per verb: `add_arguments(parser)` and `run(args) -> int` over library functions.

A verb's file carries the command's name (`lineage.py` is `teleop-flywheel lineage`); its library
takes typed arguments and lives on its floor. A verb that needs ROS imports its body from
`ros/commands/` inside `run`, so that `teleop-flywheel validate` never imports rclpy.
"""
