"""What every benchmark does with its result: one JSON file in bench/results/, replaced whole (never
half-written), and the same text on stdout."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def load_average() -> list[float]:
    return [round(x, 1) for x in os.getloadavg()]


def write_result(path: str | Path, result: dict[str, Any]) -> None:
    """The result JSON at `path` (replaced whole, never half-written), and on stdout."""
    # Imported here: some benchmarks put the repository on sys.path only after their imports.
    from teleop_flywheel.core.files import replace_atomic  # noqa: PLC0415

    text = json.dumps(result, indent=2) + "\n"
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    replace_atomic(path, text)
    print(text, end="")
