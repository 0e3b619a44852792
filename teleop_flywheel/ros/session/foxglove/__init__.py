"""What Foxglove shows of a session: `view` (the live session over the Foxglove WebSocket
protocol), `playback` (a recorded bag, with the app's play, pause and seek), `arms3d` (both arms as
a 3D scene from their joint states) and `layout` (the panels)."""
