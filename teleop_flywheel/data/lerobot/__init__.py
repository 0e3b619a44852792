"""LeRobot v3.0 datasets exactly as LeRobot 0.4.x lays them out: format, reader."""
