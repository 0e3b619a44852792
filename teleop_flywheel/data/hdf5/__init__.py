"""HDF5 episode files, the ALOHA/ACT layout (docs/formats.md): `aloha_export` writes one
`episode_N.hdf5` per episode of a dataset or manifest, the file ACT's reference loader reads;
`aloha_import` turns a directory of them into a LeRobot v3.0 dataset; `aloha_layout` holds the
names, units and joint order both share. h5py is an optional extra (`pip install '.[hdf5]'`)."""
