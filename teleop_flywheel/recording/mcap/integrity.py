"""Cross-checks between what a bag's parts say about each other (no ROS import).

Checked when a bag is opened (`recording.reader.open_bag`), so every reader sees the same damage:

- records: the same record (channel, log time, sequence, payload) twice is a duplicated chunk or
  record, not data. Several publishers may share a topic (`/diagnostics`) and a restarted camera
  restarts its sequence numbers, so it is the whole record that must be unique, never
  (channel, sequence);
- counts: the messages read per topic against `metadata.yaml`'s `topics_with_message_count`
  (the MCAP's own Statistics record is compared by `recording.scan`);
- episode metadata: the MCAP record (`teleop_flywheel.episode`) and `metadata.yaml` `custom_data`
  must be equal. The MCAP is the source of truth (its data CRC covers the record), so a reader that
  needs the metadata takes the MCAP's (`episode_record`) and refuses a disagreement.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np


def duplicate_records(topic: str, log_ns: np.ndarray, publish_ns: np.ndarray, sequence: np.ndarray,
                      data: list[bytes]) -> str | None:
    """A line naming the duplicated records of one topic, or None."""
    seen: set[tuple[int, int, int, int, int]] = set()
    dups = 0
    first: int | None = None
    for i, d in enumerate(data):
        key = (int(log_ns[i]), int(publish_ns[i]), int(sequence[i]), len(d), hash(d))
        if key in seen:
            dups += 1
            first = i if first is None else first
        else:
            seen.add(key)
    if not dups:
        return None
    return (f"{topic}: {dups} record(s) identical to an earlier one (same log time, sequence and payload; "
            f"first at message {first}): a duplicated chunk or record")


def yaml_count_problems(meta_yaml: Mapping[str, Any] | None, counts: Mapping[str, int]) -> list[str]:
    """Disagreements between metadata.yaml's per-topic message counts and the messages read."""
    if not meta_yaml:
        return []
    out = []
    try:
        listed = {str(t["topic_metadata"]["name"]): int(t["message_count"])
                  for t in meta_yaml.get("topics_with_message_count") or []}
        total = meta_yaml.get("message_count")
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        return [f"metadata.yaml topics_with_message_count unreadable: {exc}"]
    for topic in sorted(set(listed) | set(counts)):
        if listed.get(topic, 0) != counts.get(topic, 0):
            out.append(f"metadata.yaml says {listed.get(topic, 0)} messages on {topic}, the MCAP has "
                       f"{counts.get(topic, 0)}")
    if total is not None and not out and int(total) != sum(counts.values()):
        out.append(f"metadata.yaml message_count {total}, the MCAP has {sum(counts.values())}")
    return out


def custom_data(meta_yaml: Mapping[str, Any] | None) -> dict[str, str] | None:
    """metadata.yaml custom_data as strings (None when absent)."""
    if not meta_yaml:
        return None
    raw = meta_yaml.get("custom_data")
    if not isinstance(raw, Mapping):
        return None
    return {str(k): "" if v is None else str(v) for k, v in raw.items()}


def metadata_disagreement(record: Mapping[str, str] | None, meta_yaml: Mapping[str, Any] | None) -> str | None:
    """Why the MCAP episode record and metadata.yaml custom_data disagree, or None if they agree.

    `custom_data` may hold keys the writer added beside the episode's (`BagWriter(custom_data=...)`);
    every key of the record must be there with the same value. A bag with neither (a foreign rosbag2
    bag) agrees.
    """
    custom = custom_data(meta_yaml)
    if record is None:
        return None if not custom or "episode_name" not in custom else \
            "metadata.yaml custom_data holds episode metadata but the MCAP has no episode record"
    if custom is None:
        return None if meta_yaml is None else "the MCAP has an episode record but metadata.yaml has no custom_data"
    differ = sorted(k for k in record if custom.get(k) != record[k])
    if differ:
        return f"episode metadata in the MCAP and metadata.yaml custom_data disagree on {', '.join(differ[:6])}"
    return None
