"""LeRobot v2.1 datasets in: the Hub's older layout migrated to v3.0 as LeRobot's own converter does.

`v21_import.py` is `import --from lerobot-v2.1 SRC OUT` (data/import_dataset.py): every file of SRC
checked first, then its rows, stats and videos carried into a new v3.0 dataset, staged and renamed
into place (whole or absent). docs/formats.md says what is carried and what is refused.
"""
