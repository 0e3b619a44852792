"""Content ids of YAML documents: what a file says, not how it is written.

An evaluation protocol and a task spec are identified by their content, so two files that differ
only in key order, layout, comments or number spelling (`30` and `30.0`) have one id, and an
episode recorded under a spec names it by that id forever.
"""
from __future__ import annotations

import hashlib
import json
from typing import Any


def canonical(value: Any) -> Any:
    """Every number as a float, mapping keys and any other scalar (a YAML date, say) as text."""
    if isinstance(value, dict):
        return {str(k): canonical(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [canonical(v) for v in value]
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, (int, float)):
        return float(value)
    return str(value)


def canonical_hash(data: dict[str, Any]) -> str:
    """16 hex digits of sha256 over the canonical content as sorted-key compact JSON."""
    text = json.dumps(canonical(data), sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
