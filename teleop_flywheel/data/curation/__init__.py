"""What to train on and what to record next (docs/dataset_reports.md).

- `curate`: per-episode scores, duplicates, a drop plan, and where to send operators next;
- `stored_scores`: the scores kept in the dataset, brought up to date by every append;
- `coverage`: start-state coverage (farthest-point order, Halton targets, the covering radius);
- `weights`: the sample weights training draws frames with (SPEC §5).
"""
