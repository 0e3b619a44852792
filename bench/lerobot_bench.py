"""What the benchmarks that need LeRobot share (`loader.py`, `rollout.py`): they run only under an
interpreter that has LeRobot 0.4.x, offline."""
from __future__ import annotations

import os
import sys


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
