"""Where training data came from (docs/data_engine.md): `manifest` freezes a set of
content-addressed episodes (`manifest_hash`: the content ids), `materialize` turns one into what
training reads (its episode indices, or a dataset of exactly its episodes), `lineage` records
which manifest trained which checkpoint."""
