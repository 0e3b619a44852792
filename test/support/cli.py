"""Run a `teleop-flywheel` command in-process and take what it printed."""
from __future__ import annotations

import pytest

from teleop_flywheel.cli import main as cli_main


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `teleop-flywheel ARGV...`."""
    code = cli_main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err
