"""Where training data came from (docs/data_engine.md): `manifest` freezes a set of
content-addressed episodes (`manifest_hash`: the content ids), `lineage` records which manifest
trained which checkpoint."""
