"""One module per node executable: parameters, topics and services over the ROS-free classes."""
