"""HDF5 files of other training stacks (docs/formats.md): `aloha_export` writes one `episode_N.hdf5`
per episode of a dataset or manifest, the file ACT's reference loader reads; `aloha_import` turns a
directory of them into a LeRobot v3.0 dataset; `aloha_layout` holds the names, units and joint order
both share; `robomimic_export` writes one robomimic file of `data/demo_N` groups with `mask/` filter
keys made from our labels. h5py is an optional extra (`pip install '.[hdf5]'`)."""
