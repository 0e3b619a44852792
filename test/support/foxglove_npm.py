"""Foxglove's own bag parsers as the oracle: npm `@mcap/core`, `@foxglove/rosmsg` and
`@foxglove/rosmsg2-serialization`, pinned in `test/support/foxglove/package.json` and run by node
(`decode_bag.mjs`). Tests that need them skip, saying why, where node or npm is missing."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from support.paths import ROOT

PARSERS = ROOT / "test" / "support" / "foxglove"


def decode_bag(mcap: Path) -> dict[str, dict[str, Any]]:
    """Every topic of the MCAP file as Foxglove decodes it: schema, encoding, count, errors, messages."""
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        pytest.skip("node/npm not on this machine (Foxglove's parsers are npm packages)")
    if not (PARSERS / "node_modules" / "@foxglove" / "rosmsg").is_dir():
        subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--silent"], cwd=PARSERS, check=True, timeout=300)
    out = subprocess.run(["node", str(PARSERS / "decode_bag.mjs"), str(mcap)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["topics"]  # type: ignore[no-any-return]
