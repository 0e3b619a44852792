"""A small tmpfs for the full-disk tests: mounted for the test (skipped where mounting needs a root
or CAP_SYS_ADMIN the run lacks), and unmounted lazily after it.

Lazily, because a file still open on it would make a plain unmount fail the test for something it
does not claim. Who still holds one is named in a warning, not hidden: that is a handle someone
leaked, worth finding on its own."""
from __future__ import annotations

import os
import subprocess
import warnings
from pathlib import Path

import pytest


def mount_tmpfs(path: Path, size: str) -> None:
    """A tmpfs of `size` (mount's syntax: 2m, 400k) at `path`, made if missing."""
    path.mkdir(parents=True, exist_ok=True)
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                         capture_output=True, text=True)
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root/CAP_SYS_ADMIN): {res.stderr.strip()}")


def holders(path: Path) -> list[str]:
    """The processes with a file or their working directory under `path`: "pid command: file"."""
    inside = str(path) + os.sep
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            links = [proc / "cwd", *(proc / "fd").iterdir()]
            targets = [t for link in links if (t := os.readlink(link)).startswith(inside)]
            if targets:
                command = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:100]
                found += [f"{proc.name} {command}: {t}" for t in targets]
        except OSError:  # a process that ended meanwhile, or one we may not look into
            continue
    return found


def unmount(path: Path) -> None:
    held = holders(path)
    subprocess.run(["umount", "-l", str(path)], check=False)
    if held:
        warnings.warn(f"{path}: still open at unmount: {'; '.join(held)}", stacklevel=2)
