"""The one place that finds the package's shipped files (`config/`), in every kind of install.

`config/` lives at the package root, as ROS packages keep it, and is installed twice:
- by `colcon build` into `<prefix>/share/teleop_flywheel/config` (where `ros2 launch` users
  look; found through the ament index, i.e. `AMENT_PREFIX_PATH`);
- by `pip install` as package data `teleop_flywheel.config` (setup.py maps the package to the
  `config/` folder, so an editable install reads the checkout itself).
The ament share directory wins when it holds the file: a colcon workspace's config is the one
its user edits.
"""
from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

PACKAGE = "teleop_flywheel"


def _ament_config() -> Path | None:
    for prefix in filter(None, os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep)):
        marker = Path(prefix) / "share" / "ament_index" / "resource_index" / "packages" / PACKAGE
        if marker.is_file():
            return Path(prefix) / "share" / PACKAGE / "config"
    return None


def config_path(name: str) -> Path:
    """A shipped config file (`"validate.yaml"`, `"calibration/leader_sim.yaml"`) as a real path."""
    ament = _ament_config()
    if ament is not None and (ament / name).is_file():
        return ament / name
    packaged = Path(str(resources.files(f"{PACKAGE}.config").joinpath(name)))
    if packaged.is_file():
        return packaged
    raise FileNotFoundError(
        f"{name}: not in the installed config ({ament or 'no ament index entry'}; {packaged.parent}); "
        "reinstall teleop_flywheel")
