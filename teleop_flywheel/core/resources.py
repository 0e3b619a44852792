"""The one place that finds the package's shipped files (`config/`, `urdf/`), in every install.

Both folders live at the package root, as ROS packages keep them, and are installed twice:
- by `colcon build` into `<prefix>/share/teleop_flywheel/<folder>` (where `ros2 launch` users
  look; found through the ament index, i.e. `AMENT_PREFIX_PATH`);
- by `pip install` as package data `teleop_flywheel.<folder>` (setup.py maps the package to the
  folder, so an editable install reads the checkout itself).
The ament share directory wins when it holds the file: a colcon workspace's copy is the one
its user edits.
"""
from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

PACKAGE = "teleop_flywheel"


FOLDERS = ("config", "urdf")


def _ament_share() -> Path | None:
    for prefix in filter(None, os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep)):
        marker = Path(prefix) / "share" / "ament_index" / "resource_index" / "packages" / PACKAGE
        if marker.is_file():
            return Path(prefix) / "share" / PACKAGE
    return None


def package_file(folder: str, name: str) -> Path:
    """A shipped file, e.g. `("config", "validate.yaml")`, `("urdf", "so101.urdf")`, as a real path."""
    if folder not in FOLDERS:
        raise ValueError(f"no shipped folder {folder!r}; expected one of {FOLDERS}")
    share = _ament_share()
    if share is not None and (share / folder / name).is_file():
        return share / folder / name
    packaged = Path(str(resources.files(f"{PACKAGE}.{folder}").joinpath(name)))
    if packaged.is_file():
        return packaged
    raise FileNotFoundError(
        f"{folder}/{name}: not in the installed package ({share or 'no ament index entry'}; {packaged.parent}); "
        "reinstall teleop_flywheel")


def config_path(name: str) -> Path:
    """A shipped config file (`"validate.yaml"`, `"calibration/leader_sim.yaml"`)."""
    return package_file("config", name)
