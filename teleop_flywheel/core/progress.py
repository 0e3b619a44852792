"""A progress bar for a command's jobs, where a person is watching: on a terminal a bar, in a log or
a pipe one line saying what runs. tqdm is imported only for the bar."""
from __future__ import annotations

import sys
from typing import Any


class _NoBar:
    def update(self, n: int = 1) -> None:
        del n

    def __enter__(self) -> _NoBar:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def progress(total: int, desc: str | None, unit: str = "bag") -> Any:
    """A progress bar on stderr when it is a terminal (`update(n)`); in a log file or a pipe one line
    saying what runs (a bar there is a single line of carriage returns); nothing without `desc`."""
    if desc is None:
        return _NoBar()
    if not sys.stderr.isatty():
        print(f"{desc}: {total} {unit if total == 1 else unit + 's'}...", file=sys.stderr, flush=True)
        return _NoBar()
    from tqdm import tqdm  # noqa: PLC0415

    return tqdm(total=total, desc=desc, unit=unit)
