"""A finished bag replayed onto disk the way the recorder writes it: a growing MCAP, then metadata.yaml.

What `ingest` sees of an episode being recorded (`data/convert/preencode.py`), made from any closed bag:
the destination's MCAP is created exclusively and gets the source's top-level records one at a
time, flushed after each chunk like the recorder's writer; the bag's other files (metadata.yaml
last, as the recorder closes) follow the footer. `pace` is called before each chunk with the log
time of its last message, so a caller can replay in real time (the ingest benchmark) or step a
watcher between chunks (tests).
"""
from __future__ import annotations

import shutil
import struct
from collections.abc import Callable
from pathlib import Path

from mcap.opcode import Opcode

from teleop_flywheel.recording.mcap.scan import MAGIC, open_regular, record_spans


def grow(src: Path, dst: Path, pace: Callable[[int], None] = lambda _log_ns: None) -> Path:
    """Write bag directory `src` into the new directory `dst` record by record; the MCAP written."""
    mcaps = sorted(src.glob("*.mcap"))
    if len(mcaps) != 1:
        raise ValueError(f"{src}: expected one .mcap, found {len(mcaps)}")
    chunks = set(record_spans(mcaps[0], Opcode.CHUNK))
    dst.mkdir(parents=True)
    out = dst / mcaps[0].name
    with open_regular(mcaps[0]) as f, open(out, "xb") as w:
        w.write(f.read(len(MAGIC)))
        for offset, length in record_spans(mcaps[0]):
            f.seek(offset)
            record = f.read(length)
            if (offset, length) in chunks:
                (end_log_ns,) = struct.unpack_from("<Q", record, 9 + 8)  # after the prefix: start, end
                pace(end_log_ns)
            w.write(record)
            w.flush()
        w.write(f.read())  # the closing magic
    others = sorted(p for p in src.iterdir() if p.is_file() and p.suffix != ".mcap")
    for p in sorted(others, key=lambda p: p.name == "metadata.yaml"):
        shutil.copy2(p, dst / p.name)
    return out
