"""The only floor that imports rclpy and ROS messages: thin nodes over the ROS-free classes, and
the sessions that start them (graph description, supervisor, launch, console, playback)."""
