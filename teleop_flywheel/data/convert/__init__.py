"""Bags to LeRobot v3.0 (docs/convert.md, docs/ingest.md).

- `converter`: the `convert` verb — validated episodes only, appended atomically;
- `frames`: one episode's frames on the dataset's grid (`align`: zero-order hold), its
  calibrations (`calibrations`), per-frame labels (`frame_labels`) and video (`segments`);
- `append_rules`: what may be appended to an existing dataset;
- `ingest_loop`: the `ingest` verb, keeping a dataset current while sessions record;
  `preencode`: video encoded ahead;
- `refresh`: the validation record, data card and weights made current after every append;
- `doctor`: is a dataset consistent, and what can be repaired without loss.
"""
