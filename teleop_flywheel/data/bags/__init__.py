"""Datasets back into bags: each episode of a LeRobot v3.0 dataset (or a manifest's) as the recorder's
own kind of MCAP bag, written by `recording.mcap.writer.BagWriter`, so Foxglove scrubs a dataset and
`validate` and `convert` read it back."""
