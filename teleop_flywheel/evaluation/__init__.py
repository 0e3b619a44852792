"""Policy evaluation without ROS: protocol files, statistics (Wilson, Fisher, Holm), result tables, and
which checkpoints `eval watch` evaluates next."""
