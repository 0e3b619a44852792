"""Where the repository's files are, for tests at any depth of test/."""
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "teleop_flywheel"
