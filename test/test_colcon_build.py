"""`colcon build` of this ament_python package puts everything where `ros2 run`/`ros2 launch` look."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.paths import ROOT

ROOT = ROOT


def test_colcon_build_installs_scripts_launch_config_and_marker(tmp_path: Path) -> None:
    colcon = shutil.which("colcon") or str(Path(sys.executable).with_name("colcon"))
    if not Path(colcon).exists():
        pytest.skip("colcon is not installed (pip install -e '.[dev]' brings it)")
    src = tmp_path / "src" / "teleop_flywheel"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(".venv", ".git", "build", "install", "log",
                                                             "__pycache__", "*.egg-info", ".pytest_cache"))
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.setdefault("AMENT_PREFIX_PATH", sys.prefix)
    proc = subprocess.run([colcon, "build", "--packages-select", "teleop_flywheel"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    install = tmp_path / "install" / "teleop_flywheel"
    lib = install / "lib" / "teleop_flywheel"
    for exe in ("arm_driver", "teleop", "pedal", "policy", "camera", "recorder", "metrics", "teleop-flywheel"):
        assert (lib / exe).is_file(), f"{exe} not in {lib}"
    share = install / "share" / "teleop_flywheel"
    assert {"teleop.launch.py", "rollout.launch.py", "sim.launch.py"} <= {p.name for p in (share / "launch").iterdir()}
    assert (share / "config" / "foxglove_layout.json").is_file() and (share / "config" / "pedal.yaml").is_file()
    assert (share / "config" / "calibration" / "follower_sim.yaml").is_file()
    assert (share / "config" / "prometheus" / "rules.yml").is_file() and (share / "config" / "grafana" /
                                                                           "dashboard.json").is_file()
    assert (share / "urdf" / "so101.urdf").is_file()
    # The one resources lookup finds the colcon install's files through the ament index.
    probe = ("from teleop_flywheel.core.resources import package_file as f; "
             "print(f('config', 'validate.yaml')); print(f('urdf', 'so101.urdf'))")
    env["AMENT_PREFIX_PATH"] = str(install)
    found = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60)
    assert found.returncode == 0, found.stderr
    assert found.stdout.split() == [str(share / "config" / "validate.yaml"), str(share / "urdf" / "so101.urdf")]
    assert (share / "package.xml").is_file()
    assert (install / "share" / "ament_index" / "resource_index" / "packages" / "teleop_flywheel").is_file()
