"""What a dataset or a bag holds, for people (docs/dataset_reports.md).

- `audit`: lengths, dead air, joint ranges, start spread, content checks;
- `card`: the data card beside a dataset; `plots`: the figures (the audit's and curation's);
- `flywheel_stats`: intervention rates per checkpoint, week, label and operator;
- `bag_info`: the `info` verb, `ros2 bag info` plus our episode metadata and verdict.
"""
