"""ALOHA/ACT episode files (docs/formats.md): `exporter` writes one `episode_N.hdf5` per episode
of a dataset or manifest, the file ACT's reference loader reads; `importer` turns a directory of
them into a LeRobot v3.0 dataset; `episode_file` holds the names, units and joint order both
share. h5py is an optional extra (`pip install '.[hdf5]'`)."""
