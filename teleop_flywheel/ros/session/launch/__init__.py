"""Starting a session's nodes: `graph` (which nodes, with which parameters and remappings),
`supervisor` (one process per node, stopped together), `launch_description` (the same graph for
`ros2 launch`), and the process prefixes `detach` and `exec_node`."""
