"""What a dataset or a bag holds, for people (docs/dataset_reports.md).

- `audit`: lengths, dead air, joint ranges, start spread, content checks;
- `curate`: per-episode scores, start-state `coverage`, where to send operators next;
- `card`: the data card beside a dataset; `weights`: sample weights; `plots`: the figures;
- `flywheel_stats`: intervention rates per checkpoint, week, label and operator;
- `bag_info`: the `info` verb, `ros2 bag info` plus our episode metadata and verdict.
"""
