"""The data engine (no ROS): a room per stage of the flywheel.

- `validate/`: PASS/FAIL per episode with reason codes (the checks, the one decode path, time base);
- `convert/`: bags to LeRobot v3.0 (frames, alignment, video), `ingest` that keeps a dataset
  current, encoding ahead (`preencode`), the reports refreshed after each append, and `doctor`;
- `reports/`: audit, data card, flywheel statistics, plots, `info` of a bag;
- `curation/`: per-episode scores, start-state coverage, sample weights: what to train on and record next;
- `provenance/`: manifests of content-addressed episodes and the lineage of checkpoints;
- `formats/`: other training stacks' formats (ALOHA/ACT, robomimic, RLDS, MCAP bags, LeRobot v2.1),
  a registry of exporters and importers, and the `export` and `import` verbs (docs/formats.md);
- `lerobot/`: the LeRobot v3.0 layout — format, reading a dataset, appending to it atomically,
  consistency.

`parallel` (process pools, Ray) and `filelock` serve every room; `migrate` (the verb) upgrades bags,
manifests and datasets in an older format of ours into copies in the current one.
"""
