"""What a fresh interpreter has imported after some code ran: checks that an entry point stays light."""
from __future__ import annotations

import ast
import os
import subprocess
import sys

from support.paths import ROOT


def loaded_after(code: str, *modules: str) -> list[str]:
    """Those of `modules` (each a module and its submodules) a fresh interpreter has loaded after
    running `code`, which must succeed (its output is ignored)."""
    probe = (f"{code}\nimport sys as _sys\n"
             f"print(sorted(m for m in _sys.modules if any(m == p or m.startswith(p + '.') for p in {modules!r})))\n")
    res = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert res.returncode == 0, res.stderr
    return list(ast.literal_eval(res.stdout.strip().splitlines()[-1]))
