"""Frame metadata inside a JPEG: one COM (comment) segment that every decoder skips.

The synthetic camera records in each frame what it drew — the instant whose arm pose the image
shows and which follower joint samples that pose came from — so a test or the data engine can
know a frame's true content time without trusting its stamp. The bytes ride in the
`sensor_msgs/CompressedImage` data the recorder stores untouched; OpenCV, PyAV, browsers and
Foxglove ignore COM segments.

Segment: `FF FE`, a 2-byte big-endian length (itself included), then `teleop_flywheel.frame `
and a compact JSON object; placed after SOI (and after a JFIF APP0 segment if the encoder wrote
one first). The synthetic camera's object (`hw/camera/synthetic.py`, times are ROS time ns like
header stamps):

    {"capture_ns": exposure instant (the pixel timecode's value),
     "pose_ns": the instant whose follower pose was drawn (= capture_ns when interpolated),
     "samples": [header stamp of the follower sample at or before pose_ns, of the one after (null: held)],
     "held_ms": how far the drawn pose is behind the exposure (0 when interpolated; null: no pose)}

and the camera node adds to every frame, of every source, `"instance"`: its camera instance, a
new random id (12 hex digits) each time it opens the device — the validator pools a camera's lag
per instance (`data/validate/lag_pool.py`).
"""
from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from typing import Any

PREFIX = b"teleop_flywheel.frame "
SOI, COM, APP0, SOS = b"\xff\xd8", 0xFE, 0xE0, 0xDA


def add(jpeg: bytes, meta: Mapping[str, Any]) -> bytes:
    """`jpeg` with `meta` in a COM segment; ValueError if it is not a JPEG or the text is too long."""
    if not jpeg.startswith(SOI):
        raise ValueError("not a JPEG (no SOI marker)")
    body = PREFIX + json.dumps(meta, separators=(",", ":"), sort_keys=True).encode()
    if len(body) + 2 > 0xFFFF:
        raise ValueError(f"frame metadata of {len(body)} bytes does not fit a JPEG segment")
    at = 2
    if jpeg[2:4] == bytes((0xFF, APP0)) and len(jpeg) >= 6:  # keep JFIF's APP0 first, as the standard wants
        at = 4 + struct.unpack(">H", jpeg[4:6])[0]
    return jpeg[:at] + bytes((0xFF, COM)) + struct.pack(">H", len(body) + 2) + body + jpeg[at:]


def read(jpeg: bytes | bytearray | memoryview) -> dict[str, Any] | None:
    """The metadata `add` wrote, or None (no such segment, or not a JPEG)."""
    data = bytes(jpeg[:65536 * 4]) if len(jpeg) > 65536 * 4 else bytes(jpeg)
    if not data.startswith(SOI):
        return None
    pos = 2
    while pos + 4 <= len(data) and data[pos] == 0xFF:
        marker = data[pos + 1]
        if marker == SOS:
            return None
        length = struct.unpack(">H", data[pos + 2:pos + 4])[0]
        if marker == COM and data[pos + 4:pos + 2 + length].startswith(PREFIX):
            try:
                value = json.loads(data[pos + 4 + len(PREFIX):pos + 2 + length])
            except (ValueError, UnicodeDecodeError):
                return None
            return value if isinstance(value, dict) else None
        pos += 2 + length
    return None
