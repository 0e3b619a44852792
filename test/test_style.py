"""The code's style checks, in the suite so CI fails on them: ruff with the project's rules
(`ruff.toml`) over the package, the tests and the benchmarks (CONTRIBUTING.md, "Checks")."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from support.paths import ROOT

ROOT = ROOT


def test_ruff_finds_nothing() -> None:
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    assert ruff, "ruff is a dev requirement (pip install -e '.[dev]')"
    res = subprocess.run([ruff, "check", "teleop_flywheel", "test", "bench"], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-1000:]
