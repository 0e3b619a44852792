"""What to train on and what to record next (docs/dataset_reports.md).

- `curate`: per-episode scores, duplicates, a drop plan, and where to send operators next;
- `coverage`: start-state coverage (farthest-point order, Halton targets, the covering radius);
- `weights`: the sample weights training draws frames with (SPEC §5).
"""
