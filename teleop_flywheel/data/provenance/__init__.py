"""Where training data came from (docs/data_engine.md): `manifest` freezes a set of
content-addressed episodes (`manifest_hash`: the content ids) chosen by `filter_expr` (filter
expressions over the episodes table, which `curate --drop-plan` also reads), `materialize` turns one
into what training reads (its episode indices, or a dataset of exactly its episodes), `lineage`
records which manifest trained which checkpoint, in the registry `lineage_store` keeps (SQLite)."""
from teleop_flywheel.data.provenance.lineage_store import (
    ENV,
    FORMAT,
    LEGACY_FORMAT,
    Registry,
    content_files,
    content_fingerprint,
    default_registry,
    legacy_backup,
)

__all__ = ["ENV", "FORMAT", "LEGACY_FORMAT", "Registry", "content_files", "content_fingerprint", "default_registry",
           "legacy_backup"]
