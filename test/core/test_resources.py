"""`core.resources.config_path`: one function finds shipped config in a colcon install (ament
index) and in a pip install (package data), and an editable install reads the checkout."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.paths import ROOT

from teleop_flywheel.core import resources
from teleop_flywheel.core.resources import config_path

ROOT = ROOT
PROBE = "from teleop_flywheel.core.resources import config_path; print(config_path('validate.yaml'))"


def test_editable_install_reads_the_checkout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AMENT_PREFIX_PATH", raising=False)
    assert config_path("validate.yaml").read_bytes() == (ROOT / "config" / "validate.yaml").read_bytes()
    assert config_path("calibration/follower_sim.yaml").is_file()
    with pytest.raises(FileNotFoundError, match="nope.yaml"):
        config_path("nope.yaml")


def test_ament_share_directory_wins_when_the_package_is_indexed(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    prefix = tmp_path / "install"
    (prefix / "share" / "ament_index" / "resource_index" / "packages").mkdir(parents=True)
    (prefix / "share" / "ament_index" / "resource_index" / "packages" / resources.PACKAGE).write_text("")
    share = prefix / "share" / resources.PACKAGE / "config"
    share.mkdir(parents=True)
    (share / "validate.yaml").write_text("min_duration_s: 1.0\n")
    monkeypatch.setenv("AMENT_PREFIX_PATH", os.pathsep.join([str(tmp_path / "other"), str(prefix)]))
    assert config_path("validate.yaml") == share / "validate.yaml"
    # A file the workspace does not hold still comes from the package data.
    assert config_path("pedal.yaml").read_bytes() == (ROOT / "config" / "pedal.yaml").read_bytes()


def test_plain_pip_install_finds_its_package_data(tmp_path: Path) -> None:
    """A non-editable install has no checkout beside it: config must travel as package data."""
    target = tmp_path / "site"
    build = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target",
         str(target), str(ROOT)], capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr[-2000:]
    env = {k: v for k, v in os.environ.items() if k != "AMENT_PREFIX_PATH"}
    env["PYTHONPATH"] = str(target)
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, cwd=tmp_path,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    found = Path(out.stdout.strip())
    assert found == target / "teleop_flywheel" / "config" / "validate.yaml"
    assert found.read_bytes() == (ROOT / "config" / "validate.yaml").read_bytes()
