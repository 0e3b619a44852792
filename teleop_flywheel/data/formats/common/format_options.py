"""The options an `export --to FORMAT` or `import --from FORMAT` verb shares, checked one way for every format.

- `jpeg_quality`: `--jpeg` in 1..100, or the format's default where it is not given;
- `refuse_options`: a usage error (exit 2, nothing written) for options given that the format does
  not use, rather than ignoring them: `--workers` and `--executor ray` for a format written as one
  ordered stream, `--task` for a dataset that states its own.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import overload

from teleop_flywheel.core.errors import UsageError
from teleop_flywheel.data.formats import ExportRequest, ImportRequest

PARALLEL_OPTIONS = ("workers", "executor")
SEQUENTIAL_FIX = "leave it out: the output is one stream written in episode order by one process (docs/formats.md)"


@overload
def jpeg_quality(given: int | None, default: int, fix: str) -> int: ...
@overload
def jpeg_quality(given: int | None, default: None, fix: str) -> int | None: ...
def jpeg_quality(given: int | None, default: int | None, fix: str) -> int | None:
    """`--jpeg`'s quality, `default` where it is not given; an error out of 1..100 (`fix`: what to give)."""
    quality = default if given is None else given
    if quality is not None and not 1 <= quality <= 100:
        raise UsageError(f"JPEG quality {quality} is out of range", where="--jpeg", fix=fix)
    return quality


def refuse_options(req: ExportRequest | ImportRequest, names: Iterable[str], fmt: str, fix: str) -> None:
    """A usage error naming every option of `names` (the request's fields) given: not at its default."""
    defaults = {f.name: f.default for f in dataclasses.fields(req)}
    given = [f"--{name.replace('_', '-')}" for name in names if getattr(req, name) != defaults[name]]
    if given:
        raise UsageError(f"{', '.join(given)} {'does' if len(given) == 1 else 'do'} not apply to {fmt}",
                         where=given[0], fix=fix)
