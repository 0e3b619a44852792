"""What the benchmarks that need LeRobot share (`loader.py`, `rollout.py`): they run only under an
interpreter that has LeRobot 0.4.x, offline, and write one JSON result (atomically) and print it."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from teleop_flywheel.core.files import replace_atomic

RESULTS = Path(__file__).resolve().parent / "results"


def require_lerobot(script: str) -> bool:
    """True when LeRobot imports (and the Hugging Face hub is then kept offline); else one line
    saying how to run `script`, and False (the caller exits 2)."""
    try:
        import lerobot  # noqa: F401
    except ImportError:
        print(f"{script}: needs LeRobot 0.4.x (run it with a LeRobot venv's python)", file=sys.stderr)
        return False
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    return True


def load_average() -> list[float]:
    return [round(x, 1) for x in os.getloadavg()]


def write_result(path: str | Path, result: dict[str, Any]) -> None:
    """The result JSON at `path` (replaced whole, never half-written), and on stdout."""
    text = json.dumps(result, indent=2) + "\n"
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    replace_atomic(path, text)
    print(text, end="")
