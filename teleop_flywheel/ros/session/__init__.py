"""Sessions: the graph description both `ros2 launch` and the supervisor start, the operator
console, mirroring, the demo, bag playback and the evaluation walk."""
