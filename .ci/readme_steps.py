#!/usr/bin/env python3
"""The README's commands, taken from the README itself (stdlib only: CI runs it before any install).

The README's fenced blocks carry a tag after the language, e.g. ```` ```bash setup ````. Steps:

    install  the first line of the `setup` block (create the venv, pip install the extras)
    demo     the rest of the `setup` block (the demo run)
    test     the `test` block (the test command)

`python3 .ci/readme_steps.py STEP` prints that step's command; `.ci/run` runs what it prints, so CI
runs exactly what a reader copies (test/test_readme.py checks that `.ci/run` does nothing else).
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"
FENCE = re.compile(r"^```(?P<lang>[A-Za-z0-9_+-]+)[ \t]+(?P<tag>[A-Za-z0-9_-]+)[ \t]*\n(?P<body>.*?)^```[ \t]*$", re.M | re.S)


def blocks(text: str) -> dict[str, list[str]]:
    """{tag: the block's non-empty lines} for every tagged fenced block."""
    out: dict[str, list[str]] = {}
    for m in FENCE.finditer(text):
        if m.group("tag") in out:
            raise SystemExit(f"README.md: two blocks tagged {m.group('tag')!r}")
        out[m.group("tag")] = [line for line in m.group("body").splitlines() if line.strip()]
    return out


def step(name: str, text: str | None = None) -> str:
    found = blocks(README.read_text() if text is None else text)
    if name in ("install", "demo"):
        lines = found.get("setup") or []
        if len(lines) < 2:
            raise SystemExit("README.md: the `setup` block must hold the install line, then the demo")
        return lines[0] if name == "install" else "\n".join(lines[1:])
    if name == "test":
        lines = found.get("test") or []
        if len(lines) != 1:
            raise SystemExit("README.md: the `test` block must hold exactly one command")
        return lines[0]
    raise SystemExit(f"unknown step {name!r}: install, demo or test")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    print(step(sys.argv[1]))
