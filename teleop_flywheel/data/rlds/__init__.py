"""RLDS, the episodic format of TensorFlow Datasets and Open X-Embodiment (docs/formats.md):
`rlds_export` writes a dataset's or a manifest's episodes as a TFDS dataset directory (tfrecord
shards, `dataset_info.json`, `features.json`) that `tfds.builder_from_directory` reads.
TensorFlow Datasets is an optional extra (`pip install '.[rlds]'`)."""
