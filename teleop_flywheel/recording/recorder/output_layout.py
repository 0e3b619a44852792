"""A session's output folder (the recorder's `output_dir`): what lies where, and what may not.

    <output_dir>/<episode>/             one bag per episode (the recorder), verdict.json beside its files
    <output_dir>/discarded/<episode>/   episodes the operator discarded (moved, never deleted)
    <output_dir>/quarantine/<CODE>/     bags a session's ingest rejected, with <bag>.json saying why
    <output_dir>/dataset/               the dataset a session's ingest keeps current (`ingest_dataset`),
    <output_dir>/dataset.ingest.json    and beside it its state, locks and audit page, and
    <output_dir>/dataset.ingest.segments/  the camera video it encodes while episodes record

Security rule: nothing in a session's ROS graph names a path outside the session's own folder, so
a session's ingest dataset lies strictly inside `output_dir` (`dataset_in`). Light on purpose
(no data engine): the session graph imports it.
"""
from __future__ import annotations

import os
from pathlib import Path

from teleop_flywheel.recording.recorder.verdict import DISCARDED_DIR

SESSION_DATASET = "dataset"  # a session's ingest: `<output_dir>/dataset` unless it says otherwise
SESSION_QUARANTINE = "quarantine"  # a session's ingest moves rejected bags to `<output_dir>/quarantine/`
RESERVED = (SESSION_QUARANTINE, DISCARDED_DIR)  # folders bags are moved into: never a dataset's


def dataset_in(output_dir: str | os.PathLike[str], dataset: str | os.PathLike[str] = SESSION_DATASET,
               real: bool = False) -> Path:
    """Where a session's ingest keeps its dataset: `dataset` relative to the session's `output_dir`
    (or absolute), strictly inside it and not in the folders bags are moved into; ValueError naming
    both otherwise. `real`: with symlinks resolved too (the node's check at start; the graph's, made
    before anything exists, is lexical: `..` cannot climb out)."""
    text = str(dataset).strip()
    base = os.path.abspath(os.path.expanduser(str(output_dir)))
    path = os.path.abspath(os.path.join(base, os.path.expanduser(text))) if text else base
    if real:
        base, path = os.path.realpath(base), os.path.realpath(path)
    if path == base or os.path.commonpath([base, path]) != base:
        raise ValueError(f"ingest dataset {text or repr(text)} is not inside the session's output_dir {output_dir}"
                         + (f" (it resolves to {path})" if real and text else "")
                         + f": a session's ingest keeps its dataset in the session's own folder; give a path "
                           f"relative to output_dir (default {SESSION_DATASET})")
    if Path(os.path.relpath(path, base)).parts[0] in RESERVED:
        raise ValueError(f"ingest dataset {text}: {' and '.join(RESERVED)} in output_dir are where bags are moved "
                         f"to; choose another folder (default {SESSION_DATASET})")
    return Path(path)
