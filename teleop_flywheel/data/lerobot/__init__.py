"""LeRobot v3.0 datasets exactly as LeRobot 0.4.x lays them out: `v3_layout` (the layout: files,
features, stats, video encoding), `encoder_process` (every encode in a child process, killed when it
stalls),
`flywheel_schema` (our layout on top of it: its version and the features each version renamed),
`dataset` (`LeRobotDataset`: read any such dataset), `append` (episodes staged for an append),
`commit` (the atomic commit of an append), `consistency` (what `doctor` checks and repairs) and
`episode_table` (per-episode facts from any dataset's episodes table)."""
